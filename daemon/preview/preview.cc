#include "daemon/preview/preview.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.h"

namespace b3os::preview {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using protocol::FrameType;

namespace {

/// E2B's header for a sandbox's traffic token (trafficAccessToken, docs/e2b.md).
constexpr const char* kTrafficTokenHeader = "e2b-traffic-access-token";

void respond_error(http::Exchange& ex, const Error& e) {
  http::Headers h;
  const int status = error_http_status(e.code);
  if (status == 429 || status == 503) h.emplace_back("Retry-After", "1");
  h.emplace_back("Cache-Control", "no-store");
  json body = {{"error", {{"code", std::string(error_code_name(e.code))}, {"message", e.message}}}};
  ex.respond(status, "application/json", body.dump(), h);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool icontains(std::string_view hay, std::string_view needle) {
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (iequals(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Error end_error(const protocol::Frame& f) {
  json j = json::parse(f.payload, nullptr, false);
  if (!j.is_object()) return Error{ErrorCode::kUpstreamError, "unreadable answer from the agent", 0};
  const json e = j.value("error", json::object());
  return Error{error_code_from_name(e.value("code", "upstream_error")), e.value("message", "the agent ended the connection"), 0};
}

/// The connection inside the sandbox as http::Upstream: DATA frames in, DATA out, credit
/// granted back as the bytes are taken. The request is sent right behind the OPEN, without
/// waiting for the agent's HEADER (connected): the agent keeps it until its connect to the app
/// is done, so a request costs one round trip over the channel, not two. An END with an error
/// (nothing listens: 502) is what the first read, or a write after it, finds.
class PortPipe final : public http::Upstream {
 public:
  explicit PortPipe(agentlink::Stream& s) : s_(s) {}

  Result<size_t> read(char* buf, size_t cap, Deadline deadline) override {
    while (pos_ == pending_.size()) {
      if (eof_) return size_t{0};
      auto f = s_.next(deadline);
      if (!f) {
        if (Clock::now() >= deadline) return fail(ErrorCode::kUpstreamTimeout, "no byte from the app in time");
        return fail(ErrorCode::kUpstreamError, f.error().message);
      }
      switch (f->type) {
        case FrameType::kData:
          pending_ = std::move(f->payload);
          pos_ = 0;
          s_.grant(static_cast<uint32_t>(pending_.size()));
          break;
        case FrameType::kEof:
          eof_ = true;
          break;
        case FrameType::kEnd: {
          eof_ = ended_ = true;
          json j = json::parse(f->payload, nullptr, false);
          if (j.is_object() && !j.value("ok", false)) return fail(end_error(*f));
          break;
        }
        default:
          break;
      }
    }
    const size_t n = std::min(cap, pending_.size() - pos_);
    std::memcpy(buf, pending_.data() + pos_, n);
    pos_ += n;
    return n;
  }

  Result<void> write(std::string_view bytes, Deadline deadline) override {
    auto r = s_.send_data(bytes, deadline);
    if (!r && Clock::now() >= deadline) return fail(ErrorCode::kUpstreamTimeout, "the app took no byte in time");
    if (!r) {
      // The agent ended the stream: its END says why (nothing listens, say), if it came.
      if (auto why = end_reason()) return fail(*why);
      return fail(ErrorCode::kUpstreamError, "the app's connection ended: " + r.error().message);
    }
    return {};
  }

  void close_write() override { (void)s_.send_eof(); }

 private:
  /// The error of an END already received (the frames before it are no longer wanted).
  std::optional<Error> end_reason() {
    while (!ended_) {
      auto f = s_.next(Clock::now());
      if (!f) return std::nullopt;
      if (f->type != FrameType::kEnd) continue;
      ended_ = true;
      json j = json::parse(f->payload, nullptr, false);
      if (j.is_object() && !j.value("ok", false)) return end_error(*f);
    }
    return std::nullopt;
  }

  agentlink::Stream& s_;
  std::string pending_;
  size_t pos_ = 0;
  bool eof_ = false;
  bool ended_ = false;
};

}  // namespace

Admission::Limits Admission::limits(const Config& cfg) {
  const size_t threads = static_cast<size_t>(std::max(cfg.max_requests, 1));
  const size_t node = std::max<size_t>(threads - threads / 8, 1);
  const size_t per = std::clamp<size_t>(static_cast<size_t>(std::max(cfg.max_per_sandbox, 1)), 1, node);
  const size_t floor = std::clamp<size_t>(static_cast<size_t>(std::max(cfg.sandbox_floor, 1)), 1, per);
  // FairShare raises a reserve below one floor to one floor.
  return Limits{node, per, floor, std::min(kFloorsKept * floor, node - per)};
}

std::optional<std::string> Admission::take(const std::string& id) {
  std::lock_guard lk(mu_);
  if (share_.try_take(id)) return std::nullopt;
  const Limits& l = share_.limits();
  const size_t mine = share_.of(id);
  if (mine >= l.per_tenant)
    return "sandbox " + id + " has " + std::to_string(mine) + " preview requests in flight, its cap; retry shortly";
  if (share_.total() >= l.node)
    return "all " + std::to_string(l.node) + " preview requests the node lets into sandboxes are in flight (sandbox " + id +
           " has " + std::to_string(mine) + "); retry shortly";
  return "sandbox " + id + " has " + std::to_string(mine) + " preview requests in flight, past its floor of " +
         std::to_string(l.floor) + ", and the " + std::to_string(l.node - l.reserve) +
         " the node shares among sandboxes past their floors are all taken; retry shortly";
}

void Admission::give(const std::string& id) {
  std::lock_guard lk(mu_);
  share_.give(id);
}

size_t Admission::held(const std::string& id) {
  std::lock_guard lk(mu_);
  return share_.of(id);
}

bool redirects_to_bare_url(const RequestHints& r) {
  if (r.method != "GET" && r.method != "HEAD") return false;
  if (!r.upgrade.empty()) return false;
  // A Location of "//host/..." (or "/\host/...", which browsers read alike) names another host.
  if (r.target.empty() || r.target[0] != '/') return false;
  if (r.target.size() > 1 && (r.target[1] == '/' || r.target[1] == '\\')) return false;
  // Browsers send Sec-Fetch-* only to https and localhost origins: those they keep a Secure
  // cookie from.
  if (const std::string_view mode = trim(r.sec_fetch_mode); !mode.empty()) return iequals(mode, "navigate");
  // An older browser: a page over TLS only (the first proxy's word), or the cookie is refused.
  const std::string_view proto = trim(r.forwarded_proto.substr(0, r.forwarded_proto.find(',')));
  return icontains(r.accept, "text/html") && iequals(proto, "https");
}

std::optional<std::string> cross_site_with_cookie(const CookieRequest& r) {
  const bool unsafe = !(iequals(r.method, "GET") || iequals(r.method, "HEAD") || iequals(r.method, "OPTIONS"));
  const bool upgrade = !trim(r.upgrade).empty();
  // A top-level navigation (a link clicked in a chat or another app, the redirect that drops a
  // URL's token) reads a page the user asked for: it may use the cookie from anywhere, as a
  // resource-isolation policy lets it. A page's own requests may not.
  const bool navigation = !unsafe && !upgrade && iequals(trim(r.sec_fetch_mode), "navigate") &&
                          (trim(r.sec_fetch_dest).empty() || iequals(trim(r.sec_fetch_dest), "document"));
  // Browsers send Sec-Fetch-Site to https and localhost origins: "same-origin" is the page's own
  // host, "none" a navigation the user typed or bookmarked; anything else came from another site
  // or another preview host ("same-site", "cross-site"), which may be another port of this
  // sandbox (its Origin says so).
  if (const std::string_view site = trim(r.sec_fetch_site); !site.empty() && !iequals(site, "same-origin") &&
                                                              !iequals(site, "none") && !navigation &&
                                                              !(r.origin_same_sandbox && iequals(site, "same-site")))
    return "a request from another site (Sec-Fetch-Site: " + std::string(site.substr(0, 32)) +
           ") may not use this preview's cookie; open the URL with its token";
  if (!unsafe && !upgrade) return std::nullopt;
  if (r.origin_same_sandbox) return std::nullopt;
  // An Origin names the page that sent the request: it must be this host's own (any scheme:
  // a TLS front end may sit before the listener). No Origin: not a browser's cross-origin
  // request (browsers send it on every cross-origin POST and WebSocket).
  const std::string_view origin = trim(r.origin);
  if (origin.empty()) return std::nullopt;
  const size_t scheme = origin.find("://");
  const std::string_view origin_host = scheme == std::string_view::npos ? origin : origin.substr(scheme + 3);
  if (!origin_host.empty() && iequals(origin_host, trim(r.host))) return std::nullopt;
  return "a " + std::string(trim(r.upgrade).empty() ? "request" : "WebSocket") + " from another origin (" +
         std::string(origin.substr(0, 80)) + ") may not use this preview's cookie";
}

PreviewServer::PreviewServer(Config cfg, sandbox::SandboxService& sandboxes)
    : cfg_(cfg),
      sandboxes_(sandboxes),
      admission_(cfg),
      server_(cfg.host, cfg.port,
              http::Config{cfg.max_connections, cfg.max_requests, 0, 0, cfg.idle_timeout, cfg.head_timeout, cfg.body_timeout,
                           "preview", false, true},
              [this](http::Exchange& ex) { handle(ex); }) {}

Result<void> PreviewServer::listen() {
  if (auto r = server_.listen(); !r) return fail(r.error().wrap("the preview listener (--preview-listen)"));
  return {};
}

Result<std::optional<std::string>> PreviewServer::authorize(const sandbox::PreviewTarget& t,
                                                             const std::optional<std::string>& url_token,
                                                             const std::vector<std::string>& cookie_tokens) {
  if (url_token || cookie_tokens.empty()) {
    if (auto ok = sandboxes_.authorize_port(t, url_token); !ok) return fail(ok.error());
    return url_token;
  }
  // Each cookie in turn: a bogus one beside the owner's must not lock the owner out.
  std::optional<Error> first;
  for (const auto& c : cookie_tokens) {
    auto ok = sandboxes_.authorize_port(t, c);
    if (ok) return std::optional<std::string>(c);
    if (!first) first = ok.error();
    if (ok.error().code == ErrorCode::kSandboxNotFound) break;  // no token will do
  }
  return fail(*first);
}

void PreviewServer::handle(http::Exchange& ex) {
  ex.set_route("preview");  // one label for every app's URL (metrics)
  auto target = sandbox::parse_preview_host(ex.header("host"), cfg_.domain);
  if (!target) return respond_error(ex, target.error());
  auto stripped = sandbox::strip_token_param(ex.target());
  auto cookies = sandbox::strip_token_cookies(ex.header("cookie"), target->port);
  const std::string path = stripped.target.empty() ? "/" : stripped.target;

  // The token before a slot: a client without one must not fill the sandbox's slots and so
  // keep its token holders out with 429s (connect_port checks it again). A token in the URL
  // wins over a cookie (a newer URL replaces the cookie it left); E2B's SDK users send their
  // sandbox's traffic token as a header (docs/e2b.md), which the app never sees.
  if (const std::string_view traffic = ex.header(kTrafficTokenHeader); !traffic.empty())
    target->traffic_token = std::string(traffic);
  auto token = authorize(*target, stripped.token, cookies.tokens);
  if (!token) return respond_error(ex, token.error());
  // Every preview host is same-site with every other (one parent domain), so SameSite=Lax lets
  // a page on one tenant's public port POST to, or open a WebSocket on, another's preview with
  // the victim's cookie. Where the cookie is the only credential, a cross-site request, and an
  // upgrade or unsafe method from another origin, are refused, unless the port needs none.
  if (!stripped.token && !target->traffic_token && token->has_value()) {
    // Another port of the same sandbox is the same tenant's page: its Origin names it.
    bool same_sandbox = false;
    if (const std::string_view origin = ex.header("origin"); !origin.empty()) {
      const size_t scheme = origin.find("://");
      if (auto o = sandbox::parse_preview_host(scheme == std::string_view::npos ? origin : origin.substr(scheme + 3),
                                               cfg_.domain))
        same_sandbox = o->sandbox_id == target->sandbox_id;
    }
    if (auto why = cross_site_with_cookie({ex.method(), ex.header("upgrade"), ex.header("sec-fetch-site"),
                                           ex.header("origin"), ex.header("host"), ex.header("sec-fetch-mode"),
                                           ex.header("sec-fetch-dest"), same_sandbox});
        why && !sandboxes_.authorize_port(*target, std::nullopt))
      return respond_error(ex, Error{ErrorCode::kForbidden, *why, 0});
  }

  // A browser opening the URL is sent on to it without the token, the cookie set on the way:
  // the page it lands on has no token in its location or the Referer of its requests, and the
  // app never sees this request. Other clients (no cookie jar, most of them) are served.
  if (stripped.token && redirects_to_bare_url({ex.method(), ex.target(), ex.header("upgrade"), ex.header("sec-fetch-mode"),
                                               ex.header("accept"), ex.header("x-forwarded-proto")}))
    return ex.respond(303, "", "",
                      {{"Location", path},
                       {"Set-Cookie", sandbox::token_cookie(target->port, *stripped.token)},
                       {"Referrer-Policy", "no-referrer"},
                       {"Cache-Control", "no-store"}});

  if (auto why = admission_.take(target->sandbox_id))
    return respond_error(ex, Error{ErrorCode::kConcurrencyLimited, *why, 0});
  struct Slot {
    Admission& admission;
    std::string id;
    ~Slot() { admission.give(id); }
  } slot{admission_, target->sandbox_id};

  auto conn = sandboxes_.connect_port(*target, *token);
  if (!conn) return respond_error(ex, conn.error());
  PortPipe pipe((*conn)->stream());

  http::ProxyOptions opts;
  opts.target = path;
  opts.cookie = cookies.cookie;
  opts.idle_timeout = cfg_.idle_timeout;
  opts.drop_request_headers.emplace_back(kTrafficTokenHeader);
  // The token of a URL becomes a cookie of this host, so the app's own links and requests
  // (which carry no token) are let in too; the URL is served as it is, for clients without
  // cookies (curl, websocket clients). A page loaded so sends no Referer with its URL's token
  // (this policy comes after any of the app's: the last one wins).
  if (stripped.token) {
    opts.response_headers.emplace_back("Set-Cookie", sandbox::token_cookie(target->port, *stripped.token));
    opts.response_headers.emplace_back("Referrer-Policy", "no-referrer");
  }
  // The app may neither set nor overwrite a token cookie, on its host or its parent domain.
  opts.drop_response_header = [](std::string_view name, std::string_view value) {
    return iequals(name, "set-cookie") && sandbox::sets_token_cookie(value);
  };
  if (auto r = ex.proxy(pipe, opts); !r && !ex.responded()) respond_error(ex, r.error());
}

}  // namespace b3os::preview
