// E2B's control plane (docs/e2b.md, "Control plane"): its routes and field names, each mapped
// onto the sandbox service's operation that REST and MCP call.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/clock.h"
#include "daemon/e2b/server.h"
#include "daemon/e2b/wire.h"
#include "daemon/sys/codec.h"

namespace b3os::e2b {

using nlohmann::json;

namespace {

void send_json(http::Exchange& ex, int status, const json& body, const http::Headers& h = {}) {
  ex.respond(status, "application/json", body.dump(-1, ' ', false, json::error_handler_t::replace), h);
}

void send_error(http::Exchange& ex, const Error& e) {
  http::Headers h;
  if (error_http_status(e.code) == 429 || error_http_status(e.code) == 503) h.emplace_back("Retry-After", "1");
  send_json(ex, error_http_status(e.code), api_error(e), h);
}

std::string first(const Query& q, const std::string& name) {
  auto it = q.find(name);
  return it == q.end() ? "" : it->second;
}

/// The E2B state of a b3os status: running or paused (others are not listed by E2B).
std::string state_of(const json& view) {
  const std::string s = view.value("status", "");
  return s == "paused" ? "paused" : "running";
}

bool live(const json& view) {
  const std::string s = view.value("status", "");
  return s == "running" || s == "paused";
}

/// A positive whole number of seconds (E2B's `timeout`), at most `max`.
Result<int> timeout_field(const json& body, int max) {
  const json& t = body["timeout"];
  if (!t.is_number_integer() || t.get<int64_t>() < 1)
    return fail(ErrorCode::kInvalidRequest, "timeout: a whole number of seconds, at least 1");
  if (t.get<int64_t>() > max)
    return fail(ErrorCode::kInvalidRequest, "timeout: at most " + std::to_string(max) + " seconds on this node");
  return static_cast<int>(t.get<int64_t>());
}

}  // namespace

Server::Server(Config cfg, sandbox::SandboxService& sandboxes)
    : cfg_(std::move(cfg)), sandboxes_(sandboxes), deadlines_(sandboxes) {}

bool Server::is_control(const std::vector<std::string>& s) {
  if (s.empty()) return false;
  static const char* const kRoots[] = {"sandboxes", "templates", "volumes", "volumecontent", "secrets", "snapshots"};
  const std::string& root = (s[0] == "v2" || s[0] == "v3") && s.size() > 1 ? s[1] : s[0];
  return std::any_of(std::begin(kRoots), std::end(kRoots), [&](const char* r) { return root == r; });
}

json Server::sandbox_object(const json& view) {
  const std::string id = view.value("id", "");
  return {{"sandboxID", id},
          {"templateID", view["template"].value("name", "")},
          {"clientID", "b3os"},
          {"envdVersion", cfg_.envd_version},
          {"envdAccessToken", sandboxes_.access_token(id)},
          {"trafficAccessToken", view.value("open_ports", false) ? json(nullptr) : json(sandboxes_.traffic_token(id))},
          {"domain", cfg_.domain.empty() ? json(nullptr) : json(cfg_.domain)}};
}

json Server::listed(const json& view, bool detail) {
  json out = {{"sandboxID", view.value("id", "")},
              {"templateID", view["template"].value("name", "")},
              {"clientID", "b3os"},
              {"cpuCount", view.value("vcpu", 1)},
              {"memoryMB", view.value("memory_mib", 512)},
              {"diskSizeMB", view.value("disk_gib", 1) * 1024},
              {"envdVersion", cfg_.envd_version},
              {"startedAt", view.value("started_at", "")},
              {"endAt", view.value("expires_at", "")},
              {"state", state_of(view)},
              {"metadata", view.value("metadata", json::object())}};
  if (detail) {
    out["envdAccessToken"] = sandboxes_.access_token(view.value("id", ""));
    out["domain"] = cfg_.domain.empty() ? json(nullptr) : json(cfg_.domain);
    out["allowInternetAccess"] = view["egress"].value("mode", "deny") != "deny";
    out["network"] = {{"allowPublicTraffic", view.value("open_ports", false)}};
    if (!view.value("open_ports", false)) out["trafficAccessToken"] = sandboxes_.traffic_token(view.value("id", ""));
    out["lifecycle"] = {{"autoResume", false}, {"onTimeout", view.value("on_idle", "stop") == "pause" ? "pause" : "kill"}};
  }
  return out;
}

Result<json> Server::create(const sandbox::Principal& p, const json& body, int& status) {
  if (auto r = only_fields(body, {"templateID", "metadata", "envVars", "timeout", "autoPause", "autoPauseMemory",
                                  "autoResume", "secure", "allow_internet_access", "network", "mcp", "iam",
                                  "volumeMounts"},
                           "body");
      !r)
    return fail(r.error());
  json spec = json::object();
  if (!body.contains("templateID") || !body["templateID"].is_string() || body["templateID"].get<std::string>().empty())
    return fail(ErrorCode::kInvalidRequest, "templateID: the name of a template (\"base\" is b3os's default)");
  spec["template"] = body["templateID"];
  if (body.contains("timeout")) {
    auto t = timeout_field(body, cfg_.limits.max_timeout_s);
    if (!t) return fail(t.error());
    spec["timeout_s"] = *t;
  }
  if (body.contains("envVars") && !body["envVars"].is_null()) spec["env"] = body["envVars"];
  if (body.contains("metadata") && !body["metadata"].is_null()) spec["metadata"] = body["metadata"];
  if (body.contains("autoPause")) {
    if (!body["autoPause"].is_boolean()) return fail(ErrorCode::kInvalidRequest, "autoPause: true or false");
    if (body["autoPause"].get<bool>()) spec["on_idle"] = "pause";
  }
  if (body.contains("autoPauseMemory") && body["autoPauseMemory"] == false)
    return fail(ErrorCode::kNotImplemented, "autoPauseMemory: false (a pause without memory) is not served; b3os pauses "
                                            "keep memory (docs/e2b.md)");
  if (body.contains("autoResume") && !body["autoResume"].is_null()) {
    const json& a = body["autoResume"];
    if (!a.is_object() || !a.contains("enabled") || !a["enabled"].is_boolean())
      return fail(ErrorCode::kInvalidRequest, "autoResume: {\"enabled\": true or false}");
    if (a["enabled"].get<bool>())
      return fail(ErrorCode::kNotImplemented, "autoResume: resuming on traffic is not served; Sandbox.connect resumes "
                                              "a paused sandbox (docs/e2b.md)");
  }
  if (body.contains("allow_internet_access") && !body["allow_internet_access"].is_null()) {
    if (!body["allow_internet_access"].is_boolean())
      return fail(ErrorCode::kInvalidRequest, "allow_internet_access: true or false");
    spec["egress"] = {{"mode", body["allow_internet_access"].get<bool>() ? "public" : "deny"}};
  }
  // network: allowPublicTraffic alone (E2B's default true: every port served on its host
  // without a token; false: the trafficAccessToken header is needed). Egress rules, proxies and
  // host masking are not served: b3os's own API has egress allow lists.
  bool open_ports = true;
  if (body.contains("network") && !body["network"].is_null()) {
    const json& n = body["network"];
    if (!n.is_object()) return fail(ErrorCode::kInvalidRequest, "network: an object");
    for (const auto& [k, v] : n.items()) {
      if (k == "allowPublicTraffic") {
        if (!v.is_boolean()) return fail(ErrorCode::kInvalidRequest, "network.allowPublicTraffic: true or false");
        open_ports = v.get<bool>();
      } else {
        return fail(ErrorCode::kNotImplemented, "network." + k.substr(0, 64) +
                                                    ": not served by b3os (allowPublicTraffic is); its own API has "
                                                    "egress allow lists (docs/e2b.md)");
      }
    }
  }
  for (const char* f : {"mcp", "iam", "volumeMounts"}) {
    const json& v = body.contains(f) ? body[f] : json(nullptr);
    if (!v.is_null() && !(v.is_object() && v.empty()) && !(v.is_array() && v.empty()))
      return fail(ErrorCode::kNotImplemented,
                  std::string(f) + ": not served by b3os; its own API has egress allow lists, ports and model grants "
                                   "(docs/e2b.md)");
  }
  if (body.contains("secure") && !body["secure"].is_boolean()) return fail(ErrorCode::kInvalidRequest, "secure: true or false");
  auto parsed = sandbox::parse_create(spec, cfg_.limits);
  if (!parsed) return fail(parsed.error());
  parsed->open_ports = open_ports;
  sandbox::Timing t;
  auto view = sandboxes_.create(p, *parsed, t);
  if (!view) return fail(view.error());
  status = 201;
  return sandbox_object(*view);
}

Result<json> Server::list(const sandbox::Principal& p, const Query& q, std::string& next_token) {
  store::SandboxQuery sq;
  sq.project_id = p.project_id;
  for (const auto& [k, v] : q) {
    if (k != "limit" && k != "metadata" && k != "nextToken" && k != "state" && k != "order" && k != "startedAfter" &&
        k != "template")
      return fail(ErrorCode::kInvalidRequest, "query: unknown parameter \"" + k.substr(0, 64) + "\"");
  }
  if (auto l = first(q, "limit"); !l.empty()) {
    char* end = nullptr;
    const long n = std::strtol(l.c_str(), &end, 10);
    if (*end || n < 1 || n > 100) return fail(ErrorCode::kInvalidRequest, "limit: 1 to 100");
    sq.limit = static_cast<int>(n);
  } else {
    sq.limit = 100;
  }
  if (auto c = first(q, "nextToken"); !c.empty()) sq.after_id = c;
  // state=running&state=paused (or one "running,paused"): both (every live sandbox) unless one.
  std::vector<std::string> states;
  for (auto [it, end] = q.equal_range("state"); it != end; ++it) {
    std::string s = it->second;
    for (size_t pos = 0; pos <= s.size();) {
      const size_t comma = std::min(s.find(',', pos), s.size());
      std::string one = s.substr(pos, comma - pos);
      if (one != "running" && one != "paused") return fail(ErrorCode::kInvalidRequest, "state: running or paused");
      states.push_back(one);
      pos = comma + 1;
    }
  }
  const bool want_running = states.empty() || std::count(states.begin(), states.end(), "running");
  const bool want_paused = states.empty() || std::count(states.begin(), states.end(), "paused");
  if (want_running && !want_paused) sq.status = "running";
  if (want_paused && !want_running) sq.status = "paused";
  // metadata=k1%3Dv1%26k2%3Dv2: decoded once by the target parser, then split here.
  if (auto m = first(q, "metadata"); !m.empty()) {
    size_t pos = 0;
    while (pos <= m.size()) {
      const size_t amp = std::min(m.find('&', pos), m.size());
      const std::string pair = m.substr(pos, amp - pos);
      const size_t eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) return fail(ErrorCode::kInvalidRequest, "metadata: key=value pairs joined by &");
      // The SDK encodes each key and value (encodeURIComponent), then the pairs as a form
      // (URLSearchParams): both are undone, so that "a b" or "x&y" match what was stored.
      const auto undo = [](const std::string& x) -> Result<std::string> {
        auto form = sys::percent_decode(x, true);
        if (!form) return form;
        return sys::percent_decode(*form, false);
      };
      auto key = undo(pair.substr(0, eq));
      auto value = undo(pair.substr(eq + 1));
      if (!key || !value) return fail(ErrorCode::kInvalidRequest, "metadata: a bad percent escape");
      sq.metadata.emplace_back(*key, *value);
      pos = amp + 1;
    }
  }
  // startedAfter (an RFC 3339 time, the SDK's toISOString) and template filter what is read,
  // as the live-only filter does; order: b3os lists newest first (E2B's "desc").
  std::optional<int64_t> after_ms;
  if (auto a = first(q, "startedAfter"); !a.empty()) {
    after_ms = parse_rfc3339(a);
    if (!after_ms) return fail(ErrorCode::kInvalidRequest, "startedAfter: an RFC 3339 time in UTC (2026-01-02T03:04:05Z)");
  }
  const std::string want_template = first(q, "template");
  if (auto o = first(q, "order"); !o.empty() && o != "desc") {
    if (o == "asc") return fail(ErrorCode::kNotImplemented, "order: asc is not served; b3os lists newest first (desc)");
    return fail(ErrorCode::kInvalidRequest, "order: asc or desc");
  }
  const auto wanted = [&](const json& v) {
    if (!live(v)) return false;
    if (!want_template.empty() && v.value("template", json::object()).value("name", "") != want_template) return false;
    if (after_ms) {
      const json started = v.value("started_at", json());
      const auto at = started.is_string() ? parse_rfc3339(started.get<std::string>()) : std::nullopt;
      if (!at || *at <= *after_ms) return false;
    }
    return true;
  };
  json out = json::array();
  const int limit = sq.limit;
  // b3os lists stopped sandboxes too; E2B lists only live ones: pages are read until the
  // limit is filled with live ones or the list ends. Each page asks for no more than is
  // missing, so the cursor never passes a live sandbox that was not given out.
  for (int pages = 0; pages < 50 && static_cast<int>(out.size()) < limit; ++pages) {
    sq.limit = limit - static_cast<int>(out.size());
    auto page = sandboxes_.list(p, sq);
    if (!page) return fail(page.error());
    for (const auto& v : (*page)["data"])
      if (wanted(v)) out.push_back(listed(v, false));
    const json& next = (*page)["next_cursor"];
    if (!next.is_string()) {
      next_token.clear();
      return out;
    }
    sq.after_id = next.get<std::string>();
    next_token = *sq.after_id;
  }
  return out;
}

