#include "daemon/mcp/server.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "daemon/sandbox/timing.h"

namespace b3os::mcp {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26"};

bool equals_ci(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool contains_ci(std::string_view hay, std::string_view needle) {
  if (needle.size() > hay.size()) return false;
  for (size_t i = 0; i + needle.size() <= hay.size(); ++i)
    if (equals_ci(hay.substr(i, needle.size()), needle)) return true;
  return false;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// An HTTP-level refusal, its body a JSON-RPC error (what MCP clients read).
void refuse(http::Exchange& ex, int status, int code, const std::string& message, const json& id = nullptr,
            http::Headers headers = {}) {
  headers.emplace_back("Cache-Control", "no-store");
  ex.respond(status, "application/json", dump(make_error(id, code, message)), headers);
}

void answer(http::Exchange& ex, const json& message, http::Headers headers = {}) {
  headers.emplace_back("Cache-Control", "no-store");
  ex.respond(200, "application/json", dump(message), headers);
}

std::string sse_event(const json& message) { return "event: message\ndata: " + dump(message) + "\n\n"; }

/// The error of a tool call as the model reads it: the API's code and message, in the text.
/// No structuredContent: clients check any they get against the tool's outputSchema, which
/// describes the tool's success.
json tool_error(const Error& e) {
  const std::string code(error_code_name(e.code));
  return json{{"content", {{{"type", "text"}, {"text", code + ": " + e.message}}}}, {"isError", true}};
}

}  // namespace

bool supported_version(std::string_view v) {
  return std::find(std::begin(kVersions), std::end(kVersions), v) != std::end(kVersions);
}

Server::Server(Config cfg, Tools& tools) : cfg_(std::move(cfg)), tools_(tools) {}

size_t Server::session_count() {
  std::lock_guard lk(mu_);
  return sessions_.size();
}

void Server::handle(http::Exchange& ex, const sandbox::Principal& p, const std::multimap<std::string, std::string>& query) {
  if (!origin_allowed(ex.header("Origin"), cfg_.allowed_origins))
    return refuse(ex, 403, -32000,
                  "Origin " + std::string(ex.header("Origin")) + " may not call this MCP endpoint (b3osd --mcp-allowed-origin)");
  const std::string method(ex.method());
  if (method == "POST") return post(ex, p, query);
  if (method == "DELETE") {
    const std::string id(ex.header("Mcp-Session-Id"));
    if (id.empty()) return refuse(ex, 400, -32000, "Mcp-Session-Id header is required");
    auto s = find(id, p);
    if (!s) return refuse(ex, 404, -32001, "unknown MCP session (ended, expired, or another key's)");
    {
      std::lock_guard lk(mu_);
      sessions_.erase(id);
      for (auto& [rid, flag] : s->in_flight) *flag = true;  // what it still runs is cancelled
    }
    spdlog::info("mcp: session {}... ended by the client", id.substr(0, 8));
    return ex.respond(200, "application/json", "{}", {{"Cache-Control", "no-store"}});
  }
  // No server-initiated stream: everything the server says answers a POST.
  refuse(ex, 405, -32000, method + " is not supported on /mcp: POST messages, DELETE a session", nullptr,
         {{"Allow", "POST, DELETE"}});
}

std::shared_ptr<Server::Session> Server::find(const std::string& id, const sandbox::Principal& p) {
  std::lock_guard lk(mu_);
  auto it = sessions_.find(id);
  // Another key's session is as good as unknown to this one.
  if (it == sessions_.end() || it->second->key_id != p.key_id) return nullptr;
  const int64_t now = steady_ms();
  if (now - it->second->last_used_ms > cfg_.session_idle.count() * 1000 && it->second->in_flight.empty()) {
    sessions_.erase(it);
    return nullptr;
  }
  it->second->last_used_ms = now;
  return it->second;
}

void Server::evict_locked(const std::string& key_id) {
  // Expired sessions go first; then, at a cap, the one used least recently (of this key at the
  // per-key cap): a client that never sends DELETE does not lock its key out.
  const int64_t now = steady_ms();
  for (auto it = sessions_.begin(); it != sessions_.end();)
    it = now - it->second->last_used_ms > cfg_.session_idle.count() * 1000 && it->second->in_flight.empty()
             ? sessions_.erase(it)
             : std::next(it);
  for (bool per_key : {true, false}) {
    for (;;) {
      int n = 0;
      std::map<std::string, std::shared_ptr<Session>>::iterator oldest = sessions_.end();
      for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
        if (per_key && it->second->key_id != key_id) continue;
        ++n;
        if (oldest == sessions_.end() || it->second->last_used_ms < oldest->second->last_used_ms) oldest = it;
      }
      if (n < (per_key ? cfg_.max_sessions_per_key : cfg_.max_sessions) || oldest == sessions_.end()) break;
      spdlog::info("mcp: session {}... dropped (the {} cap of sessions)", oldest->first.substr(0, 8), per_key ? "per-key" : "node's");
      for (auto& [rid, flag] : oldest->second->in_flight) *flag = true;
      sessions_.erase(oldest);
    }
  }
}

void Server::post(http::Exchange& ex, const sandbox::Principal& p, const std::multimap<std::string, std::string>& query) {
  std::string_view ct = ex.header("Content-Type");
  if (!contains_ci(ct, "application/json"))
    return refuse(ex, 415, -32000, "POST /mcp takes Content-Type: application/json, got \"" + std::string(ct) + "\"");
  std::string_view accept = ex.header("Accept");
  if (!accept.empty() && !contains_ci(accept, "application/json") && !contains_ci(accept, "text/event-stream") &&
      !contains_ci(accept, "*/*") && !contains_ci(accept, "application/*"))
    return refuse(ex, 406, -32000, "Accept must allow application/json (and text/event-stream)");
  constexpr uint64_t kLarge = 1u << 20;
  const auto length = ex.content_length();
  const bool large = !length || *length > kLarge;  // chunked bodies count as large
  if (large && large_bodies_.fetch_add(1) >= cfg_.max_large_bodies) {
    --large_bodies_;
    return refuse(ex, 503, -32000, "too many large MCP requests (over 1 MiB) at once on this node; retry shortly", nullptr,
                  {{"Retry-After", "1"}});
  }
  struct Release {
    std::atomic<int>* n;
    ~Release() {
      if (n) --*n;
    }
  } release{large ? &large_bodies_ : nullptr};
  auto body = ex.read_body(cfg_.max_body);
  if (!body) return refuse(ex, error_http_status(body.error().code), -32000, body.error().message);
  auto m = parse_message(*body);
  if (!m) return refuse(ex, 400, m.error().code, m.error().message, m.error().id);

  if (m->kind == Message::Kind::kRequest && m->method == "initialize") return initialize(ex, p, *m, query);

  const std::string sid(ex.header("Mcp-Session-Id"));
  if (sid.empty())
    return refuse(ex, 400, -32000, "Mcp-Session-Id header is required (initialize first)", m->id);
  auto s = find(sid, p);
  if (!s) return refuse(ex, 404, -32001, "unknown MCP session (ended, expired, or another key's): initialize again", m->id);
  std::string_view version = ex.header("MCP-Protocol-Version");
  if (!version.empty() && !supported_version(version))
    return refuse(ex, 400, -32000, "unsupported MCP-Protocol-Version " + std::string(version) +
                                       " (supported: 2025-11-25, 2025-06-18, 2025-03-26)", m->id);
  if (m->kind != Message::Kind::kRequest) {
    if (m->kind == Message::Kind::kNotification) notification(s, *m);
    return ex.respond(202, "application/json", "", {});
  }
  request(ex, s, p, *m);
}

void Server::initialize(http::Exchange& ex, const sandbox::Principal& p, const Message& m,
                        const std::multimap<std::string, std::string>& query) {
  if (!ex.header("Mcp-Session-Id").empty())
    return refuse(ex, 400, kInvalidRequest, "initialize starts a session: send it without Mcp-Session-Id", m.id);
  const json& params = m.params;
  auto pv = params.find("protocolVersion");
  if (pv == params.end() || !pv->is_string())
    return answer(ex, make_error(m.id, kInvalidParams, "initialize: protocolVersion (a string) is required"));
  // A revision this server speaks is echoed; any other gets the latest (the client decides).
  const std::string version = supported_version(pv->get_ref<const std::string&>()) ? pv->get<std::string>()
                                                                                      : std::string(kLatestVersion);
  std::vector<std::string> sets;
  for (auto [it, end] = query.equal_range("toolsets"); it != end; ++it) {
    std::string_view v = it->second;
    while (!v.empty()) {
      const size_t comma = v.find(',');
      std::string name(v.substr(0, comma));
      v.remove_prefix(comma == std::string_view::npos ? v.size() : comma + 1);
      if (name.empty()) continue;
      if (name == "all") {
        sets = Tools::toolsets();
        continue;
      }
      const auto& known = Tools::toolsets();
      if (std::find(known.begin(), known.end(), name) == known.end())
        return refuse(ex, 400, kInvalidParams,
                      "unknown toolset \"" + name.substr(0, 40) + "\" in ?toolsets= (known: sandboxes, snapshots, templates, all)",
                      m.id);
      if (std::find(sets.begin(), sets.end(), name) == sets.end()) sets.push_back(name);
    }
  }
  if (sets.empty()) sets.emplace_back(Tools::kDefaultToolset);
  auto s = std::make_shared<Session>();
  s->id = to_hex(random_bytes(16));
  s->key_id = p.key_id;
  s->toolsets = sets;
  s->last_used_ms = steady_ms();
  {
    std::lock_guard lk(mu_);
    evict_locked(p.key_id);
    sessions_[s->id] = s;
  }
  std::string client = "?";
  if (auto ci = params.find("clientInfo"); ci != params.end() && ci->is_object())
    client = ci->value("name", "?").substr(0, 64) + " " + ci->value("version", "").substr(0, 32);
  std::string joined;
  for (auto& t : sets) joined += (joined.empty() ? "" : ",") + t;
  spdlog::info("mcp: session {}... opened by key {} ({}), protocol {}, toolsets {}", s->id.substr(0, 8), p.key_id, client,
               version, joined);
  json result = {{"protocolVersion", version},
                 {"capabilities", {{"tools", {{"listChanged", false}}}}},
                 {"serverInfo", {{"name", "b3os"}, {"title", "b3os sandboxes"}, {"version", cfg_.server_version}}},
                 {"instructions",
                  "b3os runs isolated Linux sandboxes. Create one (sandbox_create) or use the id you were given, write "
                  "files (sandbox_write_file), run commands (sandbox_exec), read results (sandbox_read_file), fork a "
                  "forkable sandbox into copies (sandbox_fork), and delete sandboxes when done (sandbox_delete)."}};
  answer(ex, make_result(m.id, std::move(result)), {{"Mcp-Session-Id", s->id}});
}

void Server::notification(const std::shared_ptr<Session>& s, const Message& m) {
  std::lock_guard lk(mu_);
  // notifications/initialized needs nothing: a session serves from its initialize answer on.
  if (m.method == "notifications/cancelled") {
    auto rid = m.params.find("requestId");
    if (rid == m.params.end()) return;
    if (auto it = s->in_flight.find(rid->dump()); it != s->in_flight.end()) {
      *it->second = true;
      spdlog::info("mcp: session {}... cancelled request {}", s->id.substr(0, 8), rid->dump());
    }
  }
  // Other notifications (progress of the client's own, roots changed...) need nothing.
}

void Server::request(http::Exchange& ex, const std::shared_ptr<Session>& s, const sandbox::Principal& p, const Message& m) {
  if (m.method == "ping") return answer(ex, make_result(m.id, json::object()));
  if (m.method == "tools/list") {
    // One page holds every tool today; the cursor is the index of the next one.
    constexpr size_t kPage = 50;
    size_t start = 0;
    if (auto c = m.params.find("cursor"); c != m.params.end() && !c->is_null()) {
      if (!c->is_string()) return answer(ex, make_error(m.id, kInvalidParams, "cursor: must be a string from nextCursor"));
      const std::string& v = c->get_ref<const std::string&>();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end || n < 0 || static_cast<size_t>(n) > tools_.all().size())
        return answer(ex, make_error(m.id, kInvalidParams, "cursor: not a cursor this server gave"));
      start = static_cast<size_t>(n);
    }
    json list = json::array();
    size_t i = 0, next = 0;
    for (auto& t : tools_.all()) {
      if (std::find(s->toolsets.begin(), s->toolsets.end(), t.toolset) == s->toolsets.end()) continue;
      if (i++ < start) continue;
      if (list.size() == kPage) {
        next = i - 1;
        break;
      }
      list.push_back(t.listing());
    }
    json result = {{"tools", std::move(list)}};
    if (next > 0) result["nextCursor"] = std::to_string(next);
    return answer(ex, make_result(m.id, std::move(result)));
  }
  if (m.method == "tools/call") return call_tool(ex, s, p, m);
  if (m.method == "initialize")
    return answer(ex, make_error(m.id, kInvalidRequest, "this session is initialized already"));
  answer(ex, make_error(m.id, kMethodNotFound, "method not found: " + m.method.substr(0, 80)));
}

