#include "daemon/router/relay.h"

#include <strings.h>

#include "common/clock.h"
#include "daemon/cluster/signature.h"
#include "daemon/router/router.h"

namespace b3os::router {

namespace {
bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}
}  // namespace

Result<void> relay_signed(http::Exchange& ex, const std::string& node_url, const std::string& secret,
                          std::string_view route, http::ProxyOptions o, std::chrono::milliseconds connect_timeout) {
  auto addr = parse_node_url(node_url);
  if (!addr) return fail(addr.error());
  auto up = http::connect_tcp(addr->host, addr->port, connect_timeout);
  if (!up) return fail(up.error());
  const int64_t now = now_unix_ms();
  const std::string method = route.empty() ? std::string(ex.method()) : std::string(route) + ":" + std::string(ex.method());
  // The credentials signed are those the node will see: what the options set or drop, the
  // Cookie the proxy sends, else the client's own.
  auto sent = [&](std::string_view name) -> std::string_view {
    for (auto& [k, v] : o.request_headers)
      if (iequals(k, name)) return v;
    for (auto& d : o.drop_request_headers)
      if (iequals(d, name)) return {};
    if (iequals(name, "Cookie")) return o.cookie;
    return ex.header(name);
  };
  const std::string nonce = cluster::new_nonce();
  // A relayed body is streamed through (uploads of gigabytes): not signed; the node's
  // internal routes, whose bodies are whole, sign theirs (cluster::post_to_node).
  const std::string signature =
      cluster::sign_request(secret, {method, o.target, now, nonce, cluster::kUnsignedBody, sent});
  o.request_headers.emplace_back(std::string(cluster::kTimeHeader), std::to_string(now));
  o.request_headers.emplace_back(std::string(cluster::kNonceHeader), nonce);
  o.request_headers.emplace_back(std::string(cluster::kBodyHeader), std::string(cluster::kUnsignedBody));
  o.request_headers.emplace_back(std::string(cluster::kSignatureHeader), signature);
  if (!route.empty()) o.request_headers.emplace_back(std::string(cluster::kRouteHeader), std::string(route));
  // A failure from here on is kUpstreamError: the node was reached (the caller must not try
  // another with a request that may have run).
  if (auto r = ex.proxy(**up, o); !r) return fail(ErrorCode::kUpstreamError, r.error().message);
  return {};
}

}  // namespace b3os::router