Result<json> Server::detail(const sandbox::Principal& p, const std::string& id) {
  auto view = sandboxes_.get(p, id);
  if (!view) return fail(view.error());
  if (!live(*view)) return fail(ErrorCode::kSandboxNotFound, "sandbox " + id + " is not running (it " + view->value("status", "ended") + ")");
  return listed(*view, true);
}

Result<json> Server::connect(const sandbox::Principal& p, const std::string& id, const json& body) {
  if (auto r = only_fields(body, {"timeout", "memory", "autoPause"}, "body"); !r) return fail(r.error());
  if (body.contains("memory") && body["memory"] == false)
    return fail(ErrorCode::kNotImplemented, "memory: false (resume by rebooting) is not served; b3os resumes keep memory");
  auto view = sandboxes_.get(p, id);
  if (!view) return fail(view.error());
  if (!live(*view)) return fail(ErrorCode::kSandboxNotFound, "sandbox " + id + " is not running (it " + view->value("status", "ended") + ")");
  // A bad timeout is refused before anything changes (not after a resume it would leave done).
  std::optional<int> secs;
  if (body.contains("timeout")) {
    auto s = timeout_field(body, cfg_.limits.max_timeout_s);
    if (!s) return fail(s.error());
    secs = *s;
  }
  sandbox::Timing t;
  if (view->value("status", "") == "paused") {
    auto r = sandboxes_.resume(p, id, t);
    if (!r) return fail(r.error());
    view = r;
  }
  if (secs) {
    sandbox::UpdateRequest u;
    u.timeout_s = *secs;
    auto r = sandboxes_.update(p, id, u, t);
    if (!r) return fail(r.error());
    view = r;
  }
  return sandbox_object(*view);
}

