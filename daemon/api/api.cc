#include "daemon/api/api.h"

#include <cmath>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"

namespace b3os::api {

using nlohmann::json;

namespace {

constexpr int kMaxForkCount = 16;

double round_us(double ms) { return std::round(ms * 1000.0) / 1000.0; }

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return false;
  return true;
}

bool media_type_is(std::string_view content_type, std::string_view want) {
  size_t semi = content_type.find(';');
  std::string_view t = content_type.substr(0, semi);
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  return t.size() == want.size() && starts_with_ci(t, want);
}

tl::unexpected<Error> not_found(const std::string& id) {
  return fail(ErrorCode::kSandboxNotFound, "no sandbox " + id + " in this project");
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

Api::Api(const Config& cfg, store::Store& store, sandbox::SandboxService& sandboxes, gateway::Gateway& gw)
    : cfg_(cfg), store_(store), sandboxes_(sandboxes), gw_(gw), limiter_(cfg.rate_per_second, cfg.rate_burst) {}

namespace {
/// Gateway answers written straight to the HTTP client (chunked when streamed).
class HttpSink : public gateway::Sink {
 public:
  HttpSink(http::Exchange& ex, http::Headers extra) : ex_(ex), extra_(std::move(extra)) {}
  Result<void> respond(int status, const std::string& content_type, const std::string& body) override {
    ex_.respond(status, content_type, body, extra_);
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
  std::string body = dump_json(r.body);
  if (c.idempotency_key) {
    auto done = r.status < 500
                    ? store_.idempotency_finish(c.principal.project_id, *c.idempotency_key, r.status, "application/json", body)
                    : store_.idempotency_abort(c.principal.project_id, *c.idempotency_key);
    if (!done) spdlog::warn("idempotency: {}", done.error().message);
  }
  c.ex.respond(r.status, "application/json", std::move(body), r.headers);
}

void Api::send_error(Call& c, const Error& e) {
  if (e.code == ErrorCode::kInternal) spdlog::error("{} {}: {}", c.method, c.target.path, e.message);
  send(c, error_reply(e));
}

Result<sandbox::Principal> Api::authenticate(http::Exchange& ex) {
  std::string_view auth = ex.header("Authorization");
  if (auth.empty()) return fail(ErrorCode::kUnauthorized, "missing Authorization header; send \"Authorization: Bearer b3os_sk_...\"");
  if (!starts_with_ci(auth, "Bearer ")) return fail(ErrorCode::kUnauthorized, "the Authorization header must be \"Bearer <API key>\"");
  std::string_view key = auth.substr(7);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  if (key.rfind("b3os_sk_", 0) != 0 || key.size() > 200)
    return fail(ErrorCode::kUnauthorized, "malformed API key; keys look like b3os_sk_...");
  auto rec = store_.find_api_key(key);
  if (!rec) return fail(rec.error());
  if (!*rec) return fail(ErrorCode::kUnauthorized, "unknown or revoked API key");
  return sandbox::Principal{(*rec)->project_id, (*rec)->id};
}

void Api::handle(http::Exchange& ex) {
  Call c(ex);
  c.method = std::string(ex.method());
  auto target = parse_target(ex.target());
  if (!target) return send_error(c, target.error());
  c.target = std::move(*target);
  if (c.target.path == "/healthz" && c.method == "GET") return send(c, {200, {{"ok", true}}, {}});

  auto principal = authenticate(ex);
  if (!principal) return send_error(c, principal.error());
  c.principal = *principal;
  double retry = 0;
  if (!limiter_.take(c.principal.key_id, &retry)) {
    Reply r = error_reply({ErrorCode::kRateLimited, "too many requests for this API key; retry after the Retry-After seconds", 0});
    r.headers.emplace_back("Retry-After", std::to_string(static_cast<int>(std::ceil(retry))));
    return send(c, std::move(r));
  }
  if (dispatch_infer(c)) return;
  if (dispatch_stream(c)) return;

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
    if (hit->kind == store::IdempotencyHit::Kind::kReplay) {
      http::Headers h = {{"Idempotent-Replayed", "true"},
                         {"Server-Timing", server_timing(c.timing, c.total.elapsed_ms())}};
      return ex.respond(hit->status, hit->content_type, std::move(hit->body), h);
    }
    c.idempotency_key = std::string(idem);
  }

  auto reply = dispatch_json(c);
  if (!reply) return send_error(c, reply.error());
  send(c, std::move(*reply));
}

Result<Reply> Api::dispatch_json(Call& c) {
  const auto& s = c.target.segments;
  const std::string& m = c.method;
  auto method_not_allowed = [&](const char* allow) -> Result<Reply> {
    Reply r = error_reply({ErrorCode::kMethodNotAllowed, m + " is not allowed on " + c.target.path + " (allowed: " + allow + ")", 0});
    r.headers.emplace_back("Allow", allow);
    return r;
  };
  auto nyi = [&](const std::string& what) -> Result<Reply> {
    return fail(ErrorCode::kNotImplemented, what + " is not available on this deployment yet");
  };
  if (s.size() >= 1 && s[0] == "mcp") return nyi("the MCP endpoint (/mcp)");
  if (s.empty() || s[0] != "v1") return fail(ErrorCode::kNotFound, "no such route: " + c.target.path);
  if (s.size() == 2 && s[1] == "templates") {
    if (m != "GET") return method_not_allowed("GET");
    return Reply{200, sandboxes_.templates(), {}};
  }
  if (s.size() >= 2 && s[1] == "snapshots") return snapshots(c);
  if (s.size() < 2 || s[1] != "sandboxes") return fail(ErrorCode::kNotFound, "no such route: " + c.target.path);
  if (s.size() == 2) {
    if (m == "POST") return create_sandbox(c);
    if (m == "GET") return list_sandboxes(c);
    return method_not_allowed("GET, POST");
  }
  const std::string& id = s[2];
  if (!valid_id(id, "sbx")) return not_found(id);
  if (s.size() == 3) {
    if (m == "GET") {
      auto r = sandboxes_.get(c.principal, id);
      if (!r) return fail(r.error());
      return Reply{200, std::move(*r), {}};
    }
    if (m == "DELETE") {
      auto r = sandboxes_.remove(c.principal, id, c.timing);
      if (!r) return fail(r.error());
      return Reply{200, std::move(*r), {}};
    }
    return method_not_allowed("GET, DELETE");
  }
  const std::string& verb = s[3];
  if (s.size() == 4 && verb == "exec") {
    if (m != "POST") return method_not_allowed("POST");
    return exec(c);
  }
  if (verb == "files") {
    const bool list = s.size() == 5 && s[4] == "list";
    if (s.size() != 4 && !list) return fail(ErrorCode::kNotFound, "no such route: " + c.target.path);
    auto raw = c.target.param("path");
    if (!raw) return fail(ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace/file)");
    auto path = sandbox::resolve_path(*raw);
    if (!path) return fail(path.error());
    if (list) {
      if (m != "GET") return method_not_allowed("GET");
      auto r = sandboxes_.list_dir(c.principal, id, *path, c.timing);
      if (!r) return fail(r.error());
      return Reply{200, std::move(*r), {}};
    }
    if (m != "DELETE") return method_not_allowed("GET, PUT, DELETE");
    auto rec = c.target.param("recursive");
    if (rec && *rec != "true" && *rec != "false") return fail(ErrorCode::kInvalidRequest, "recursive: must be true or false");
    auto r = sandboxes_.remove_path(c.principal, id, *path, rec && *rec == "true", c.timing);
    if (!r) return fail(r.error());
    return Reply{200, std::move(*r), {}};
  }
  if (s.size() == 4 && verb == "fork") {
    if (m != "POST") return method_not_allowed("POST");
    if (!c.body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object");
    for (auto& [k, v] : c.body.items())
      if (k != "count" && k != "metadata") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
    if (c.body.contains("count") && (!c.body["count"].is_number_integer() || c.body["count"].get<int64_t>() < 1 ||
                                     c.body["count"].get<int64_t>() > kMaxForkCount))
      return fail(ErrorCode::kInvalidRequest, "count: must be an integer between 1 and " + std::to_string(kMaxForkCount));
    if (c.body.contains("metadata"))
      if (auto md = sandbox::parse_metadata(c.body["metadata"], "metadata"); !md) return fail(md.error());
    std::optional<std::map<std::string, std::string>> metadata;
    if (c.body.contains("metadata")) metadata = *sandbox::parse_metadata(c.body["metadata"], "metadata");
    const int count = c.body.contains("count") ? c.body["count"].get<int>() : 1;
    auto r = sandboxes_.fork(c.principal, id, count, metadata, c.timing);
    if (!r) return fail(r.error());
    return Reply{201, std::move(*r), {}};
  }
  if (s.size() == 4 && (verb == "pause" || verb == "resume")) {
    if (m != "POST") return method_not_allowed("POST");
    auto r = verb == "pause" ? sandboxes_.pause(c.principal, id, c.timing) : sandboxes_.resume(c.principal, id, c.timing);
    if (!r) return fail(r.error());
    return Reply{200, std::move(*r), {}};
  }
  if (s.size() == 4 && verb == "snapshot") {
    if (m != "POST") return method_not_allowed("POST");
    auto r = sandboxes_.snapshot(c.principal, id, c.timing);
    if (!r) return fail(r.error());
    return Reply{201, std::move(*r), {}};
  }
  if (verb == "ports") {
    if (auto src = sandboxes_.get(c.principal, id); !src) return fail(src.error());
    return nyi("ports");
  }
  return fail(ErrorCode::kNotFound, "no such route: " + c.target.path);
}

Result<Reply> Api::snapshots(Call& c) {
  const auto& s = c.target.segments;
  const std::string& m = c.method;
  if (s.size() == 2) {
    if (m != "GET") {
      Reply r = error_reply({ErrorCode::kMethodNotAllowed, m + " is not allowed on /v1/snapshots (allowed: GET; take one "
                                                               "with POST /v1/sandboxes/{id}/snapshot)", 0});
      r.headers.emplace_back("Allow", "GET");
      return r;
    }
    int limit = 20;
    if (auto l = c.target.param("limit")) {
      char* end = nullptr;
      long v = std::strtol(l->c_str(), &end, 10);
      if (l->empty() || *end || v < 1 || v > 100) return fail(ErrorCode::kInvalidRequest, "limit: must be an integer from 1 to 100");
      limit = static_cast<int>(v);
    }
    std::optional<std::string> cursor;
    if (auto cur = c.target.param("cursor"); cur && !cur->empty()) {
      if (!valid_id(*cur, "snp")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
      cursor = *cur;
    }
    auto r = sandboxes_.list_snapshots(c.principal, cursor, limit);
    if (!r) return fail(r.error());
    return Reply{200, std::move(*r), {}};
  }
  if (s.size() != 3) return fail(ErrorCode::kNotFound, "no such route: " + c.target.path);
  if (!valid_id(s[2], "snp")) return fail(ErrorCode::kSnapshotNotFound, "no snapshot " + s[2] + " in this project");
  Result<json> r = m == "GET"      ? sandboxes_.get_snapshot(c.principal, s[2])
                   : m == "DELETE" ? sandboxes_.delete_snapshot(c.principal, s[2])
                                   : Result<json>(fail(ErrorCode::kMethodNotAllowed, m + " is not allowed on a snapshot (allowed: GET, DELETE)"));
  if (!r) return fail(r.error());
  return Reply{200, std::move(*r), {}};
}

Result<Reply> Api::create_sandbox(Call& c) {
  Stopwatch sw;
  auto spec = sandbox::parse_create(c.body, cfg_.limits);
  if (!spec) return fail(spec.error());
  c.timing.lap("parse", sw);
  auto r = sandboxes_.create(c.principal, *spec, c.timing);
  if (!r) return fail(r.error());
  return Reply{201, std::move(*r), {}};
}

Result<Reply> Api::list_sandboxes(Call& c) {
  store::SandboxQuery q;
  if (auto l = c.target.param("limit")) {
    char* end = nullptr;
    long v = std::strtol(l->c_str(), &end, 10);
    if (l->empty() || *end || v < 1 || v > 100) return fail(ErrorCode::kInvalidRequest, "limit: must be an integer from 1 to 100");
    q.limit = static_cast<int>(v);
  }
  if (auto cur = c.target.param("cursor"); cur && !cur->empty()) {
    if (!valid_id(*cur, "sbx")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
    q.after_id = *cur;
  }
  if (auto st = c.target.param("status")) {
    if (*st != "running" && *st != "paused" && *st != "stopped" && *st != "failed")
      return fail(ErrorCode::kInvalidRequest, "status: must be one of running, paused, stopped, failed");
    q.status = *st;
  }
  for (auto& [k, v] : c.target.query) {
    if (k.rfind("metadata[", 0) == 0 && k.size() > 10 && k.back() == ']') {
      q.metadata.emplace_back(k.substr(9, k.size() - 10), v);
    } else if (k != "limit" && k != "cursor" && k != "status") {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown query parameter (filters: status, metadata[KEY]=VALUE)");
    }
  }
  auto r = sandboxes_.list(c.principal, q);
  if (!r) return fail(r.error());
  return Reply{200, std::move(*r), {}};
}

Result<Reply> Api::exec(Call& c) {
  Stopwatch sw;
  auto spec = sandbox::parse_exec(c.body);
  if (!spec) return fail(spec.error());
  c.timing.lap("parse", sw);
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

bool Api::dispatch_stream(Call& c) {
  const auto& s = c.target.segments;
  if (!(s.size() == 4 && s[0] == "v1" && s[1] == "sandboxes" && s[3] == "files")) return false;
  if (c.method == "PUT") {
    upload(c);
    return true;
  }
  if (c.method == "GET") {
    download(c);
    return true;
  }
  return false;
}

void Api::upload(Call& c) {
  const std::string& id = c.target.segments[2];
  if (!valid_id(id, "sbx")) return send_error(c, not_found(id).value());
  std::string_view ct = c.ex.header("Content-Type");
  if (!media_type_is(ct, "application/octet-stream"))
    return send_error(c, {ErrorCode::kUnsupportedMediaType,
                          "file uploads take Content-Type: application/octet-stream, got \"" + std::string(ct) + "\"", 0});
  auto raw = c.target.param("path");
  if (!raw) return send_error(c, {ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace/file)", 0});
  auto path = sandbox::resolve_path(*raw);
  if (!path) return send_error(c, path.error());
  if (auto len = c.ex.content_length(); len && *len > cfg_.max_upload_bytes)
    return send_error(c, {ErrorCode::kPayloadTooLarge,
                          "the file is larger than the upload limit of " + std::to_string(cfg_.max_upload_bytes) + " bytes", 0});
  sandbox::ChunkSource source = [&](char* buf, size_t cap) { return c.ex.read_chunk(buf, cap, cfg_.max_upload_bytes); };
  auto r = sandboxes_.write_file(c.principal, id, *path, source, c.timing);
  if (!r) return send_error(c, r.error());
  send(c, {201, std::move(*r), {}});
}

void Api::download(Call& c) {
  const std::string& id = c.target.segments[2];
  if (!valid_id(id, "sbx")) return send_error(c, not_found(id).value());
  auto raw = c.target.param("path");
  if (!raw) return send_error(c, {ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace/file)", 0});
  auto path = sandbox::resolve_path(*raw);
  if (!path) return send_error(c, path.error());
  sandbox::FileSink sink;
  sink.begin = [&](uint64_t size) {
    http::Headers h = {{"Server-Timing", server_timing(c.timing, c.total.elapsed_ms())}};
    return c.ex.begin_stream(200, "application/octet-stream", size, h);
  };
  sink.data = [&](std::string_view chunk) { return c.ex.write(chunk); };
  auto r = sandboxes_.read_file(c.principal, id, *path, sink, c.timing);
  if (!r && !c.ex.responded()) return send_error(c, r.error());
  if (!r) spdlog::warn("download {} {}: {}", id, *path, r.error().message);
}

}  // namespace b3os::api
