#include "daemon/router/relay.h"

#include <strings.h>

#include "common/clock.h"
#include "daemon/cluster/signature.h"
#include "daemon/router/router.h"
#include "daemon/http/tls.h"

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
  if (addr->tls && cluster_ca().empty())
    return fail(ErrorCode::kNodeUnavailable, "node " + node_url + " speaks TLS and no --cluster-tls-ca was given");
  auto up = addr->tls ? http::connect_tls(addr->host, addr->port, connect_timeout, cluster_ca())
                      : http::connect_tcp(addr->host, addr->port, connect_timeout);
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
  // A body held whole (a create's spec, an MCP call) is signed by its digest, and the node
  // reads and checks it before anything acts on it; one streamed through (uploads of
  // gigabytes, file writes, preview bodies) is not signed: the node sees "unsigned".
  const std::string body_digest = o.body ? cluster::sha256_hex(*o.body) : std::string(cluster::kUnsignedBody);
  const std::string signature = cluster::sign_request(secret, {method, o.target, now, nonce, body_digest, sent});
  o.request_headers.emplace_back(std::string(cluster::kTimeHeader), std::to_string(now));
  o.request_headers.emplace_back(std::string(cluster::kNonceHeader), nonce);
  o.request_headers.emplace_back(std::string(cluster::kBodyHeader), body_digest);
  o.request_headers.emplace_back(std::string(cluster::kSignatureHeader), signature);
  if (!route.empty()) o.request_headers.emplace_back(std::string(cluster::kRouteHeader), std::string(route));
  // A failure from here on is kUpstreamError: the node was reached (the caller must not try
  // another with a request that may have run).
  if (auto r = ex.proxy(**up, o); !r) return fail(ErrorCode::kUpstreamError, r.error().message);
  return {};
}

}  // namespace b3os::router
