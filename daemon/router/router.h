#pragma once
// The router (b3os-router, docs/cluster.md): one endpoint for a cluster's clients. It
// authenticates each request against the shared store, picks the node (the one holding the
// sandbox or snapshot the path names; for a create, placement; for the rest, the least
// loaded ready node), and relays the request to that node's internal listener signed with
// the cluster secret, streaming bodies both ways (Exchange::proxy). It keeps no state a
// restart would lose: its caches (keys, nodes, where sandboxes live) are short-lived copies
// of the store.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/keyed_buckets.h"
#include "common/result.h"
#include "daemon/http/server.h"
#include "daemon/store/store.h"

namespace b3os::router {

struct Config {
  std::string secret;                                 // the cluster secret
  std::chrono::milliseconds connect_timeout{2'000};   // to a node
  /// A relayed response or upgraded connection with no byte either way for this long ends
  /// (a command may run quietly for as long as its timeout allows).
  std::chrono::milliseconds idle_timeout{3'700'000};
  int64_t key_cache_ms = 5'000;   // a revoked key still passes the router this long (the node checks it too)
  int64_t nodes_cache_ms = 1'000;
  size_t max_create_body = 1u << 20;
  /// Preview URLs' domain, as the nodes' --preview-domain: http://{port}-{host_id}.DOMAIN/.
  std::string preview_domain = "localhost";
};

/// Where a node's internal listener is.
struct NodeAddress {
  std::string host;
  int port = 0;
  bool tls = false;  // https: the node's internal listener speaks TLS (docs/cluster.md)
};
/// Parses "http://HOST:PORT" or "https://HOST:PORT" (HOST may be [v6]); fails on anything else.
Result<NodeAddress> parse_node_url(const std::string& url);
/// The CA that https node URLs are checked against (--cluster-tls-ca), set once at start.
void set_cluster_ca(std::string ca_file);
const std::string& cluster_ca();

/// What a placement asks for (docs/cluster.md, "Placement").
struct PlaceRequest {
  std::vector<std::string> skip;  // node ids not to pick
  bool draining_ok = false;       // not a create: a draining node still serves
  int memory_mib = 0;             // > 0: a create, which needs room for this much
  int vcpu = 0;                   // and this many vCPUs (0: not judged)
  std::string tpl;                // a create's template: a node with it warm comes first
  size_t turn = 0;                // where among equal nodes to start (ties go round)
  /// What was sent a node that its heartbeat may not show yet (counted as its sandboxes).
  std::function<int64_t(const std::string& node_id)> pending;
};
/// The cluster's one placement policy, used by routers, by a node relaying an MCP create it
/// cannot take and by a draining node moving sandboxes out: a ready node (draining too when
/// allowed) not skipped, with room for a create (under its max_sandboxes and memory); one
/// with the template warm first, then the fewest sandboxes. nullptr when none fits.
const store::NodeRecord* pick_node(const std::vector<store::NodeRecord>& all, const PlaceRequest& req);

class Router {
 public:
  Router(Config cfg, store::Store& store);
  /// Adds the router's gauges (nodes by state, sandboxes per node) to the process's metrics;
  /// once, for a router that lives as long as the process.
  void register_metrics();
  /// Handles one request (the http::Server handler).
  void handle(http::Exchange& ex);
  /// Handles one request to a preview URL (the preview listener's handler): relayed to the
  /// node holding the sandbox the Host names, whose preview server checks the token.
  void handle_preview(http::Exchange& ex);

 private:
  struct Pick {
    store::NodeRecord node;
    std::string why;  // for errors
  };
  Result<store::ApiKeyRecord> authenticate(http::Exchange& ex);
  /// The nodes as the store had them at most nodes_cache_ms ago (`fresh`: now).
  Result<std::vector<store::NodeRecord>> nodes(bool fresh = false);
  /// The node that holds `node_id` if it is up; else nullopt.
  std::optional<store::NodeRecord> live_node(const std::vector<store::NodeRecord>& all, const std::string& node_id);
  /// The least loaded ready node not in `skip` (draining ones too when `draining_ok`).
  std::optional<store::NodeRecord> least_loaded(const std::vector<store::NodeRecord>& all,
                                                const std::vector<std::string>& skip, bool draining_ok,
                                                int memory_mib = 0, const std::string& tpl = "", int vcpu = 0);
  /// Relays to `node`; false (nothing sent to the client) when the node could not be reached.
  /// `adjust` changes the relay's options for that node (MCP session ids).
  /// `route`: what the request is signed for ("" the API, "preview"; relay.h).
  bool forward(http::Exchange& ex, const store::NodeRecord& node, const std::optional<std::string>& body,
               std::string* error,
               const std::function<void(http::ProxyOptions&, const store::NodeRecord&)>& adjust = nullptr,
               std::string_view route = "");
  void send_error(http::Exchange& ex, const Error& e);
  /// An error in E2B's shape ({"code": STATUS, "message"}), for the E2B SDK's requests.
  void send_e2b_error(http::Exchange& ex, const Error& e);
  /// The node holding sandbox `id` of any project ("" when no record), from places_ or the
  /// store: for requests that carry no key (preview URLs, envd's).
  Result<std::string> sandbox_node(const std::string& id);
  /// An E2B envd request (it names its sandbox in E2b-Sandbox-Id and carries the sandbox's
  /// access token, no key): relayed to the holding node, which checks the token.
  /// `signed_url`: a signed /files URL whose sandbox a node named (handle_signed_files).
  void handle_envd(http::Exchange& ex, const std::string& id, bool signed_url = false);
  /// A signed /files URL (uploadUrl, downloadUrl): it names no sandbox; each live node is asked
  /// whether one of its sandboxes signed it (the cluster route "e2b-signer"), and the request is
  /// relayed to the one that did. Each client may ask kSignedPerClient times a second.
  void handle_signed_files(http::Exchange& ex);

  const Config cfg_;
  store::Store& store_;
  std::mutex mu_;
  std::vector<store::NodeRecord> nodes_;
  int64_t nodes_at_ms_ = -1;
  std::map<std::string, int> creating_;  // creates this router has in flight, per node
  /// When this router placed its recent creates, per node: counted as load until the node's
  /// heartbeats (every 2 s, read at most nodes_cache_ms late) can include them.
  std::map<std::string, std::vector<int64_t>> placed_;
  size_t turn_ = 0;  // ties go round
  struct CachedKey {
    store::ApiKeyRecord rec;
    int64_t until_ms;
  };
  std::unordered_map<std::string, CachedKey> keys_;  // by the key's SHA-256
  /// Which node holds a sandbox or snapshot ("PROJECT/ID" -> node id): it never changes while
  /// the record lives, so a minute's copy saves a store round trip per request. Only found
  /// records are kept (a new sandbox's id is looked up at once).
  struct CachedPlace {
    std::string node_id;
    int64_t until_ms;
  };
  std::unordered_map<std::string, CachedPlace> places_;
  static constexpr double kSignedPerClient = 20;
  KeyedBuckets signed_clients_{kSignedPerClient, 4096};  // client address -> signed URLs asked
  /// The node holding `id` of `project` (`snapshot`: a snapshot's), "" when there is no such
  /// record; from places_ or the store.
  Result<std::string> node_holding(const std::string& project, const std::string& id, bool snapshot);
};

}  // namespace b3os::router
