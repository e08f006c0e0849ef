#pragma once
// PreviewServer: b3osd's second listener (--preview-listen), which serves the preview URLs of
// sandboxes' ports (docs/ports.md). Each request's Host names the port and the sandbox
// ({port}-{host_id}.{domain}); its token (the b3os_token query parameter, or the cookie it
// became) is checked by the sandbox module, the token is stripped, and the request goes to
// 127.0.0.1:{port} inside the sandbox through its agent channel (op port_connect), answered
// back by http::Exchange::proxy. A module above sandbox and http; main.cc assembles it.

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fair_share.h"
#include "common/result.h"
#include "daemon/http/server.h"
#include "daemon/sandbox/service.h"

namespace b3os::preview {

struct Config {
  std::string host = "127.0.0.1";
  int port = 7080;
  std::string domain = "localhost";
  /// Open preview connections on the node, idle ones included, and requests being served
  /// (each holds a thread; an upgraded one two). 7/8 of max_requests may be in flight in
  /// sandboxes, shared as Admission says; the rest is left for what is refused before.
  int max_connections = 4096;
  int max_requests = 1024;
  /// Requests being served for one sandbox at once; the next one is 429 concurrency_limited.
  int max_per_sandbox = 256;
  /// Requests of a sandbox that other sandboxes' requests can never take (its floor).
  int sandbox_floor = 8;
  std::chrono::milliseconds idle_timeout{60'000};  // a connection waiting for its next request;
                                                   // a response or websocket with no byte either way
  std::chrono::milliseconds head_timeout{15'000};  // a request head once its first byte came
  std::chrono::milliseconds body_timeout{30'000};  // a request body with no byte
};

/// Admission of preview requests to sandboxes (docs/ports.md, "A sandbox's share"): a FairShare
/// of 7/8 of the listener's threads (the rest answers what is refused before a slot: bad hosts
/// and tokens, 429s), a cap per sandbox, a floor per sandbox, and a reserve of 64 floors that
/// requests past their floor never take (but never so large that a sandbox alone could not
/// reach its cap). Thread-safe.
class Admission {
 public:
  /// Floors the reserve keeps, at most: that many sandboxes hold their floor whatever others do.
  static constexpr size_t kFloorsKept = 64;
  using Limits = FairShare<std::string>::Limits;
  explicit Admission(const Config& cfg) : share_(limits(cfg)) {}
  static Limits limits(const Config& cfg);
  /// Takes a slot for one request of the sandbox: nullopt when taken, else why not (the
  /// message of its 429).
  std::optional<std::string> take(const std::string& sandbox_id);
  void give(const std::string& sandbox_id);
  size_t held(const std::string& sandbox_id);

 private:
  std::mutex mu_;
  FairShare<std::string> share_;
};

/// What a request with a good token in its URL shows of itself, to decide whether it is a
/// browser's navigation, sent on to the URL without the token (docs/ports.md, "Browsers and
/// the token"). Header values as received ("" when absent).
struct RequestHints {
  std::string_view method;
  std::string_view target;
  std::string_view upgrade;
  std::string_view sec_fetch_mode;
  std::string_view accept;
  std::string_view forwarded_proto;  // X-Forwarded-Proto
};
/// True for a GET or HEAD without Upgrade to a path on this host (not "//..." or "/\...")
/// that is a top-level navigation: Sec-Fetch-Mode: navigate, or no Sec-Fetch-Mode, an Accept
/// naming text/html, and X-Forwarded-Proto: https (an older browser behind TLS).
bool redirects_to_bare_url(const RequestHints& r);

/// What a request authorized by the preview cookie alone says of where it came from (header
/// values as received, "" when absent).
struct CookieRequest {
  std::string_view method;
  std::string_view upgrade;
  std::string_view sec_fetch_site;
  std::string_view origin;
  std::string_view host;
  std::string_view sec_fetch_mode = {};
  std::string_view sec_fetch_dest = {};
  bool origin_same_sandbox = false;  // the Origin is a preview host of the same sandbox (another port)
};
/// Why such a request may not use the cookie, or nothing: a Sec-Fetch-Site other than
/// same-origin or none (unless a top-level navigation, or from another port of the same
/// sandbox), or an upgrade or an unsafe method whose Origin is not the host's own or another
/// port of its sandbox.
std::optional<std::string> cross_site_with_cookie(const CookieRequest& r);

class PreviewServer {
 public:
  PreviewServer(Config cfg, sandbox::SandboxService& sandboxes);
  /// Binds and listens; fails with a clear message when the address is taken.
  Result<void> listen();
  /// Serves until stop(); blocks.
  void run() { server_.run(); }
  void stop() { server_.stop(); }
  int port() const { return server_.port(); }

  /// One preview request (public for tests of the whole path).
  void handle(http::Exchange& ex);

 private:
  /// The token that lets the request in: the URL's (which wins), else the first of the
  /// cookies that passes; or the error of the URL's, or of the first cookie.
  Result<std::optional<std::string>> authorize(const sandbox::PreviewTarget& t, const std::optional<std::string>& url_token,
                                               const std::vector<std::string>& cookie_tokens);

  Config cfg_;
  sandbox::SandboxService& sandboxes_;
  Admission admission_;  // before server_: its handlers use it until the server is gone
  http::Server server_;
};

}  // namespace b3os::preview
