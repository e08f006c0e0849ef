#include "daemon/router/relay.h"

#include "common/clock.h"
#include "daemon/cluster/signature.h"
#include "daemon/router/router.h"

namespace b3os::router {

Result<void> relay_signed(http::Exchange& ex, const std::string& node_url, const std::string& secret,
                          std::string_view route, http::ProxyOptions o, std::chrono::milliseconds connect_timeout) {
  auto addr = parse_node_url(node_url);
  if (!addr) return fail(addr.error());
  auto up = http::connect_tcp(addr->host, addr->port, connect_timeout);
  if (!up) return fail(up.error());
  const int64_t now = now_unix_ms();
  const std::string method = route.empty() ? std::string(ex.method()) : std::string(route) + ":" + std::string(ex.method());
  o.request_headers.emplace_back(std::string(cluster::kTimeHeader), std::to_string(now));
  o.request_headers.emplace_back(std::string(cluster::kSignatureHeader),
                                 cluster::sign_request(secret, method, o.target, now, ex.header("Authorization")));
  if (!route.empty()) o.request_headers.emplace_back(std::string(cluster::kRouteHeader), std::string(route));
  // A failure from here on is kUpstreamError: the node was reached (the caller must not try
  // another with a request that may have run).
  if (auto r = ex.proxy(**up, o); !r) return fail(ErrorCode::kUpstreamError, r.error().message);
  return {};
}

}  // namespace b3os::router