Result<void> Server::set_timeout(const sandbox::Principal& p, const std::string& id, const json& body) {
  if (auto r = only_fields(body, {"timeout"}, "body"); !r) return fail(r.error());
  if (!body.contains("timeout")) return fail(ErrorCode::kInvalidRequest, "timeout: is required (seconds)");
  auto secs = timeout_field(body, cfg_.limits.max_timeout_s);
  if (!secs) return fail(secs.error());
  sandbox::UpdateRequest u;
  u.timeout_s = *secs;
  sandbox::Timing t;
  auto r = sandboxes_.update(p, id, u, t);
  if (!r) return fail(r.error());
  return {};
}

Result<json> Server::fork(const sandbox::Principal& p, const std::string& id, const json& body) {
  if (auto r = only_fields(body, {"count", "timeout"}, "body"); !r) return fail(r.error());
  int count = 1;
  if (body.contains("count")) {
    if (!body["count"].is_number_integer() || body["count"].get<int64_t>() < 1 || body["count"].get<int64_t>() > 16)
      return fail(ErrorCode::kInvalidRequest, "count: 1 to 16");
    count = static_cast<int>(body["count"].get<int64_t>());
  }
  std::optional<int> secs;
  if (body.contains("timeout")) {
    auto s = timeout_field(body, cfg_.limits.max_timeout_s);
    if (!s) return fail(s.error());
    secs = *s;
  }
  sandbox::Timing t;
  auto forks = sandboxes_.fork(p, id, count, std::nullopt, t);
  if (!forks) return fail(forks.error());
  json out = json::array();
  for (const auto& f : (*forks)["data"]) {
    json view = f;
    if (secs) {
      sandbox::UpdateRequest u;
      u.timeout_s = *secs;
      auto r = sandboxes_.update(p, f.value("id", ""), u, t);
      if (!r) {
        // All or nothing, as a fork is: forks without the asked timeout are not handed out.
        for (const auto& g : (*forks)["data"]) {
          sandbox::Timing gone;
          (void)sandboxes_.remove(p, g.value("id", ""), gone);
        }
        return fail(r.error());
      }
      view = *r;
    }
    out.push_back({{"sandbox", sandbox_object(view)}});
  }
  return out;
}

