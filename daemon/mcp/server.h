#pragma once
// The MCP endpoint, /mcp, over streamable HTTP (revisions 2025-11-25, 2025-06-18, 2025-03-26;
// docs/mcp.md): sessions bound to the API key that opened them, toolsets chosen per session,
// one JSON-RPC message per POST, a JSON answer or, for a tool call that asked for progress,
// a server-sent event stream. The API module authenticates, rate-limits and hands the request
// here; the tools are in tools.h.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/http/server.h"
#include "daemon/mcp/jsonrpc.h"
#include "daemon/mcp/tools.h"

namespace b3os::mcp {

inline constexpr std::string_view kLatestVersion = "2025-11-25";
/// Whether the server speaks protocol revision `v`.
bool supported_version(std::string_view v);

struct Config {
  size_t max_body = 16u << 20;  // a file of max_file_bytes in base64, and room
  int max_sessions_per_key = 64;
  int max_sessions = 4096;
  std::chrono::seconds session_idle{24 * 3600};
  /// Origins (scheme://host[:port]) a browser page may call from, besides loopback pages.
  std::vector<std::string> allowed_origins;
  std::string server_version = "0.1.0";
  /// Bodies over 1 MiB (files in base64) read at once on the node; past it 503, retry. Each
  /// is held whole in memory while its call runs, so their number is what bounds that memory.
  int max_large_bodies = 8;
  /// In a cluster: relays a tools/call naming a sandbox another node holds to that node
  /// (docs/cluster.md), answering `ex` from there: true. False when the sandbox is not
  /// elsewhere (the call runs here); an error (nothing answered) when its node could not be
  /// reached. `body` is the call's JSON-RPC message; `cancelled` turns true when the client
  /// cancels it. Null: a single node.
  std::function<Result<bool>(http::Exchange& ex, const sandbox::Principal& p, const std::string& sandbox_id,
                             const std::string& body, const std::function<bool()>& cancelled)>
      peer_relay;
  /// In a cluster: relays a sandbox_create this node should not take (it is draining, or has
  /// no room for it) to the node the cluster's placement picks, answering `ex` from there:
  /// true. False: made here (no other node fits either, or this one may take it). `args` are
  /// the tool's arguments. Null: a single node.
  std::function<Result<bool>(http::Exchange& ex, const sandbox::Principal& p, const nlohmann::json& args,
                             const std::string& body, const std::function<bool()>& cancelled)>
      create_relay;
};

/// Whether a request's Origin may call /mcp: none (not a browser), a loopback page
/// (http://localhost:*, 127.0.0.1, [::1]), or one of `allowed` exactly.
bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed);

class Server {
 public:
  Server(Config cfg, Tools& tools);
  /// One request to /mcp, authenticated as `p` (the API did it). `query` is the request's
  /// query string, decoded (toolsets=...).
  void handle(http::Exchange& ex, const sandbox::Principal& p, const std::multimap<std::string, std::string>& query);
  /// One tools/call another node of the cluster relayed here (its session is there): run
  /// without a session, answered as the session's node would (JSON, or an event stream of
  /// progress). Only for requests signed with the cluster secret (the internal listener).
  void handle_relayed(http::Exchange& ex, const sandbox::Principal& p);
  size_t session_count();

 private:
  struct Session {
    std::string id, key_id;
    std::vector<std::string> toolsets;
    int64_t last_used_ms = 0;
    /// Tool calls in flight, by request id (its JSON text): set to cancel one.
    std::map<std::string, std::shared_ptr<std::atomic<bool>>> in_flight;
  };

  void post(http::Exchange& ex, const sandbox::Principal& p, const std::multimap<std::string, std::string>& query);
  void initialize(http::Exchange& ex, const sandbox::Principal& p, const Message& m,
                  const std::multimap<std::string, std::string>& query);
  /// A request of a session: the JSON-RPC answer (tools/call answers itself when it streams).
  void request(http::Exchange& ex, const std::shared_ptr<Session>& s, const sandbox::Principal& p, const Message& m);
  /// `relayed`: the call came from another node (it runs here, never relayed again).
  void call_tool(http::Exchange& ex, const std::shared_ptr<Session>& s, const sandbox::Principal& p, const Message& m,
                 bool relayed = false);
  void notification(const std::shared_ptr<Session>& s, const Message& m);
  std::shared_ptr<Session> find(const std::string& id, const sandbox::Principal& p);
  void evict_locked(const std::string& key_id);

  Config cfg_;
  Tools& tools_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;  // guarded by mu_
  std::atomic<int> large_bodies_{0};
};

}  // namespace b3os::mcp
