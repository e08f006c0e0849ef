#include "daemon/api/api.h"

#include "daemon/api/access.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "daemon/e2b/wire.h"
#include "daemon/sandbox/output.h"
#include "daemon/sandbox/requests.h"
#include "daemon/sandbox/timing.h"

namespace b3os::api {

using nlohmann::json;

namespace {

double round_us(double ms) { return std::round(ms * 1000.0) / 1000.0; }

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return false;
  return true;
}

bool equals_ci(std::string_view a, std::string_view b) { return a.size() == b.size() && starts_with_ci(a, b); }

bool media_type_is(std::string_view content_type, std::string_view want) {
  size_t semi = content_type.find(';');
  std::string_view t = content_type.substr(0, semi);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return equals_ci(t, want);
}

/// True when an Accept header lists text/event-stream (a client that wants events).
bool accepts_event_stream(std::string_view accept) {
  size_t i = 0;
  while (i < accept.size()) {
    size_t j = accept.find(',', i);
    if (j == std::string_view::npos) j = accept.size();
    std::string_view item = accept.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    if (media_type_is(item, "text/event-stream")) return true;
    i = j + 1;
  }
  return false;
}

tl::unexpected<Error> not_found(const std::string& id) {
  return fail(ErrorCode::kSandboxNotFound, "no sandbox " + id + " in this project");
}

/// Every answer of the API leaves here. Each 429 and 503 says when to try again (Retry-After,
/// seconds), so clients back off instead of hammering; one that knows better (the rate
/// limit's empty bucket) has set it already.
void respond(http::Exchange& ex, int status, std::string_view content_type, std::string body, http::Headers headers) {
  const bool has_retry =
      std::any_of(headers.begin(), headers.end(), [](auto& h) { return equals_ci(h.first, "Retry-After"); });
  if ((status == 429 || status == 503) && !has_retry) headers.emplace_back("Retry-After", "1");
  ex.respond(status, content_type, std::move(body), headers);
}

}  // namespace

struct Api::Call {
  explicit Call(http::Exchange& e) : ex(e) {}
  http::Exchange& ex;
  Target target;
  std::string method;
  sandbox::Principal principal;
  sandbox::Timing timing;
  Stopwatch total;
  json body = json::object();
  std::string raw_body;
  std::optional<std::string> idempotency_key;
  std::string_view operation;  // the route's, for b3os_operation_* metrics
};

