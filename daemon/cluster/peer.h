#pragma once
// A node's own requests to another node's internal listener (docs/cluster.md): signed with
// the cluster secret for a route (signature.h), no API key (the route itself is what the
// secret authorizes). Used to hand a sandbox to another node when this one drains.

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::cluster {

/// The answer of a node: its HTTP status and body.
struct PeerAnswer {
  long status = 0;
  std::string body;
};

/// POSTs `body` (JSON) to `target` on the internal listener at `node_url`, signed for
/// `route`, waiting up to `timeout` for the whole answer. kNodeUnavailable when the node
/// could not be reached or did not answer in time (it may still act on the request: a caller
/// that must know checks the store).
Result<PeerAnswer> post_to_node(const std::string& node_url, std::string_view secret, std::string_view route,
                                const std::string& target, const std::string& body, std::chrono::milliseconds timeout);

/// The CA an https node URL's certificate is checked against (--cluster-tls-ca), set at start.
void set_tls_ca(std::string ca_file);
const std::string& tls_ca();

}  // namespace b3os::cluster