void Server::handle_control(http::Exchange& ex, const sandbox::Principal& p, const std::string& method,
                            const std::vector<std::string>& segs, const Query& query) {
  // v2 and v1 paths of the same operations: /v2/sandboxes/{id}/connect, /sandboxes/{id}/connect.
  std::vector<std::string> s = segs;
  if (!s.empty() && (s[0] == "v2" || s[0] == "v3")) s.erase(s.begin());
  if (s.empty() || s[0] != "sandboxes") {
    return send_error(ex, {ErrorCode::kNotImplemented,
                           "/" + segs[0] + (segs.size() > 1 ? "/" + segs[1] : "") +
                               ": E2B's templates, volumes, secrets and snapshots are not served by b3os; its own API "
                               "has them (/v1/templates, /v1/snapshots; docs/e2b.md)",
                           0});
  }
  json body = json::object();
  if (ex.has_body()) {
    auto raw = ex.read_body(cfg_.max_message);
    if (!raw) return send_error(ex, raw.error());
    auto parsed = parse_unary_request(*raw);
    if (!parsed) return send_error(ex, parsed.error());
    body = std::move(*parsed);
  }
  const std::string id = s.size() > 1 ? s[1] : "";
  const std::string action = s.size() > 2 ? s[2] : "";
  auto done = [&](const Result<json>& r, int status) {
    if (!r) return send_error(ex, r.error());
    send_json(ex, status, *r);
  };
  auto no_content = [&](const Result<void>& r) {
    if (!r) return send_error(ex, r.error());
    ex.respond(204, "application/json", "", {});
  };
  sandbox::Timing t;
  if (s.size() == 1 && method == "POST") {
    int status = 201;
    auto r = create(p, body, status);
    return done(r, status);
  }
  if (s.size() == 1 && method == "GET") {
    std::string next;
    auto r = list(p, query, next);
    if (!r) return send_error(ex, r.error());
    http::Headers h;
    if (!next.empty()) h.emplace_back("X-Next-Token", next);
    return send_json(ex, 200, *r, h);
  }
  if (s.size() == 2 && method == "GET") return done(detail(p, id), 200);
  if (s.size() == 2 && method == "DELETE") {
    auto r = sandboxes_.remove(p, id, t);
    if (!r) return send_error(ex, r.error());
    return ex.respond(204, "application/json", "", {});
  }
  if (s.size() == 3 && method == "POST") {
    if (action == "timeout") return no_content(set_timeout(p, id, body));
    if (action == "pause") {
      if (auto r = only_fields(body, {"memory"}, "body"); !r) return send_error(ex, r.error());
      if (body.contains("memory") && body["memory"] == false)
        return send_error(ex, {ErrorCode::kNotImplemented, "memory: false (a pause of the disk alone) is not served; b3os "
                                                           "pauses keep memory",
                               0});
      auto view = sandboxes_.get(p, id);
      if (!view) return send_error(ex, view.error());
      const auto already = [&] { return send_error(ex, {ErrorCode::kConflict, "sandbox " + id + " is already paused", 0}); };
      if (view->value("status", "") == "paused") return already();
      const int64_t asked_ms = now_unix_ms();
      auto r = sandboxes_.pause(p, id, t);
      if (!r) return send_error(ex, r.error());
      // A pause is idempotent in b3os: one that raced another finds it paused before it asked
      // (its paused_at earlier), and E2B's SDK reads that as 409 (pause() answers false).
      const json at = r->value("paused_at", json());
      if (const auto ms = at.is_string() ? parse_rfc3339(at.get<std::string>()) : std::nullopt; ms && *ms < asked_ms)
        return already();
      return ex.respond(204, "application/json", "", {});
    }
    if (action == "connect" || action == "resume") {
      auto before = sandboxes_.get(p, id);
      const bool was_paused = before && before->value("status", "") == "paused";
      return done(connect(p, id, body), was_paused ? 201 : 200);
    }
    if (action == "fork") return done(fork(p, id, body), 200);
  }
  if (s.size() >= 3 && method == "GET" && (action == "metrics" || action == "logs"))
    return send_error(ex, {ErrorCode::kNotImplemented,
                           action + ": not served through E2B's API; b3os's /metrics and the sandbox's usage are "
                                    "(docs/e2b.md)",
                           0});
  if (s.size() >= 2 && s.size() <= 3)
    return send_error(ex, {ErrorCode::kNotImplemented,
                           method + " /" + (segs[0] == "v2" ? "v2/" : "") + "sandboxes/{id}" + (action.empty() ? "" : "/" + action) +
                               ": not served by b3os's E2B surface (docs/e2b.md)",
                           0});
  send_error(ex, {ErrorCode::kNotFound, "no such route", 0});
}

}  // namespace b3os::e2b