void Server::handle_relayed(http::Exchange& ex, const sandbox::Principal& p) {
  if (ex.method() != "POST") return refuse(ex, 405, -32000, "a relayed MCP call is a POST", nullptr, {{"Allow", "POST"}});
  auto body = ex.read_body(cfg_.max_body);
  if (!body) return refuse(ex, error_http_status(body.error().code), -32000, body.error().message);
  auto m = parse_message(*body);
  if (!m) return refuse(ex, 400, m.error().code, m.error().message, m.error().id);
  if (m->kind != Message::Kind::kRequest || m->method != "tools/call")
    return refuse(ex, 400, kInvalidRequest, "a relayed MCP message must be a tools/call request", m->id);
  // The session lives on the node that relayed the call, which checked its toolsets.
  auto s = std::make_shared<Session>();
  s->id = "relayed";
  s->key_id = p.key_id;
  s->toolsets = Tools::toolsets();
  s->last_used_ms = steady_ms();
  call_tool(ex, s, p, *m, true);
}

void Server::call_tool(http::Exchange& ex, const std::shared_ptr<Session>& s, const sandbox::Principal& p,
                       const Message& m, bool relayed) {
  auto name = m.params.find("name");
  if (name == m.params.end() || !name->is_string())
    return answer(ex, make_error(m.id, kInvalidParams, "tools/call: name (a string) is required"));
  const Tool* tool = tools_.find(name->get_ref<const std::string&>());
  if (!tool || std::find(s->toolsets.begin(), s->toolsets.end(), tool->toolset) == s->toolsets.end())
    return answer(ex, make_error(m.id, kInvalidParams,
                                 "Unknown tool: " + name->get<std::string>().substr(0, 80) +
                                     (tool ? " (its toolset, " + tool->toolset + ", is not in this session's ?toolsets=)" : "")));
  json args = json::object();
  if (auto a = m.params.find("arguments"); a != m.params.end() && !a->is_null()) {
    if (!a->is_object()) return answer(ex, make_error(m.id, kInvalidParams, "tools/call: arguments must be an object"));
    args = *a;
  }
  json progress_token;
  if (auto meta = m.params.find("_meta"); meta != m.params.end() && meta->is_object())
    if (auto t = meta->find("progressToken"); t != meta->end() && (t->is_string() || t->is_number_integer()))
      progress_token = *t;
  const bool can_stream = contains_ci(ex.header("Accept"), "text/event-stream");

  const std::string key = m.id.dump();
  auto flag = std::make_shared<std::atomic<bool>>(false);
  {
    std::lock_guard lk(mu_);
    if (s->in_flight.count(key))
      return answer(ex, make_error(m.id, kInvalidRequest, "a request with this id is still running in this session"));
    s->in_flight[key] = flag;
  }
  struct Done {
    Server* self;
    std::shared_ptr<Session> s;
    std::string key;
    ~Done() {
      std::lock_guard lk(self->mu_);
      s->in_flight.erase(key);
      s->last_used_ms = steady_ms();
    }
  } done{this, s, key};

  // A sandbox another node holds: the call runs there (its answer, JSON or an event stream,
  // comes back as that node sends it); a cancel here ends the relay, and the node, seeing
  // its client gone, stops the call.
  // A create this node should not take (draining, or full) runs where placement puts it.
  if (!relayed) {
    const std::function<bool()> cancelled = [&] { return flag->load() || ex.client_gone(); };
    auto call = [&] { return json{{"jsonrpc", "2.0"}, {"id", m.id}, {"method", "tools/call"}, {"params", m.params}}.dump(); };
    Result<bool> elsewhere = false;
    auto sid = args.find("sandbox_id");
    if (cfg_.peer_relay && sid != args.end() && sid->is_string())
      elsewhere = cfg_.peer_relay(ex, p, sid->get<std::string>(), call(), cancelled);
    else if (cfg_.create_relay && tool->name == "sandbox_create")
      elsewhere = cfg_.create_relay(ex, p, args, call(), cancelled);
    if (!elsewhere) return answer(ex, make_result(m.id, tool_error(elsewhere.error())));
    if (*elsewhere) {
      if (!ex.responded()) answer(ex, make_error(m.id, kInternalError, "the request was cancelled"));
      return;
    }
  }

  bool streaming = false;
  CallContext ctx;
  ctx.principal = p;
  ctx.cancelled = [&] { return flag->load() || ex.client_gone(); };
  if (!progress_token.is_null() && can_stream) {
    ctx.progress = [&](double progress, const std::string& message) {
      if (!streaming) {
        if (!ex.begin_stream(200, "text/event-stream", http::Exchange::kUnknownLength, {{"Cache-Control", "no-cache"}}))
          return;
        streaming = true;
      }
      (void)ex.write(sse_event(make_notification(
          "notifications/progress", {{"progressToken", progress_token}, {"progress", progress}, {"message", message}})));
    };
  }
  const auto t0 = Clock::now();
  // A tool call may run a command for its whole timeout: it holds a stream's place (the
  // project's fair share), never one of the request workers short requests need.
  auto held = ex.hold_stream(p.project_id);
  Result<ToolResult> r = held ? tool->run(args, ctx) : Result<ToolResult>(fail(held.error()));
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  json result;
  if (r) {
    // The phases and total in the structured result, as the REST API puts them in its bodies
    // (a client reads a fork's restore time here; there is no Server-Timing header per call).
    if (r->structured.is_object() && !r->structured.contains("timing") && !ctx.timing.phases.empty()) {
      json timing = json::object();
      for (auto& [phase, pms] : ctx.timing.phases) timing[phase + "_ms"] = std::round(pms * 1000.0) / 1000.0;
      timing["total_ms"] = std::round(ms * 1000.0) / 1000.0;
      r->structured["timing"] = std::move(timing);
    }
    result = {{"content", {{{"type", "text"}, {"text", r->text}}}}, {"structuredContent", r->structured}};
    if (r->is_error) result["isError"] = true;
  } else {
    result = tool_error(r.error());
  }
  const bool cancelled = flag->load() || ex.client_gone();
  {
    // Tools count as the REST operations do; "sandbox_exec" is "exec" (docs/operations.md).
    std::string_view op = tool->name;
    if (op.rfind("sandbox_", 0) == 0) op.remove_prefix(8);
    // An isError result is a refusal the model can correct (the API's 4xx codes); a failed
    // call is the node's.
    sandbox::record_operation(op, "mcp", ctx.timing, ms,
                              !r ? sandbox::Outcome::kError
                                 : r->is_error ? sandbox::Outcome::kClientError : sandbox::Outcome::kOk);
  }
  if (!r && r.error().code == ErrorCode::kInternal && !cancelled) spdlog::error("mcp: {}: {}", tool->name, r.error().message);
  if (cancelled) spdlog::info("mcp: session {}... {} cancelled after {:.0f} ms", s->id.substr(0, 8), tool->name, ms);
  spdlog::debug("mcp: session {}... {} {} in {:.1f} ms", s->id.substr(0, 8), tool->name, r ? "ok" : "error", ms);
  json response = flag->load() ? make_error(m.id, kInternalError, "the request was cancelled") : make_result(m.id, std::move(result));
  if (streaming) {
    (void)ex.write(sse_event(response));
    (void)ex.end_stream();
    return;
  }
  answer(ex, response);
}

}  // namespace b3os::mcp
