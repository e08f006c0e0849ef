#pragma once
// E2B compatibility (docs/e2b.md): b3osd answers the unmodified `e2b` SDK. Two surfaces, on
// the API's own listener:
//   - the control plane (E2B_API_URL): /v2/sandboxes, /sandboxes/{id}/..., authenticated by
//     the API key the SDK sends as X-API-Key (an e2b_ key from `b3os keys create --e2b`, or
//     any b3os key);
//   - envd, the in-sandbox API (E2B_SANDBOX_URL): Connect calls of process.Process and
//     filesystem.Filesystem and the /files endpoint, routed by the E2b-Sandbox-Id header and
//     authenticated by the sandbox's access token (X-Access-Token, or a signed /files URL).
// Every operation is the sandbox service's, as REST and MCP call it: this module translates
// shapes and errors, nothing more.

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/keyed_buckets.h"
#include "common/result.h"
#include "daemon/e2b/deadlines.h"
#include "daemon/http/server.h"
#include "daemon/sandbox/service.h"
#include "daemon/sandbox/spec.h"

namespace b3os::e2b {

struct Config {
  sandbox::SpecLimits limits;
  /// The envd version b3osd says its sandboxes run: the SDK turns features on by it
  /// (0.5.7: the stdin flag, closeStdin, streamed and gzip uploads, no default user).
  std::string envd_version = "0.5.7";
  /// What a create answers as `domain`: sandbox.getHost(port) is "{port}-{id}.{domain}".
  std::string domain;
  /// A process's output ring (what commands.connect can still read), as REST's default.
  uint64_t process_output_bytes = 1u << 20;
  size_t max_message = 1 << 20;        // a Connect request message, a control-plane body
  uint64_t max_upload_bytes = 16ULL << 30;
};

using Query = std::multimap<std::string, std::string>;

class Server {
 public:
  Server(Config cfg, sandbox::SandboxService& sandboxes);

  /// An envd request: it names its sandbox in E2b-Sandbox-Id, or it is a signed /files URL
  /// (uploadUrl, downloadUrl: with E2B_SANDBOX_URL set they carry no sandbox id).
  static bool is_envd(const http::Exchange& ex, const std::string& path, const Query& query);
  /// The paths envd serves: /files, /health and Connect calls /package.Service/Method. A
  /// sandbox's access token is accepted on these and nothing else.
  static bool is_envd_route(const std::string& path);
  /// A path of E2B's control plane (b3os's own are under /v1, /mcp, /healthz).
  static bool is_control(const std::vector<std::string>& segments);

  /// Who an envd request acts as: the project of the sandbox it names, when its access token
  /// (X-Access-Token, or the signature of a /files URL) is the sandbox's: 401 otherwise, and
  /// 502 when no such sandbox is live (what E2B's proxy answers; isRunning() reads false).
  Result<sandbox::Principal> authenticate_envd(const http::Exchange& ex, const std::string& path, const Query& query);

  /// The live sandbox of this node whose access token signed a /files URL (`read`: a GET),
  /// for b3os-router, which cannot know (the cluster route "e2b-signer"; docs/e2b.md): expired
  /// URLs are 401 before any scan, and scans count against the node's limit, not a client's
  /// (the router limits each of its clients).
  Result<std::string> signer_for(bool read, const Query& query);

  void handle_control(http::Exchange& ex, const sandbox::Principal& p, const std::string& method,
                      const std::vector<std::string>& segments, const Query& query);
  void handle_envd(http::Exchange& ex, const sandbox::Principal& p, const std::string& method, const std::string& path,
                   const Query& query);

 private:
  // ---- the control plane (control.cc) ----
  Result<nlohmann::json> create(const sandbox::Principal& p, const nlohmann::json& body, int& status);
  Result<nlohmann::json> list(const sandbox::Principal& p, const Query& q, std::string& next_token);
  Result<nlohmann::json> detail(const sandbox::Principal& p, const std::string& id);
  Result<nlohmann::json> connect(const sandbox::Principal& p, const std::string& id, const nlohmann::json& body);
  Result<void> set_timeout(const sandbox::Principal& p, const std::string& id, const nlohmann::json& body);
  Result<nlohmann::json> fork(const sandbox::Principal& p, const std::string& id, const nlohmann::json& body);
  /// The Sandbox object of a create, connect or fork: ids, envd version and access token.
  nlohmann::json sandbox_object(const nlohmann::json& view);
  /// A b3os sandbox view as E2B's ListedSandbox / SandboxDetail.
  nlohmann::json listed(const nlohmann::json& view, bool detail);

  // ---- envd (envd.cc) ----
  void unary(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, std::string_view service,
             std::string_view method, const std::string& user);
  void stream(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, std::string_view service,
              std::string_view method, const std::string& user);
  Result<nlohmann::json> process_unary(const sandbox::Principal& p, const std::string& id, std::string_view method,
                                       const nlohmann::json& msg);
  Result<nlohmann::json> filesystem_unary(const sandbox::Principal& p, const std::string& id, std::string_view method,
                                          const nlohmann::json& msg, const std::string& user);
  /// process.Start and process.Connect: the process's events until it ends or the client goes.
  void process_events(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const std::string& proc,
                      bool started, const nlohmann::json* known = nullptr);
  void watch_dir(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const nlohmann::json& msg);
  void files_get(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const Query& q);
  void files_post(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const Query& q);

  /// The live sandbox whose access token signed this /files URL (the URL names none): each
  /// live sandbox's signature is computed, at most kScansPerSecond scans a second node-wide
  /// (429 past that), so that forged URLs cannot take the node's CPU.
  Result<std::string> signer_of(const http::Exchange& ex, const Query& query);
  /// The scan itself; `client` (when given) is charged as well as the node.
  Result<std::string> scan_signer(bool read, const Query& query, const std::string* client);
  /// The signature a /files URL would carry for this token (docs/e2b.md).
  static std::string signature(const http::Exchange& ex, const Query& query, const std::string& token);
  static std::string signature(bool read, const Query& query, const std::string& token);
  static constexpr double kScansPerSecond = 100;
  /// Each client address (an IPv6 one by its /64) may use at most this many of them a second,
  /// so that one client forging URLs cannot take every real URL's turn.
  static constexpr double kScansPerClient = 20;
  static constexpr size_t kMaxClients = 4096;  // buckets kept; full (idle) ones are dropped first

  Config cfg_;
  sandbox::SandboxService& sandboxes_;
  Deadlines deadlines_;  // commands' Connect-Timeout-Ms
  std::mutex scan_mu_;
  double scan_tokens_ = kScansPerSecond;
  int64_t scan_refill_ms_ = 0;
  std::map<std::string, std::string> token_cache_;  // sandbox id -> its access token
  KeyedBuckets client_scans_{kScansPerClient, kMaxClients};  // client address -> its scans
};

}  // namespace b3os::e2b
