#pragma once
// Ports: preview URLs of apps inside a sandbox (docs/ports.md). The pure parts (host names,
// tokens, what is stripped before a request reaches the app) and the part of the service that
// mints URLs and opens a connection to a port through the sandbox's agent channel. The HTTP
// side (the listener, the proxy) is daemon/preview's.

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/agentlink/channel.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/freezer.h"
#include "daemon/sandbox/live.h"
#include "daemon/sandbox/types.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

class Lifecycle;
class Registry;


/// Minted URLs live 1 s to 7 days; 1 hour unless asked.
inline constexpr int kDefaultUrlTtlS = 3600;
inline constexpr int kMaxUrlTtlS = 7 * 24 * 3600;
/// The query parameter that carries a token.
inline constexpr std::string_view kTokenParam = "b3os_token";
/// The cookie a token becomes, with the port after it: `__Host-` binds it to the exact host
/// that set it (a browser takes it only with Secure, Path=/ and no Domain), so a sibling
/// sandbox's page cannot set it from the parent domain (docs/ports.md, "The cookie").
inline constexpr std::string_view kTokenCookie = "__Host-b3os_token_";
/// At most this many token cookies of one request are checked (the first good one wins).
inline constexpr size_t kMaxTokenCookies = 4;

/// "sbx-" + the id without its prefix ("sbx_01abc" -> "sbx-01abc"): a DNS label.
std::string host_id_of(std::string_view sandbox_id);

/// What a preview request's Host names.
struct PreviewTarget {
  std::string sandbox_id;  // sbx_...
  std::string host_id;     // sbx-...
  int port = 0;
  /// The e2b-traffic-access-token header, if the request had one (not from the host: the
  /// preview server sets it): E2B's token of every port of a sandbox created private.
  std::optional<std::string> traffic_token;
};
/// Parses a Host header of the form {port}-{host_id}.{domain}[:listen port], case-insensitive.
/// A host of any other form is 404 not_found; a port outside 1-65535 is 400 invalid_request.
Result<PreviewTarget> parse_preview_host(std::string_view host, std::string_view domain);

/// A request target with the token parameter removed, and the token it carried.
struct StrippedTarget {
  std::string target;
  std::optional<std::string> token;
};
StrippedTarget strip_token_param(std::string_view target);
/// True for a cookie name like ours: one that, in any case and after an optional "__Host-" or
/// "__Secure-", starts with "b3os_token". Such cookies never reach the app, and the app never
/// sets one.
bool is_token_cookie_name(std::string_view name);
/// A Cookie header without any cookie named like ours ("" when none is left), and the values of
/// the __Host-b3os_token_<port> cookies (exactly that name: the only one that counts as a token;
/// at most kMaxTokenCookies, in order, empty ones left out).
struct StrippedCookies {
  std::string cookie;
  std::vector<std::string> tokens;
};
StrippedCookies strip_token_cookies(std::string_view cookie_header, int port);
/// True when a Set-Cookie value sets a cookie named like ours (or a nameless cookie whose value
/// starts like one: a browser sends it back as "name=value").
bool sets_token_cookie(std::string_view set_cookie);
/// The cookie a token in a URL becomes:
/// __Host-b3os_token_<port>=...; Secure; HttpOnly; SameSite=Lax; Path=/.
std::string token_cookie(int port, std::string_view token);

/// Lowercase hex SHA-256 of a token: how minted tokens are kept and looked up.
std::string token_sha256(std::string_view token);
/// Constant-time equality (for tokens).
bool tokens_equal(std::string_view a, std::string_view b);
/// A new random token: 32 characters of base32 (160 bits).
std::string new_port_token();

/// Preview URLs and public ports' tokens. A public token is HMAC-SHA256(node key, sandbox id,
/// port): shown in every GET without being stored, and another for every fork (another id).
class PortUrls {
 public:
  PortUrls(PreviewConfig cfg, std::string key) : cfg_(std::move(cfg)), key_(std::move(key)) {}
  /// Reads (or makes) the key file of `cfg`; a key in memory when there is none or it fails.
  static PortUrls load(const PreviewConfig& cfg);

  std::string public_token(std::string_view sandbox_id, int port) const;
  /// The access token of a sandbox's E2B in-sandbox API (docs/e2b.md): derived like a public
  /// port's token, from another message, so neither gives the other.
  std::string access_token(std::string_view sandbox_id) const;
  /// The token of every port of a sandbox at once, sent as the e2b-traffic-access-token header
  /// (E2B's trafficAccessToken, for a sandbox created without public traffic): derived from
  /// yet another message, never stored.
  std::string traffic_token(std::string_view sandbox_id) const;
  std::string url(std::string_view sandbox_id, int port, std::string_view token) const;
  /// The `ports` array of the sandbox object: public ports with their URL, others url null.
  nlohmann::json ports_json(const store::SandboxRecord& r) const;
  const PreviewConfig& config() const { return cfg_; }

 private:
  /// HMAC-SHA256(node key, msg) in base32, 160 bits.
  std::string derived_token(std::string_view msg) const;
  PreviewConfig cfg_;
  std::string key_;
};

/// A connection to a port inside a sandbox: the agent stream, and the sandbox held awake (not
/// frozen, not reaped as idle) for as long as it is open.
class PortConnection {
 public:
  PortConnection(std::shared_ptr<LiveSandbox> s, Awake awake, std::shared_ptr<agentlink::Stream> stream)
      : s_(std::move(s)), awake_(std::move(awake)), op_(std::make_unique<ActiveOp>(*s_)), stream_(std::move(stream)) {}
  agentlink::Stream& stream() { return *stream_; }
  const std::string& sandbox_id() const { return s_->id; }

 private:
  // Destroyed in reverse: the stream (cancelled if still open) before the guards.
  std::shared_ptr<LiveSandbox> s_;
  Awake awake_;
  std::unique_ptr<ActiveOp> op_;
  std::shared_ptr<agentlink::Stream> stream_;
};

class Ports {
 public:
  Ports(const PortUrls& urls, store::SandboxStore& store, Registry& registry, Lifecycle& lifecycle)
      : urls_(urls), store_(store), registry_(registry), lifecycle_(lifecycle) {}

  /// POST /v1/sandboxes/{id}/ports/{port}/url: a URL for `port` that expires after `ttl_s`.
  Result<nlohmann::json> mint(const Principal& p, const std::string& id, int port, int ttl_s);
  /// Checks `token` for the target (404 no such live sandbox, 401 no, unknown or expired
  /// token, 403 a token of another sandbox or port), resumes a paused sandbox, and opens a
  /// port_connect stream. The caller may send at once (the agent keeps the bytes until its
  /// connect is done); an END with an error says the connect inside failed.
  Result<std::unique_ptr<PortConnection>> connect(const PreviewTarget& t, const std::optional<std::string>& token);
  /// connect's checks alone (404, 401, 403 as there), with no other effect: the preview
  /// checks a request's token before it takes one of the sandbox's request slots.
  Result<void> authorize(const PreviewTarget& t, const std::optional<std::string>& token);

 private:
  Result<void> check_token(const store::SandboxRecord& rec, const PreviewTarget& t, const std::optional<std::string>& token);

  const PortUrls& urls_;
  store::SandboxStore& store_;
  Registry& registry_;
  Lifecycle& lifecycle_;
};

}  // namespace b3os::sandbox