Reply error_reply(const Error& e) {
  Reply r;
  r.status = error_http_status(e.code);
  r.body = {{"error", {{"code", std::string(error_code_name(e.code))}, {"message", e.message}}}};
  if (e.code == ErrorCode::kUnauthorized) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string server_timing(const sandbox::Timing& t, double total_ms) {
  std::string out;
  char buf[96];
  for (auto& [name, ms] : t.phases) {
    std::snprintf(buf, sizeof buf, "%s;dur=%.3f, ", name.c_str(), ms);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "total;dur=%.3f", total_ms);
  return out + buf;
}

Api::Api(const Config& cfg, store::Store& store, sandbox::SandboxService& sandboxes, gateway::Gateway& gw,
         mcp::Server* mcp, tpl::TemplateService* templates, e2b::Server* e2b)
    : cfg_(cfg),
      store_(store),
      sandboxes_(sandboxes),
      gw_(gw),
      mcp_(mcp),
      templates_(templates),
      e2b_(e2b),
      limiter_(cfg.rate_per_second, cfg.rate_burst),
      in_flight_(cfg.max_requests_per_key, cfg.max_requests_per_project) {}

namespace {
/// Gateway answers written straight to the HTTP client (chunked when streamed).
class HttpSink : public gateway::Sink {
 public:
  HttpSink(http::Exchange& ex, http::Headers extra) : ex_(ex), extra_(std::move(extra)) {}
  Result<void> respond(int status, const std::string& content_type, const std::string& body) override {
    api::respond(ex_, status, content_type, body, extra_);
    return {};
  }
  Result<void> begin_stream(int status, const std::string& content_type) override {
    http::Headers h = extra_;
    h.emplace_back("Cache-Control", "no-cache");
    return ex_.begin_stream(status, content_type, http::Exchange::kUnknownLength, h);
  }
  Result<void> write(std::string_view bytes) override { return ex_.write(bytes); }
  void end(bool ok) override {
    if (ok)
      (void)ex_.end_stream();
    else
      ex_.abort_stream();  // a broken upstream stream must not look complete
  }
  bool gone() override { return ex_.client_gone(); }

 private:
  http::Exchange& ex_;
  http::Headers extra_;
};
}  // namespace

bool Api::dispatch_infer(Call& c) {
  const auto& s = c.target.segments;
  if (!(s.size() >= 2 && s[0] == "v1" && s[1] == "infer")) return false;
  HttpSink sink(c.ex, {});
  // A model call may last minutes: it holds a stream's place, not a request worker's.
  if (auto h = c.ex.hold_stream(c.principal.project_id); !h) {
    gateway::answer_error(sink, h.error());
    return true;
  }
  // A key's calls are paid from the key's own budget.
  gateway::Caller caller;
  caller.budget_id = c.principal.key_id;
  caller.project_id = c.principal.project_id;
  caller.key_id = c.principal.key_id;
  std::string body;
  if (c.ex.has_body()) {
    auto raw = c.ex.read_body(16u << 20);
    if (!raw) {
      gateway::answer_error(sink, raw.error());
      return true;
    }
    body = std::move(*raw);
  }
  if (auto r = gw_.admit(caller); !r) {
    gateway::answer_error(sink, r.error());
    return true;
  }
  std::string sub;
  for (size_t i = 2; i < s.size(); ++i) sub += "/" + s[i];
  gw_.handle(caller, c.method, sub, body, sink);
  return true;
}

void Api::send(Call& c, Reply r) {
  const double total = c.total.elapsed_ms();
  if (r.body.is_object() && r.status < 300) {
    json timing = json::object();
    for (auto& [name, ms] : c.timing.phases) timing[name + "_ms"] = round_us(ms);
    timing["total_ms"] = round_us(total);
    r.body["timing"] = timing;
  }
  r.headers.emplace_back("Server-Timing", server_timing(c.timing, total));
  if (!c.operation.empty())
    sandbox::record_operation(c.operation, "rest", c.timing, total, sandbox::outcome_of(r.status));
  std::string body = dump_json(r.body);
  if (c.idempotency_key) {
    // A 429 (a rate, a concurrency or a quota limit) ends when the limit frees: a retry with the
    // same key runs again rather than replaying the refusal for a day.
    auto done = r.status < 500 && r.status != 429
                    ? store_.idempotency_finish(c.principal.project_id, *c.idempotency_key, r.status, "application/json", body)
                    : store_.idempotency_abort(c.principal.project_id, *c.idempotency_key);
    if (!done) spdlog::warn("idempotency: {}", done.error().message);
  }
  respond(c.ex, r.status, "application/json", std::move(body), std::move(r.headers));
}

void Api::send_error(Call& c, const Error& e) {
  if (e.code == ErrorCode::kInternal) spdlog::error("{} {}: {}", c.method, c.target.path, e.message);
  send(c, error_reply(e));
}

Result<sandbox::Principal> Api::authenticate(http::Exchange& ex) {
  auto presented = store::presented_api_key(ex.header("Authorization"), ex.header("X-API-Key"));
  if (!presented) return fail(presented.error());
  auto rec = store_.find_api_key(*presented);
  if (!rec) return fail(rec.error());
  if (!*rec) return fail(ErrorCode::kUnauthorized, "unknown or revoked API key");
  // The key's last use, for `b3os keys list`: written at most once a minute, not per request.
  if (const int64_t now = now_unix_ms(); now - (*rec)->last_used_at_ms >= 60'000)
    if (auto t = store_.touch_api_key((*rec)->id, now); !t) spdlog::warn("{}", t.error().message);
  return sandbox::Principal{(*rec)->project_id, (*rec)->id, (*rec)->project_name, sandbox::CredentialKind::kApiKey, ""};
}

void Api::handle(http::Exchange& ex, bool relayed_mcp) {
  Call c(ex);
  c.method = std::string(ex.method());
  auto target = parse_target(ex.target());
  if (!target) return send_error(c, target.error());
  c.target = std::move(*target);
  ex.set_route(route_label(c.target.segments));
  if (c.target.path == "/healthz" && c.method == "GET") {
    if (sandboxes_.ready()) return send(c, {200, {{"ok", true}, {"status", "ready"}}, {}});
    return send(c, {503, {{"ok", false}, {"status", "starting"}, {"message", "reattaching the sandboxes of the previous b3osd"}},
                    {}});  // respond() adds the Retry-After
  }

  // E2B's in-sandbox API names its sandbox in a header and brings its access token, not a key.
  const bool envd = e2b_ && e2b::Server::is_envd(ex, c.target.path, c.target.query);
  auto principal = envd ? e2b_->authenticate_envd(ex, c.target.path, c.target.query) : authenticate(ex);
  if (!principal) {
    if (envd || (e2b_ && e2b::Server::is_control(c.target.segments))) {
      http::Headers h;  // a signed URL's scan refused for now: a second is enough
      if (principal.error().code == ErrorCode::kRateLimited) h.emplace_back("Retry-After", "1");
      return respond(ex, error_http_status(principal.error().code), "application/json",
                     dump_json(e2b::api_error(principal.error())), h);
    }
    return send_error(c, principal.error());
  }
  c.principal = *principal;
  // A sandbox's envd token reaches that sandbox's envd routes and nothing else: not /mcp, not
  // /v1/infer (no budget is ever made for it), not the REST or E2B control plane.
  if (envd && !e2b::Server::is_envd_route(c.target.path))
    return respond(ex, 401, "application/json",
                   dump_json(e2b::api_error({ErrorCode::kUnauthorized,
                                             "a sandbox's access token reaches only its envd routes (/files, /health, "
                                             "process.Process, filesystem.Filesystem); this route takes an API key",
                                             0})),
                   {});
  double retry = 0;
  if (!limiter_.take(c.principal.key_id, &retry)) {
    Reply r = error_reply({ErrorCode::kRateLimited, "too many requests for this API key; retry after the Retry-After seconds", 0});
    r.headers.emplace_back("Retry-After", std::to_string(static_cast<int>(std::ceil(retry))));
    return send(c, std::move(r));
  }
  // Held until the request is answered, whichever way it ends.
  auto slot = in_flight_.enter(c.principal.key_id, c.principal.project_id);
  if (!slot) return send_error(c, slot.error());
  // Each surface accepts what its row of the access table says (daemon/api/access.h).
  auto refused = [&](std::string_view surface, std::string_view pattern) {
    const access::Rule* rule = access::find(surface, c.method, pattern);
    if (rule && access::admits(*rule, c.principal.kind)) return false;
    send_error(c, {ErrorCode::kUnauthorized,
                   rule ? "this route does not take this kind of credential (docs/api.md, \"Credentials\")"
                        : "this route has no row in the access table: refused",
                   0});
    return true;
  };
  if (envd) {
    const std::string_view pattern = c.target.path == "/files"    ? "/files"
                                     : c.target.path == "/health" ? "/health"
                                                                  : "/{package.Service}/{Method}";
    if (refused("envd", pattern)) return;
    if (!sandboxes_.ready())  // respond() adds the Retry-After
      return send_error(c, {ErrorCode::kNodeUnavailable, "b3osd is starting (reattaching sandboxes); retry shortly", 0});
    return e2b_->handle_envd(ex, c.principal, c.method, c.target.path, c.target.query);
  }
  const bool infer = c.target.segments.size() >= 2 && c.target.segments[0] == "v1" && c.target.segments[1] == "infer";
  if (infer && refused("infer", "/v1/infer/*")) return;
  if (dispatch_infer(c)) return;
  if (!sandboxes_.ready())  // respond() adds the Retry-After
    return send_error(c, {ErrorCode::kNodeUnavailable, "b3osd is starting (reattaching sandboxes); retry shortly", 0});
  // /mcp: the same key, rate limit and requests-in-flight cap as every route; the MCP server
  // reads and answers the request itself (JSON-RPC bodies, sessions, event streams).
  if (mcp_ && c.target.segments.size() == 1 && c.target.segments[0] == "mcp") {
    if (refused("mcp", "/mcp")) return;
    return relayed_mcp ? mcp_->handle_relayed(ex, c.principal) : mcp_->handle(ex, c.principal, c.target.query);
  }
  if (e2b_ && e2b::Server::is_control(c.target.segments)) {
    if (refused("e2b-control", access::kE2bControlPattern)) return;
    return e2b_->handle_control(ex, c.principal, c.method, c.target.segments, c.target.query);
  }
  const Match match = route(c);
  if (match.route && refused("rest", match.route->pattern)) return;
  if (!match.route && c.principal.kind != sandbox::CredentialKind::kApiKey)
    return send_error(c, {ErrorCode::kUnauthorized, "this route takes an API key", 0});
  if (match.route) c.operation = match.route->operation;
  if (match.route && match.route->stream) return (this->*match.route->stream)(c);

  if (ex.has_body()) {
    if (!media_type_is(ex.header("Content-Type"), "application/json"))
      return send_error(c, {ErrorCode::kUnsupportedMediaType,
                            "this operation takes Content-Type: application/json, got \"" +
                                std::string(ex.header("Content-Type")) + "\"",
                            0});
    auto raw = ex.read_body(cfg_.max_json_body);
    if (!raw) return send_error(c, raw.error());
    c.raw_body = std::move(*raw);
    if (json_depth(c.raw_body) > 64)
      return send_error(c, {ErrorCode::kInvalidRequest, "body: JSON nested deeper than 64 levels", 0});
    c.body = json::parse(c.raw_body, nullptr, false);
    if (c.body.is_discarded())
      return send_error(c, {ErrorCode::kInvalidRequest, "body: not valid JSON", 0});
  }

  std::string_view idem = ex.header("Idempotency-Key");
  if (!idem.empty() && (c.method == "POST" || c.method == "DELETE")) {
    if (idem.size() > 255) return send_error(c, {ErrorCode::kInvalidRequest, "Idempotency-Key: at most 255 characters", 0});
    for (char ch : idem)
      if (ch < 0x21 || ch > 0x7e)
        return send_error(c, {ErrorCode::kInvalidRequest, "Idempotency-Key: only visible ASCII characters", 0});
    auto hit = store_.idempotency_begin(c.principal.project_id, std::string(idem), c.principal.key_id, c.method,
                                        std::string(ex.target()), store::sha256_hex(c.raw_body));
    if (!hit) return send_error(c, hit.error());
    if (hit->kind == store::IdempotencyHit::Kind::kConflict)
      return send_error(c, {ErrorCode::kIdempotencyKeyConflict, hit->reason, 0});
    if (hit->kind == store::IdempotencyHit::Kind::kFull)
      return send_error(c, {ErrorCode::kQuotaExceeded,
                            "this project holds " + std::to_string(store_.idempotency_limits().max_records) +
                                " Idempotency-Keys of the last 24 hours, its most (--idempotency-max-keys); send "
                                "this request without one, or later",
                            0});
    if (hit->kind == store::IdempotencyHit::Kind::kReplay) {
      http::Headers h = {{"Idempotent-Replayed", "true"},
                         {"Server-Timing", server_timing(c.timing, c.total.elapsed_ms())}};
      return respond(ex, hit->status, hit->content_type, std::move(hit->body), std::move(h));
    }
    c.idempotency_key = std::string(idem);
  }

  if (!match.route) return send(c, match.refusal);
  auto reply = (this->*match.route->json)(c);
  if (!reply) return send_error(c, reply.error());
  if (reply->status == 0) return;  // the handler answered itself (a streamed exec)
  send(c, std::move(*reply));
}

// ---- routes ----

namespace {
/// The query parameters of a request, in order, for the request parsers.
sandbox::Params params_of(const Target& t) { return {t.query.begin(), t.query.end()}; }

std::vector<std::string_view> split(std::string_view pattern) {
  std::vector<std::string_view> out;
  size_t i = 1;
  while (i <= pattern.size()) {
    size_t j = pattern.find('/', i);
    if (j == std::string_view::npos) j = pattern.size();
    out.push_back(pattern.substr(i, j - i));
    i = j + 1;
  }
  return out;
}
}  // namespace

// The REST API, one row per operation: method, path pattern ({sbx} and {snp} are ids, checked
// before anything else), and the handler. JSON handlers get the parsed body; stream handlers
// (file transfers) read and write the bytes themselves.
const std::vector<Api::Route>& Api::routes() {
  static const std::vector<Route> kRoutes = {
      {"GET", "/v1/templates", &Api::list_templates, nullptr},
      {"POST", "/v1/templates", &Api::create_template, nullptr, "template_build"},
      {"POST", "/v1/templates/uploads", nullptr, &Api::upload_template_file, "template_upload"},
      {"GET", "/v1/templates/{tpl}", &Api::get_template, nullptr},
      {"DELETE", "/v1/templates/{tpl}", &Api::delete_template, nullptr},
      {"GET", "/v1/templates/{tpl}/builds", &Api::list_builds, nullptr},
      {"GET", "/v1/templates/{tpl}/builds/{bld}", &Api::get_build, nullptr},
      {"GET", "/v1/templates/{tpl}/builds/{bld}/logs", nullptr, &Api::build_logs},
      {"POST", "/v1/templates/{tpl}/builds/{bld}/cancel", &Api::cancel_build, nullptr, "template_build_cancel"},
      {"GET", "/v1/snapshots", &Api::list_snapshots, nullptr},
      {"GET", "/v1/snapshots/{snp}", &Api::get_snapshot, nullptr},
      {"DELETE", "/v1/snapshots/{snp}", &Api::delete_snapshot, nullptr},
      {"POST", "/v1/sandboxes", &Api::create_sandbox, nullptr, "create"},
      {"GET", "/v1/sandboxes", &Api::list_sandboxes, nullptr},
      {"GET", "/v1/sandboxes/{sbx}", &Api::get_sandbox, nullptr},
      {"DELETE", "/v1/sandboxes/{sbx}", &Api::delete_sandbox, nullptr, "delete"},
      {"PATCH", "/v1/sandboxes/{sbx}", &Api::update_sandbox, nullptr, "update"},
      {"POST", "/v1/sandboxes/{sbx}/exec", &Api::exec, nullptr, "exec"},
      {"PUT", "/v1/sandboxes/{sbx}/files", nullptr, &Api::upload, "upload"},
      {"GET", "/v1/sandboxes/{sbx}/files", nullptr, &Api::download, "download"},
      {"DELETE", "/v1/sandboxes/{sbx}/files", &Api::remove_file, nullptr},
      {"GET", "/v1/sandboxes/{sbx}/files/list", &Api::list_files, nullptr},
      {"GET", "/v1/sandboxes/{sbx}/files/watch", nullptr, &Api::watch_files},
      {"POST", "/v1/sandboxes/{sbx}/fork", &Api::fork, nullptr, "fork"},
      {"POST", "/v1/sandboxes/{sbx}/pause", &Api::pause, nullptr, "pause"},
      {"POST", "/v1/sandboxes/{sbx}/resume", &Api::resume, nullptr, "resume"},
      {"POST", "/v1/sandboxes/{sbx}/snapshot", &Api::snapshot, nullptr, "snapshot"},
      {"POST", "/v1/sandboxes/{sbx}/ports/{port}/url", &Api::mint_port_url, nullptr},
      {"GET", "/v1/sandboxes/{sbx}/pty", nullptr, &Api::terminal, "pty"},
      {"POST", "/v1/sandboxes/{sbx}/processes", &Api::start_process, nullptr, "process_start"},
      {"GET", "/v1/sandboxes/{sbx}/processes", &Api::list_processes, nullptr},
      {"GET", "/v1/sandboxes/{sbx}/processes/{proc}", &Api::get_process, nullptr},
      {"DELETE", "/v1/sandboxes/{sbx}/processes/{proc}", &Api::forget_process, nullptr},
      {"POST", "/v1/sandboxes/{sbx}/processes/{proc}/stdin", &Api::process_stdin, nullptr},
      {"POST", "/v1/sandboxes/{sbx}/processes/{proc}/signal", &Api::signal_process, nullptr},
      {"POST", "/v1/sandboxes/{sbx}/processes/{proc}/wait", &Api::wait_process, nullptr},
      {"GET", "/v1/sandboxes/{sbx}/processes/{proc}/output", nullptr, &Api::process_output},
  };
  return kRoutes;
}

std::vector<std::pair<std::string_view, std::string_view>> Api::rest_routes() {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  for (const Route& r : routes()) out.emplace_back(r.method, r.pattern);
  return out;
}

std::string_view Api::route_label(const std::vector<std::string>& s) {
  if (s.size() == 1 && (s[0] == "healthz" || s[0] == "mcp")) return s[0] == "mcp" ? "/mcp" : "/healthz";
  if (s.size() >= 2 && s[0] == "v1" && s[1] == "infer") return "/v1/infer/*";
  if ((s.size() == 4 || s.size() == 5) && s[0] == "v1" && s[1] == "sandboxes" && s[3] == "ports")
    return s.size() == 4 ? "/v1/sandboxes/{sbx}/ports" : "/v1/sandboxes/{sbx}/ports/{port}";
  for (const Route& r : routes()) {
    const auto pattern = split(r.pattern);
    if (pattern.size() != s.size()) continue;
    bool same = true;
    for (size_t i = 0; i < s.size() && same; ++i)
      same = (pattern[i].size() > 1 && pattern[i].front() == '{') || pattern[i] == s[i];
    if (same) return r.pattern;
  }
  return "unmatched";
}

Api::Match Api::route(Call& c) {
  const auto& s = c.target.segments;
  Match m;
  auto refuse = [&](const Error& e) {
    m.refusal = error_reply(e);
    return m;
  };
  if (!s.empty() && s[0] == "mcp")  // /mcp itself is the MCP server's (handle); nothing is below it
    return refuse({ErrorCode::kNotFound, "no such route: " + c.target.path + " (the MCP endpoint is /mcp)", 0});
  // The spec's other ports routes (list, expose, get, close a port) are not built: 501 for a
  // sandbox that exists. Ports are given at create; their URLs are minted below (docs/ports.md).
  if ((s.size() == 4 || s.size() == 5) && s[0] == "v1" && s[1] == "sandboxes" && s[3] == "ports") {
    if (!valid_id(s[2], "sbx")) return refuse(not_found(s[2]).value());
    if (auto src = sandboxes_.get(c.principal, s[2]); !src) return refuse(src.error());
    return refuse({ErrorCode::kNotImplemented,
                   "this ports route is not available on this deployment yet; ports are given at create, "
                   "and POST /v1/sandboxes/{id}/ports/{port}/url mints a URL",
                   0});
  }
  std::string allowed;
  for (const Route& r : routes()) {
    const auto pattern = split(r.pattern);
    if (pattern.size() != s.size()) continue;
    bool same = true;
    for (size_t i = 0; i < s.size() && same; ++i) {
      if (pattern[i] == "{sbx}") {
        if (!valid_id(s[i], "sbx")) return refuse(not_found(s[i]).value());
      } else if (pattern[i] == "{tpl}") {
        // a name or an id: the service says whether there is one (404)
      } else if (pattern[i] == "{bld}") {
        if (!valid_id(s[i], "bld")) return refuse({ErrorCode::kNotFound, "no build " + s[i], 0});
      } else if (pattern[i] == "{proc}") {
        if (!sandbox::valid_process_key(s[i]))
          return refuse({ErrorCode::kProcessNotFound, "no process \"" + s[i] + "\" (ids look like proc_3, or give the pid)", 0});
      } else if (pattern[i] == "{port}") {
        // any segment: its handler says what is wrong with it (400)
      } else if (pattern[i] == "{snp}") {
        if (!valid_id(s[i], "snp")) return refuse({ErrorCode::kSnapshotNotFound, "no snapshot " + s[i] + " in this project", 0});
      } else {
        same = pattern[i] == s[i];
      }
    }
    if (!same) continue;
    if (r.method == c.method) {
      m.route = &r;
      return m;
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
  }
  if (allowed.empty()) return refuse({ErrorCode::kNotFound, "no such route: " + c.target.path, 0});
  m.refusal = error_reply(
      {ErrorCode::kMethodNotAllowed, c.method + " is not allowed on " + c.target.path + " (allowed: " + allowed + ")", 0});
  m.refusal.headers.emplace_back("Allow", allowed);
  return m;
}

// ---- JSON handlers: parse into the request struct, call the service, answer ----

namespace {
Result<Reply> reply(Result<json> r, int status = 200) {
  if (!r) return fail(r.error());
  return Reply{status, std::move(*r), {}};
}
}  // namespace

Result<Reply> Api::list_templates(Call& c) {
  if (!templates_) return Reply{200, sandboxes_.templates(), {}};
  return reply(templates_->list(c.principal));
}

namespace {
Error no_templates() {
  return {ErrorCode::kProductUnavailable, "this b3osd builds no templates (--templates off)", 0};
}
}  // namespace

Result<Reply> Api::create_template(Call& c) {
  if (!templates_) return fail(no_templates());
  return reply(templates_->create(c.principal, c.body), 202);
}

Result<Reply> Api::get_template(Call& c) {
  if (!templates_) {
    const json builtin = sandboxes_.templates();
    for (auto& t : builtin["data"])
      if (t.value("name", "") == c.target.segments[2] || t.value("id", "") == c.target.segments[2]) return Reply{200, t, {}};
    return fail(ErrorCode::kTemplateNotFound, "no template \"" + c.target.segments[2] + "\"");
  }
  return reply(templates_->get(c.principal, c.target.segments[2]));
}

Result<Reply> Api::delete_template(Call& c) {
  if (!templates_) return fail(no_templates());
  bool force = false;
  for (auto& [k, v] : params_of(c.target)) {
    if (k != "force") return fail(ErrorCode::kInvalidRequest, k + ": unknown parameter (force=true deletes a template in use)");
    if (v != "true" && v != "false") return fail(ErrorCode::kInvalidRequest, "force: must be true or false");
    force = v == "true";
  }
  return reply(templates_->remove(c.principal, c.target.segments[2], force));
}

Result<Reply> Api::list_builds(Call& c) {
  if (!templates_) return fail(no_templates());
  return reply(templates_->builds(c.principal, c.target.segments[2]));
}

Result<Reply> Api::get_build(Call& c) {
  if (!templates_) return fail(no_templates());
  return reply(templates_->build(c.principal, c.target.segments[2], c.target.segments[4]));
}

Result<Reply> Api::cancel_build(Call& c) {
  if (!templates_) return fail(no_templates());
  auto r = templates_->cancel(c.principal, c.target.segments[2], c.target.segments[4]);
  if (!r) return fail(r.error());
  return Reply{r->first, std::move(r->second), {}};
}

Result<Reply> Api::list_snapshots(Call& c) {
  auto req = sandbox::parse_list_snapshots(params_of(c.target));
  if (!req) return fail(req.error());
  return reply(sandboxes_.list_snapshots(c.principal, req->cursor, req->limit));
}

Result<Reply> Api::get_snapshot(Call& c) { return reply(sandboxes_.get_snapshot(c.principal, c.target.segments[2])); }

Result<Reply> Api::delete_snapshot(Call& c) {
  return reply(sandboxes_.delete_snapshot(c.principal, c.target.segments[2]));
}

Result<Reply> Api::create_sandbox(Call& c) {
  Stopwatch sw;
  auto spec = sandbox::parse_create(c.body, cfg_.limits);
  if (!spec) return fail(spec.error());
  c.timing.lap("parse", sw);
  return reply(sandboxes_.create(c.principal, *spec, c.timing), 201);
}

Result<Reply> Api::list_sandboxes(Call& c) {
  auto q = sandbox::parse_list_sandboxes(params_of(c.target));
  if (!q) return fail(q.error());
  return reply(sandboxes_.list(c.principal, *q));
}

Result<Reply> Api::get_sandbox(Call& c) { return reply(sandboxes_.get(c.principal, c.target.segments[2])); }

Result<Reply> Api::update_sandbox(Call& c) {
  auto req = sandbox::parse_update(c.body, cfg_.limits.max_timeout_s);
  if (!req) return fail(req.error());
  return reply(sandboxes_.update(c.principal, c.target.segments[2], *req, c.timing));
}

Result<Reply> Api::delete_sandbox(Call& c) {
  return reply(sandboxes_.remove(c.principal, c.target.segments[2], c.timing));
}

Result<Reply> Api::remove_file(Call& c) {
  auto req = sandbox::parse_file_request(params_of(c.target), true);
  if (!req) return fail(req.error());
  return reply(sandboxes_.remove_path(c.principal, c.target.segments[2], req->path, req->recursive, c.timing));
}

Result<Reply> Api::list_files(Call& c) {
  const auto params = params_of(c.target);
  auto req = sandbox::parse_file_request(params, false);
  if (!req) return fail(req.error());
  auto page = sandbox::parse_list_page(params);
  if (!page) return fail(page.error());
  return reply(sandboxes_.list_dir(c.principal, c.target.segments[2], req->path, c.timing, page->after, page->limit));
}

Result<Reply> Api::fork(Call& c) {
  auto req = sandbox::parse_fork(c.body);
  if (!req) return fail(req.error());
  return reply(sandboxes_.fork(c.principal, c.target.segments[2], req->count, req->metadata, c.timing), 201);
}

Result<Reply> Api::pause(Call& c) { return reply(sandboxes_.pause(c.principal, c.target.segments[2], c.timing)); }

Result<Reply> Api::resume(Call& c) { return reply(sandboxes_.resume(c.principal, c.target.segments[2], c.timing)); }

Result<Reply> Api::snapshot(Call& c) {
  return reply(sandboxes_.snapshot(c.principal, c.target.segments[2], c.timing), 201);
}

Result<Reply> Api::mint_port_url(Call& c) {
  auto req = sandbox::parse_port_url(c.target.segments[4], c.body);
  if (!req) return fail(req.error());
  return reply(sandboxes_.mint_port_url(c.principal, c.target.segments[2], req->port, req->ttl_s), 201);
}

Result<Reply> Api::exec(Call& c) {
  Stopwatch sw;
  auto spec = sandbox::parse_exec(c.body);
  if (!spec) return fail(spec.error());
  // A command may run for its whole timeout: it holds a stream's place (the project's fair
  // share of them), never one of the request workers short requests need.
  if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return fail(h.error());
  c.timing.lap("parse", sw);
  if (spec->stream || accepts_event_stream(c.ex.header("Accept"))) {
    spec->stream = true;
    return exec_streamed(c, *spec);
  }
  auto r = sandboxes_.exec(c.principal, c.target.segments[2], *spec, c.timing, [&] { return c.ex.client_gone(); });
  if (!r) return fail(r.error());
  return Reply{200,
               {{"exit_code", r->exit_code},
                {"stdout", r->stdout_data},
                {"stderr", r->stderr_data},
                {"timed_out", r->timed_out},
                {"duration_ms", round_us(r->duration_ms)},
                {"stdout_truncated", r->stdout_truncated},
                {"stderr_truncated", r->stderr_truncated}},
               {}};
}

// A streamed exec (docs/api.md, "Streamed exec"): server-sent events `start` {pid}, `stdout` and
// `stderr` chunks as they come, then `exit` (or `error`). Until `start` nothing is sent, so a
// command that cannot start (no such sandbox, a bad cwd or user) is an ordinary error answer.
// Each chunk is written before the agent may send more: a client that reads slowly holds the
// command back; one that reads nothing for the write timeout ends it, as one that leaves does.
Result<Reply> Api::exec_streamed(Call& c, sandbox::ExecSpec& spec) {
  if (c.idempotency_key) {
    (void)store_.idempotency_abort(c.principal.project_id, *c.idempotency_key);
    c.idempotency_key.reset();
    return fail(ErrorCode::kInvalidRequest, "a streamed exec cannot be replayed: send it without Idempotency-Key");
  }
  sandbox::OutputEncoder enc;
  bool begun = false;
  auto on_start = [&](int pid) {
    http::Headers h = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    if (!c.ex.begin_stream(200, "text/event-stream", http::Exchange::kUnknownLength, h)) return false;
    begun = true;
    return static_cast<bool>(c.ex.write(sandbox::sse_event("start", json{{"pid", pid}})));
  };
  std::string event;  // one buffer for every chunk's event: its capacity is kept
  auto on_output = [&](bool is_stderr, std::string_view bytes) {
    event.clear();
    if (!enc.append_event(event, is_stderr, bytes)) return true;
    return static_cast<bool>(c.ex.write(event));
  };
  auto r = sandboxes_.exec(c.principal, c.target.segments[2], spec, c.timing, [&] { return c.ex.client_gone(); },
                           on_output, on_start);
  const double total = c.total.elapsed_ms();
  sandbox::record_operation(c.operation, "rest", c.timing, total,
                            r ? sandbox::Outcome::kOk
                              : sandbox::outcome_of(error_http_status(r.error().code)));
  if (!begun) {
    if (!r) return fail(r.error());
    // An agent that never said "started" (one in an older checkpoint image): the whole
    // answer comes at the end, still as events.
    if (!c.ex.begin_stream(200, "text/event-stream", http::Exchange::kUnknownLength, {{"Cache-Control", "no-cache"}}))
      return Reply{0, {}, {}};
    begun = true;
  }
  std::string tail;
  for (bool err : {false, true})
    if (auto j = enc.flush(err)) tail += sandbox::sse_event(err ? "stderr" : "stdout", *j);
  if (!r) {
    tail += sandbox::sse_event("error", json{{"error", {{"code", std::string(error_code_name(r.error().code))},
                                                        {"message", r.error().message}}}});
  } else {
    tail += sandbox::sse_event("exit", json{{"exit_code", r->exit_code},
                                            {"signal", r->signal},
                                            {"timed_out", r->timed_out},
                                            {"duration_ms", round_us(r->duration_ms)}});
  }
  if (c.ex.write(tail)) (void)c.ex.end_stream();
  else c.ex.abort_stream();
  return Reply{0, {}, {}};  // answered
}

// ---- background processes (docs/api.md, "Background processes") ----

Result<Reply> Api::start_process(Call& c) {
  auto spec = sandbox::parse_process(c.body, cfg_.process_output_bytes);
  if (!spec) return fail(spec.error());
  return reply(sandboxes_.exec().start_process(c.principal, c.target.segments[2], *spec, c.timing), 201);
}

Result<Reply> Api::list_processes(Call& c) {
  return reply(sandboxes_.exec().list_processes(c.principal, c.target.segments[2]));
}

Result<Reply> Api::get_process(Call& c) {
  return reply(sandboxes_.exec().get_process(c.principal, c.target.segments[2], c.target.segments[4]));
}

Result<Reply> Api::forget_process(Call& c) {
  return reply(sandboxes_.exec().forget_process(c.principal, c.target.segments[2], c.target.segments[4]));
}

Result<Reply> Api::process_stdin(Call& c) {
  auto req = sandbox::parse_stdin(c.body);
  if (!req) return fail(req.error());
  return reply(sandboxes_.exec().write_process_stdin(c.principal, c.target.segments[2], c.target.segments[4], req->data,
                                                     req->eof));
}

Result<Reply> Api::signal_process(Call& c) {
  auto req = sandbox::parse_signal(c.body);
  if (!req) return fail(req.error());
  return reply(sandboxes_.exec().signal_process(c.principal, c.target.segments[2], c.target.segments[4], req->signal,
                                                req->group));
}

Result<Reply> Api::wait_process(Call& c) {
  auto timeout = sandbox::parse_wait(c.body);
  if (!timeout) return fail(timeout.error());
  if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return fail(h.error());
  return reply(sandboxes_.exec().wait_process(c.principal, c.target.segments[2], c.target.segments[4], *timeout,
                                              [&] { return c.ex.client_gone(); }));
}

// GET .../output: JSON of what the ring holds from `since`, or (follow=true, or Accept:
// text/event-stream) server-sent events: `stdout`/`stderr` chunks whose `id` is the offset
// after them (an EventSource that reconnects sends it back as Last-Event-ID), `gap` where the
// ring dropped bytes the reader had not taken, then `exit` (or `end` while it still runs).
void Api::process_output(Call& c) {
  auto req = sandbox::parse_output_request(params_of(c.target), std::string(c.ex.header("Last-Event-ID")));
  if (!req) return send_error(c, req.error());
  const bool sse = req->follow || accepts_event_stream(c.ex.header("Accept"));
  if (sse)
    if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return send_error(c, h.error());
  const std::string& id = c.target.segments[2];
  const std::string& proc = c.target.segments[4];
  sandbox::OutputEncoder enc;
  sandbox::Exec::OutputReader reader;
  json header, chunks = json::array();
  uint64_t emitted = req->since;  // bytes before this offset were sent (or said dropped)
  bool begun = false;
  int last_stream = -1;
  auto write = [&](const std::string& event) { return static_cast<bool>(c.ex.write(event)); };
  // One chunk, ending at offset `end` (its SSE id: where a reader that comes back resumes).
  // An answer that is not a stream holds at most --max-exec-output bytes of output (counted
  // from the offsets, so escapes and base64 cost at most 2x on top); the rest is read from
  // `next` ("more": true). A 64 MiB ring is never built into one answer.
  const uint64_t answer_cap = sandboxes_.config().max_exec_output;
  auto emit = [&](bool is_stderr, json j, uint64_t end) {
    j["offset"] = emitted;
    emitted = end;
    if (sse) return write(sandbox::sse_event(is_stderr ? "stderr" : "stdout", j, end));
    j["stream"] = is_stderr ? "stderr" : "stdout";
    chunks.push_back(std::move(j));
    return true;
  };
  if (!sse) reader.full = [&] { return emitted - header.value("from", req->since) >= answer_cap; };
  // A partial UTF-8 character carried for one stream goes out (as base64) before bytes of the
  // other stream or a gap: offsets stay in order.
  auto flush = [&](bool is_stderr) {
    const size_t n = enc.carried(is_stderr);
    if (auto j = enc.flush(is_stderr)) return emit(is_stderr, *j, emitted + n);
    return true;
  };
  reader.begin = [&](const json& h) {
    header = h;
    emitted = h.value("from", req->since);
    if (!sse) return true;
    http::Headers hs = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    if (!c.ex.begin_stream(200, "text/event-stream", http::Exchange::kUnknownLength, hs)) return false;
    begun = true;
    if (emitted > req->since)
      return write(sandbox::sse_event("gap", json{{"from", req->since}, {"to", emitted}}, emitted));
    return true;
  };
  reader.data = [&](uint64_t offset, bool is_stderr, std::string_view bytes) {
    const int stream = is_stderr ? 1 : 0;
    if (last_stream >= 0 && last_stream != stream && !flush(last_stream == 1)) return false;
    last_stream = stream;
    auto j = enc.chunk(is_stderr, bytes);
    if (!j) return true;
    return emit(is_stderr, *j, offset + bytes.size() - enc.carried(is_stderr));
  };
  reader.gap = [&](uint64_t from, uint64_t to) {
    if (!flush(false) || !flush(true)) return false;
    emitted = to;
    if (sse) return write(sandbox::sse_event("gap", json{{"from", from}, {"to", to}}, to));
    chunks.push_back(json{{"gap", {{"from", from}, {"to", to}}}});
    return true;
  };
  auto r = sandboxes_.exec().process_output(c.principal, id, proc, req->since, req->follow, req->timeout_ms, reader,
                                            [&] { return c.ex.client_gone(); });
  if (!r && !begun) return send_error(c, r.error());
  if (r) (void)(flush(false) && flush(true));
  if (!sse) {
    json out = {{"object", "process_output"},
                {"id", proc},
                {"since", req->since},
                {"from", header.value("from", req->since)},
                {"dropped", header.value("dropped", uint64_t{0})},
                {"chunks", chunks},
                {"next", emitted},
                {"running", r->value("running", false)}};
    json state = *r;
    if (r->value("more", false)) {
      // Cut at the answer's bound: whether the process still runs is asked, not inferred.
      out["more"] = true;
      auto now = sandboxes_.exec().get_process(c.principal, id, proc);
      state = now ? *now : json{{"running", true}};
      out["running"] = state.value("running", state.value("status", "") == "running");
    }
    if (state.contains("exit_code") && !state["exit_code"].is_null()) {
      out["exit_code"] = state["exit_code"];
      out["signal"] = state.value("signal", json(0));
    }
    return send(c, {200, std::move(out), {}});
  }
  if (!r) {
    (void)write(sandbox::sse_event("error", json{{"error", {{"code", std::string(error_code_name(r.error().code))},
                                                            {"message", r.error().message}}}}));
    return c.ex.abort_stream();
  }
  const uint64_t next = r->value("next", emitted);
  const std::string tail =
      r->contains("exit_code")
          ? sandbox::sse_event("exit", json{{"exit_code", (*r)["exit_code"]}, {"signal", (*r)["signal"]}, {"next", next}}, next)
          : sandbox::sse_event("end", json{{"running", true}, {"next", next}}, next);
  if (write(tail)) (void)c.ex.end_stream();
  else c.ex.abort_stream();
}

// GET .../files/watch (docs/api.md, "Watching files"): server-sent events, `start` first (what
// is watched), then one event per change named by its type (create, modify, delete, rename,
// attrib; overflow and limit where events were lost), comments as keep-alives while nothing
// happens, and `end` {"reason": "deleted" | "timeout"} last.
void Api::watch_files(Call& c) {
  auto req = sandbox::parse_watch_request(params_of(c.target));
  if (!req) return send_error(c, req.error());
  if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return send_error(c, h.error());
  bool begun = false;
  auto write = [&](const std::string& s) { return static_cast<bool>(c.ex.write(s)); };
  sandbox::Exec::WatchReader reader;
  reader.begin = [&](const json& h) {
    http::Headers hs = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    if (!c.ex.begin_stream(200, "text/event-stream", http::Exchange::kUnknownLength, hs)) return false;
    begun = true;
    return write(sandbox::sse_event("start", h));
  };
  reader.events = [&](std::string_view lines) {
    std::string out;
    while (!lines.empty()) {
      const size_t nl = lines.find('\n');
      const std::string_view line = lines.substr(0, nl);
      lines.remove_prefix(nl == std::string_view::npos ? lines.size() : nl + 1);
      json ev = json::parse(line, nullptr, false);
      if (!ev.is_object()) continue;
      out += sandbox::sse_event(ev.value("type", "change"), ev);
    }
    return out.empty() || write(out);
  };
  reader.quiet = [&] { return write(": keep-alive\n\n"); };
  auto r = sandboxes_.exec().watch_files(c.principal, c.target.segments[2], req->path, req->recursive,
                                         req->timeout_ms, reader, [&] { return c.ex.client_gone(); });
  if (!r && !begun) return send_error(c, r.error());
  if (!r) {
    (void)write(sandbox::sse_event("error", json{{"error", {{"code", std::string(error_code_name(r.error().code))},
                                                            {"message", r.error().message}}}}));
    return c.ex.abort_stream();
  }
  if (write(sandbox::sse_event("end", *r))) (void)c.ex.end_stream();
  else c.ex.abort_stream();
}

// GET /v1/sandboxes/{id}/pty (docs/api.md, "Terminal"): a WebSocket carrying a terminal made in
// the sandbox. Binary messages are bytes both ways (typed in, shown); text messages are JSON:
// from the client {"type":"resize","rows","cols"} and {"type":"input","data"}; from b3osd
// {"type":"started","pid"} first and {"type":"exit","exit_code","signal"} last, then a close.
void Api::terminal(Call& c) {
  auto spec = sandbox::parse_terminal(params_of(c.target));
  if (!spec) return send_error(c, spec.error());
  if (auto sb = sandboxes_.get(c.principal, c.target.segments[2]); !sb) return send_error(c, sb.error());
  if (!c.ex.is_websocket_upgrade())
    return send_error(c, {ErrorCode::kInvalidRequest,
                          "this route is a WebSocket: connect with Connection: Upgrade and Upgrade: websocket "
                          "(b3os shell ID does)",
                          0});
  // What Beast's accept would refuse is refused here, before a shell is started for nothing:
  // version 13 and a key of 16 random bytes in base64 (RFC 6455, 4.2.1).
  if (c.ex.header("Sec-WebSocket-Version") != "13")
    return send_error(c, {ErrorCode::kInvalidRequest, "Sec-WebSocket-Version: must be 13", 0});
  if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return send_error(c, h.error());
  if (const std::string_view key = c.ex.header("Sec-WebSocket-Key");
      key.size() != 24 || key.substr(22) != "==" ||
      key.substr(0, 22).find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") !=
          std::string_view::npos)
    return send_error(c, {ErrorCode::kInvalidRequest, "Sec-WebSocket-Key: must be 16 bytes in base64", 0});
  auto t = sandboxes_.exec().open_terminal(c.principal, c.target.segments[2], *spec);
  if (!t) return send_error(c, t.error());
  auto& st = *t->stream;
  std::atomic<bool> stop{false};
  std::atomic<bool> ended{false};
  std::thread pump, feeder;
  // What the client typed, on its way to the sandbox: the WebSocket's thread only queues it
  // (it also carries the screen's bytes out, and must never wait for the sandbox). Past
  // kInputHigh queued bytes the client is not read until the feeder is below kInputLow, so a
  // paste into a program that reads nothing holds the client back, and nothing is dropped.
  constexpr size_t kInputHigh = 256u << 10, kInputLow = 64u << 10;
  struct Input {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> queue;
    size_t bytes = 0;
    bool paused = false;
  } in;
  auto wake_feeder = [&] {
    { std::lock_guard g(in.mu); }
    in.cv.notify_all();
  };
  http::WebSocketHandler h;
  h.opened = [&](http::WebSocketPeer& peer) {
    peer.send(json{{"type", "started"}, {"pid", t->pid}}.dump(), false);
    feeder = std::thread([&, peer_ptr = &peer] {
      bool dead = false;  // the terminal ended or the channel closed: what is typed is dropped
      // While the client is not read (paused) nothing notices it leave, so a program that reads
      // no input must not hold the connection and this thread for ever: after kInputStall with
      // the client paused and nothing taken, the connection is closed (the shell gets SIGHUP).
      constexpr auto kInputStall = std::chrono::seconds(60);
      std::optional<std::chrono::steady_clock::time_point> stalled_since;
      for (;;) {
        std::string chunk;
        {
          std::unique_lock lk(in.mu);
          in.cv.wait(lk, [&] { return stop.load() || !in.queue.empty(); });
          if (stop.load()) return;
          chunk = std::move(in.queue.front());
          in.queue.pop_front();
        }
        std::string_view rest = chunk;
        while (!rest.empty() && !dead && !stop.load()) {
          const auto now = std::chrono::steady_clock::now();
          auto n = st.send_some(rest, now + std::chrono::milliseconds(250));
          if (!n) {
            dead = true;
          } else if (*n > 0) {
            rest.remove_prefix(*n);
            stalled_since.reset();
          } else if (!stalled_since) {
            stalled_since = now;
          } else if (now - *stalled_since >= kInputStall && [&] { std::lock_guard g(in.mu); return in.paused; }()) {
            peer_ptr->close(1011, "the terminal's program read no input for 60 s");
            dead = true;
          }
        }
        bool resume = false;
        {
          std::lock_guard g(in.mu);
          in.bytes -= chunk.size();
          if (in.paused && in.bytes <= kInputLow) {
            in.paused = false;
            resume = true;
          }
        }
        if (resume) peer_ptr->resume_reading();
      }
    });
    // What the terminal shows, to the client: its credit goes back once the bytes are queued,
    // and the queue waits for a slow client, so a flood stops in the sandbox's pty.
    pump = std::thread([&, peer_ptr = &peer] {
      while (!stop.load()) {
        auto f = st.next(std::chrono::steady_clock::now() + std::chrono::milliseconds(250));
        if (!f) {
          if (t->sandbox->channel->closed()) {
            peer_ptr->close(1011, "the sandbox went away");
            return;
          }
          // A pause ends its terminals as a delete does: a frozen program answers nothing,
          // and an open terminal would hold its slot (and this thread) for as long as the
          // client waited. The program gets SIGHUP when the sandbox resumes.
          bool pausing;
          {
            std::lock_guard lk(t->sandbox->mu);
            pausing = t->sandbox->rec.state == store::State::kPausing || t->sandbox->rec.state == store::State::kPaused;
          }
          if (pausing) {
            peer_ptr->close(1011, "the sandbox was paused");
            return;
          }
          continue;
        }
        if (f->type == protocol::FrameType::kStdout) {
          const size_t n = f->payload.size();
          if (!peer_ptr->send(std::string(f->payload.data(), n), true)) return;
          st.grant(static_cast<uint32_t>(n));
        } else if (f->type == protocol::FrameType::kEnd) {
          ended = true;
          json end = json::parse(f->payload, nullptr, false);
          json ev = {{"type", "exit"}};
          if (end.is_object() && end.value("ok", false)) {
            ev["exit_code"] = end.value("exit_code", -1);
            ev["signal"] = end.value("signal", 0);
          } else {
            ev["error"] = end.is_object() && end.contains("error") ? end["error"] : json("the terminal failed");
          }
          peer_ptr->send(ev.dump(), false);
          peer_ptr->close(1000, "exited");
          return;
        }
      }
    });
  };
  auto typed = [&](std::string data) {
    std::lock_guard g(in.mu);
    in.bytes += data.size();
    in.queue.push_back(std::move(data));
    in.cv.notify_all();
    if (in.bytes < kInputHigh) return true;
    in.paused = true;
    return false;
  };
  h.message = [&](std::string_view msg, bool binary) {
    if (ended.load()) return true;
    if (binary) return typed(std::string(msg));
    json j = json::parse(msg, nullptr, false);
    if (!j.is_object()) return true;
    const std::string type = j.value("type", "");
    if (type == "input" && j.contains("data") && j["data"].is_string()) return typed(j["data"].get<std::string>());
    if (type == "resize" && j.contains("rows") && j.contains("cols") && j["rows"].is_number_integer() &&
        j["cols"].is_number_integer()) {
      const int64_t rows = j["rows"], cols = j["cols"];
      if (rows >= 1 && rows <= 1000 && cols >= 1 && cols <= 1000) (void)st.send_header({{"rows", rows}, {"cols", cols}});
    }
    return true;
  };
  auto shut = [&] {
    // The peer goes with the connection: the pump and the feeder must be done with it first
    // (a send the pump is blocked in returns false now; each wait for the agent ends within
    // 250 ms).
    stop = true;
    wake_feeder();
    if (pump.joinable()) pump.join();
    if (feeder.joinable()) feeder.join();
    if (!ended.load()) st.cancel();  // the client left: the shell gets SIGHUP, as a closed terminal
  };
  h.closed = shut;
  auto r = c.ex.websocket(h, std::chrono::minutes(10));
  shut();
  sandbox::record_operation(c.operation, "rest", c.timing, c.total.elapsed_ms(),
                            r ? sandbox::Outcome::kOk : sandbox::Outcome::kClientError);
}

// ---- stream handlers ----

void Api::upload(Call& c) {
  const std::string& id = c.target.segments[2];
  std::string_view ct = c.ex.header("Content-Type");
  if (!media_type_is(ct, "application/octet-stream"))
    return send_error(c, {ErrorCode::kUnsupportedMediaType,
                          "file uploads take Content-Type: application/octet-stream, got \"" + std::string(ct) + "\"", 0});
  auto req = sandbox::parse_file_request(params_of(c.target), false);
  if (!req) return send_error(c, req.error());
  const std::string* path = &req->path;
  if (auto len = c.ex.content_length(); len && *len > cfg_.max_upload_bytes)
    return send_error(c, {ErrorCode::kPayloadTooLarge,
                          "the file is larger than the upload limit of " + std::to_string(cfg_.max_upload_bytes) + " bytes", 0});
  sandbox::ChunkSource source = [&](char* buf, size_t cap) { return c.ex.read_chunk(buf, cap, cfg_.max_upload_bytes); };
  auto r = sandboxes_.write_file(c.principal, id, *path, source, c.timing);
  if (!r) return send_error(c, r.error());
  send(c, {201, std::move(*r), {}});
}

void Api::upload_template_file(Call& c) {
  if (!templates_) return send_error(c, no_templates());
  std::string_view ct = c.ex.header("Content-Type");
  if (!media_type_is(ct, "application/octet-stream") && !media_type_is(ct, "application/x-tar"))
    return send_error(c, {ErrorCode::kUnsupportedMediaType,
                          "template uploads take Content-Type: application/octet-stream or application/x-tar, got \"" +
                              std::string(ct) + "\"",
                          0});
  if (auto len = c.ex.content_length(); len && *len > templates_->max_upload_bytes())
    return send_error(c, {ErrorCode::kPayloadTooLarge,
                          "the tarball is larger than the upload limit of " + std::to_string(templates_->max_upload_bytes()) +
                              " bytes (--template-max-upload-bytes)",
                          0});
  sandbox::ChunkSource source = [&](char* buf, size_t cap) { return c.ex.read_chunk(buf, cap, ~uint64_t{0}); };
  auto r = templates_->upload(c.principal, source);
  if (!r) return send_error(c, r.error());
  send(c, {201, std::move(*r), {}});
}

void Api::build_logs(Call& c) {
  if (!templates_) return send_error(c, no_templates());
  bool follow = false;
  for (auto& [k, v] : params_of(c.target)) {
    if (k != "follow") return send_error(c, {ErrorCode::kInvalidRequest, k + ": unknown parameter (follow=true waits for more)", 0});
    if (v != "true" && v != "false") return send_error(c, {ErrorCode::kInvalidRequest, "follow: must be true or false", 0});
    follow = v == "true";
  }
  if (follow)
    if (auto h = c.ex.hold_stream(c.principal.project_id); !h) return send_error(c, h.error());
  bool begun = false;
  auto write = [&](std::string_view bytes) -> Result<void> {
    if (!begun) {
      if (auto r = c.ex.begin_stream(200, "text/plain; charset=utf-8", http::Exchange::kUnknownLength, {}); !r) return r;
      begun = true;
    }
    return c.ex.write(bytes);
  };
  auto r = templates_->logs(c.principal, c.target.segments[2], c.target.segments[4], follow, write,
                            [&] { return c.ex.client_gone(); });
  if (!r && !begun) return send_error(c, r.error());
  if (!begun) {
    if (auto b = c.ex.begin_stream(200, "text/plain; charset=utf-8", http::Exchange::kUnknownLength, {}); !b) return;
  }
  if (!r) return c.ex.abort_stream();
  (void)c.ex.end_stream();
}

void Api::download(Call& c) {
  const std::string& id = c.target.segments[2];
  auto req = sandbox::parse_file_request(params_of(c.target), false);
  if (!req) return send_error(c, req.error());
  const std::string* path = &req->path;
  sandbox::FileSink sink;
  sink.begin = [&](uint64_t size) {
    http::Headers h = {{"Server-Timing", server_timing(c.timing, c.total.elapsed_ms())}};
    return c.ex.begin_stream(200, "application/octet-stream", size, h);
  };
  sink.data = [&](std::string_view chunk) { return c.ex.write(chunk); };
  auto r = sandboxes_.read_file(c.principal, id, *path, sink, c.timing);
  if (!r && !c.ex.responded()) return send_error(c, r.error());  // send() counts it
  sandbox::record_operation(c.operation, "rest", c.timing, c.total.elapsed_ms(),
                            r ? sandbox::Outcome::kOk : sandbox::outcome_of(error_http_status(r.error().code)));
  if (!r) spdlog::warn("download {} {}: {}", id, *path, r.error().message);
}

}  // namespace b3os::api
