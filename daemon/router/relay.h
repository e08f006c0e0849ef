#pragma once
// A request relayed to a node's internal listener, signed with the cluster secret
// (daemon/cluster/signature.h): the router's relay to nodes, and a node's to another node
// (an MCP call naming a sandbox that node holds). docs/cluster.md.

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"
#include "daemon/http/server.h"

namespace b3os::router {

/// Relays `ex` to the internal listener at `node_url` ("http://HOST:PORT"), signed for
/// `route` ("" the API; "preview"; "mcp-call": the route goes in X-B3os-Route and, with a
/// colon, before the method in what the signature covers, so a request signed for one route
/// cannot be turned into another). `o` says the rest (target, body, timeouts); its
/// request_headers are kept and the signature's added. Errors: kInvalidRequest (a bad URL)
/// or kNodeUnavailable (nothing accepted the connection), with nothing sent; kUpstreamError
/// when the node broke off (the client was answered unless ex.responded() is false).
Result<void> relay_signed(http::Exchange& ex, const std::string& node_url, const std::string& secret,
                          std::string_view route, http::ProxyOptions o, std::chrono::milliseconds connect_timeout);

}  // namespace b3os::router
