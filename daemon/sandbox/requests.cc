#include "daemon/sandbox/requests.h"

#include <charconv>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "common/ids.h"
#include "daemon/sandbox/spec.h"
#include "daemon/sys/codec.h"

namespace b3os::sandbox {

using nlohmann::json;

namespace {

const std::string* find(const Params& params, const std::string& name) {
  for (auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

Result<int> parse_limit(const Params& params) {
  const std::string* l = find(params, "limit");
  if (!l) return 20;
  char* end = nullptr;
  long v = std::strtol(l->c_str(), &end, 10);
  if (l->empty() || *end || v < 1 || v > 100) return fail(ErrorCode::kInvalidRequest, "limit: must be an integer from 1 to 100");
  return static_cast<int>(v);
}

Result<uint64_t> parse_u64(const std::string& field, const std::string& v, uint64_t hi) {
  if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
    return fail(ErrorCode::kInvalidRequest, field + ": must be a non-negative integer");
  errno = 0;
  const unsigned long long n = std::strtoull(v.c_str(), nullptr, 10);
  if (errno == ERANGE || n > hi) return fail(ErrorCode::kInvalidRequest, field + ": at most " + std::to_string(hi));
  return static_cast<uint64_t>(n);
}

// A query parameter that is "true" or "false".
Result<bool> parse_flag(const std::string& field, const std::string& v) {
  if (v != "true" && v != "false") return fail(ErrorCode::kInvalidRequest, field + ": must be true or false");
  return v == "true";
}

// How long a followed stream (process output, a file watch) may last: 1 ms to 1 hour.
Result<int64_t> parse_stream_timeout(const std::string& v) {
  auto n = parse_u64("timeout_ms", v, 3'600'000);
  if (!n) return fail(n.error());
  if (*n == 0) return fail(ErrorCode::kInvalidRequest, "timeout_ms: must be 1 to 3600000");
  return static_cast<int64_t>(*n);
}

// Signal names as kill(1) takes them, without the SIG prefix.
const std::map<std::string, int> kSignals = {
    {"HUP", 1},   {"INT", 2},   {"QUIT", 3},  {"ILL", 4},    {"TRAP", 5},   {"ABRT", 6},   {"BUS", 7},
    {"FPE", 8},   {"KILL", 9},  {"USR1", 10}, {"SEGV", 11},  {"USR2", 12},  {"PIPE", 13},  {"ALRM", 14},
    {"TERM", 15}, {"CHLD", 17}, {"CONT", 18}, {"STOP", 19},  {"TSTP", 20},  {"TTIN", 21},  {"TTOU", 22},
    {"URG", 23},  {"XCPU", 24}, {"XFSZ", 25}, {"VTALRM", 26}, {"PROF", 27}, {"WINCH", 28}, {"IO", 29},
    {"PWR", 30},  {"SYS", 31}};

}  // namespace

bool valid_process_key(const std::string& key) {
  auto digits = [](std::string_view s) {
    return !s.empty() && s.size() <= 10 && s.find_first_not_of("0123456789") == std::string_view::npos;
  };
  if (key.rfind("proc_", 0) == 0) return digits(std::string_view(key).substr(5));
  return digits(key);
}

Result<TerminalSpec> parse_terminal(const Params& params) {
  TerminalSpec t;
  json cmd = json::object();
  for (auto& [k, v] : params) {
    if (k == "rows" || k == "cols") {
      auto n = parse_u64(k, v, 1000);
      if (!n || *n == 0) return fail(ErrorCode::kInvalidRequest, k + ": must be 1 to 1000");
      (k == "rows" ? t.rows : t.cols) = static_cast<int>(*n);
    } else if (k == "term") {
      if (v.empty() || v.size() > 64 || v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") != std::string::npos)
        return fail(ErrorCode::kInvalidRequest, "term: 1-64 of A-Z a-z 0-9 . _ + - (such as xterm-256color)");
      t.term = v;
    } else if (k == "cmd" || k == "cwd" || k == "user") {
      cmd[k] = v;
    } else {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown parameter (rows, cols, term, cmd, cwd, user)");
    }
  }
  if (!cmd.contains("cmd"))  // a login shell: bash where the sandbox has it
    cmd["cmd"] = "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi";
  auto e = parse_exec(cmd);
  if (!e) return fail(e.error());
  t.cmd = std::move(*e);
  return t;
}

Result<SignalRequest> parse_signal(const json& body) {
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object like {\"signal\": \"TERM\"}");
  SignalRequest r;
  for (auto& [k, v] : body.items())
    if (k != "signal" && k != "group") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  if (body.contains("signal")) {
    const json& s = body["signal"];
    if (s.is_number_integer()) {
      const int64_t n = s.get<int64_t>();
      if (n < 1 || n > 64) return fail(ErrorCode::kInvalidRequest, "signal: must be 1 to 64 or a name such as TERM");
      r.signal = static_cast<int>(n);
    } else if (s.is_string()) {
      std::string name = s.get<std::string>();
      for (auto& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (name.rfind("SIG", 0) == 0) name = name.substr(3);
      auto it = kSignals.find(name);
      if (it == kSignals.end())
        return fail(ErrorCode::kInvalidRequest, "signal: unknown signal \"" + s.get<std::string>() + "\" (TERM, KILL, INT, HUP, ... or 1 to 64)");
      r.signal = it->second;
    } else {
      return fail(ErrorCode::kInvalidRequest, "signal: must be a name such as TERM or a number 1 to 64");
    }
  }
  if (body.contains("group")) {
    if (!body["group"].is_boolean()) return fail(ErrorCode::kInvalidRequest, "group: must be true or false");
    r.group = body["group"].get<bool>();
  }
  return r;
}

Result<StdinRequest> parse_stdin(const json& body) {
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object like {\"data\": \"text\"}");
  StdinRequest r;
  std::string encoding = "utf-8";
  for (auto& [k, v] : body.items())
    if (k != "data" && k != "encoding" && k != "eof") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  if (body.contains("encoding")) {
    if (!body["encoding"].is_string()) return fail(ErrorCode::kInvalidRequest, "encoding: must be \"utf-8\" or \"base64\"");
    encoding = body["encoding"].get<std::string>();
    if (encoding != "utf-8" && encoding != "base64")
      return fail(ErrorCode::kInvalidRequest, "encoding: must be \"utf-8\" or \"base64\"");
  }
  if (body.contains("data")) {
    if (!body["data"].is_string()) return fail(ErrorCode::kInvalidRequest, "data: must be a string");
    r.data = body["data"].get<std::string>();
    if (encoding == "base64") {
      auto d = sys::base64_decode(r.data);
      if (!d) return fail(ErrorCode::kInvalidRequest, "data: not valid base64");
      r.data = std::move(*d);
    }
  }
  if (r.data.size() > kMaxStdinRequest) return fail(ErrorCode::kInvalidRequest, "data: more than 1 MiB in one request");
  if (body.contains("eof")) {
    if (!body["eof"].is_boolean()) return fail(ErrorCode::kInvalidRequest, "eof: must be true or false");
    r.eof = body["eof"].get<bool>();
  }
  if (!body.contains("data") && !r.eof) return fail(ErrorCode::kInvalidRequest, "data: is required (or eof: true)");
  return r;
}

Result<int64_t> parse_wait(const json& body) {
  if (body.is_object() && body.empty()) return 30'000;
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object like {\"timeout_ms\": 30000}");
  for (auto& [k, v] : body.items())
    if (k != "timeout_ms") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  const json& t = body["timeout_ms"];
  if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 3'600'000)
    return fail(ErrorCode::kInvalidRequest, "timeout_ms: must be an integer from 1 to 3600000");
  return t.get<int64_t>();
}

Result<OutputRequest> parse_output_request(const Params& params, const std::string& last_event_id) {
  OutputRequest r;
  bool since_given = false;
  for (auto& [k, v] : params) {
    if (k == "since") {
      auto n = parse_u64("since", v, ~uint64_t{0} >> 1);
      if (!n) return fail(n.error());
      r.since = *n;
      since_given = true;
    } else if (k == "follow") {
      auto f = parse_flag(k, v);
      if (!f) return fail(f.error());
      r.follow = *f;
    } else if (k == "timeout_ms") {
      auto t = parse_stream_timeout(v);
      if (!t) return fail(t.error());
      r.timeout_ms = *t;
    } else {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown parameter (since, follow, timeout_ms)");
    }
  }
  if (!since_given && !last_event_id.empty()) {
    auto n = parse_u64("Last-Event-ID", last_event_id, ~uint64_t{0} >> 1);
    if (!n) return fail(n.error());
    r.since = *n;
  }
  return r;
}

Result<WatchRequest> parse_watch_request(const Params& params) {
  WatchRequest r;
  bool have_path = false;
  for (auto& [k, v] : params) {
    if (k == "path") {
      auto path = resolve_path(v);
      if (!path) return fail(path.error());
      r.path = std::move(*path);
      have_path = true;
    } else if (k == "recursive") {
      auto f = parse_flag(k, v);
      if (!f) return fail(f.error());
      r.recursive = *f;
    } else if (k == "timeout_ms") {
      auto t = parse_stream_timeout(v);
      if (!t) return fail(t.error());
      r.timeout_ms = *t;
    } else {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown parameter (path, recursive, timeout_ms)");
    }
  }
  if (!have_path) return fail(ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace)");
  return r;
}

Result<ForkRequest> parse_fork(const json& body) {
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object");
  for (auto& [k, v] : body.items())
    if (k != "count" && k != "metadata") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  ForkRequest r;
  if (body.contains("count")) {
    const json& c = body["count"];
    if (!c.is_number_integer() || c.get<int64_t>() < 1 || c.get<int64_t>() > kMaxForkCount)
      return fail(ErrorCode::kInvalidRequest, "count: must be an integer between 1 and " + std::to_string(kMaxForkCount));
    r.count = c.get<int>();
  }
  if (body.contains("metadata")) {
    auto md = parse_metadata(body["metadata"], "metadata");
    if (!md) return fail(md.error());
    r.metadata = std::move(*md);
  }
  return r;
}

Result<PortUrlRequest> parse_port_url(const std::string& port, const json& body) {
  PortUrlRequest r;
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || port.size() > 5 || *end || p < 1 || p > 65535)
    return fail(ErrorCode::kInvalidRequest, "port: must be an integer from 1 to 65535, got \"" + port.substr(0, 12) + "\"");
  r.port = static_cast<int>(p);
  if (body.is_null()) return r;
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object");
  for (auto& [k, v] : body.items())
    if (k != "ttl_s") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  if (body.contains("ttl_s") && !body["ttl_s"].is_null()) {
    const json& t = body["ttl_s"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 7 * 24 * 3600)
      return fail(ErrorCode::kInvalidRequest, "ttl_s: must be an integer from 1 to 604800 (7 days)");
    r.ttl_s = t.get<int>();
  }
  return r;
}

Result<store::SandboxQuery> parse_list_sandboxes(const Params& params) {
  store::SandboxQuery q;
  auto limit = parse_limit(params);
  if (!limit) return fail(limit.error());
  q.limit = *limit;
  if (const std::string* cur = find(params, "cursor"); cur && !cur->empty()) {
    if (!valid_id(*cur, "sbx")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
    q.after_id = *cur;
  }
  if (const std::string* st = find(params, "status")) {
    if (*st != "running" && *st != "paused" && *st != "stopped" && *st != "failed")
      return fail(ErrorCode::kInvalidRequest, "status: must be one of running, paused, stopped, failed");
    q.status = *st;
  }
  for (auto& [k, v] : params) {
    if (k.rfind("metadata[", 0) == 0 && k.size() > 10 && k.back() == ']') {
      q.metadata.emplace_back(k.substr(9, k.size() - 10), v);
    } else if (k != "limit" && k != "cursor" && k != "status") {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown query parameter (filters: status, metadata[KEY]=VALUE)");
    }
  }
  return q;
}

Result<ListSnapshotsRequest> parse_list_snapshots(const Params& params) {
  ListSnapshotsRequest r;
  auto limit = parse_limit(params);
  if (!limit) return fail(limit.error());
  r.limit = *limit;
  if (const std::string* cur = find(params, "cursor"); cur && !cur->empty()) {
    if (!valid_id(*cur, "snp")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
    r.cursor = *cur;
  }
  return r;
}

Result<FileRequest> parse_file_request(const Params& params, bool allow_recursive) {
  const std::string* raw = find(params, "path");
  if (!raw) return fail(ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace/file)");
  auto path = resolve_path(*raw);
  if (!path) return fail(path.error());
  FileRequest r;
  r.path = std::move(*path);
  if (allow_recursive) {
    if (const std::string* rec = find(params, "recursive")) {
      auto f = parse_flag("recursive", *rec);
      if (!f) return fail(f.error());
      r.recursive = *f;
    }
  }
  return r;
}

Result<ListPage> parse_list_page(const Params& params) {
  ListPage page;
  if (const std::string* l = find(params, "limit")) {
    int n = 0;
    const auto [end, ec] = std::from_chars(l->data(), l->data() + l->size(), n);
    if (ec != std::errc() || end != l->data() + l->size() || n < 1 || n > 1000)
      return fail(ErrorCode::kInvalidRequest, "limit: an integer from 1 to 1000");
    page.limit = n;
  }
  if (const std::string* c = find(params, "cursor")) {
    auto hexit = [](char ch) -> int {
      if (ch >= '0' && ch <= '9') return ch - '0';
      if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
      return -1;
    };
    std::string name;
    bool ok = !c->empty() && c->size() % 2 == 0 && c->size() <= 2 * 255;
    for (size_t i = 0; ok && i < c->size(); i += 2) {
      const int hi = hexit((*c)[i]), lo = hexit((*c)[i + 1]);
      ok = hi >= 0 && lo >= 0;
      name.push_back(static_cast<char>(hi * 16 + lo));
    }
    if (!ok || name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
      return fail(ErrorCode::kInvalidRequest, "cursor: not a next_cursor of this listing");
    page.after = std::move(name);
  }
  return page;
}

Result<UpdateRequest> parse_update(const json& body, int max_timeout_s) {
  if (!body.is_object())
    return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object like {\"egress\": {\"mode\": \"allowlist\", ...}}");
  UpdateRequest u;
  for (auto& [k, v] : body.items()) {
    if (k != "egress" && k != "timeout_s")
      return fail(ErrorCode::kInvalidRequest, k + ": cannot be changed on a running sandbox (only egress and timeout_s can)");
  }
  if (body.contains("timeout_s")) {
    const json& t = body["timeout_s"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > max_timeout_s)
      return fail(ErrorCode::kInvalidRequest, "timeout_s: an integer from 1 to " + std::to_string(max_timeout_s));
    u.timeout_s = t.get<int>();
  }
  if (body.contains("egress")) {
    auto e = parse_egress(body["egress"]);
    if (!e) return fail(e.error());
    if (!body["egress"].contains("mode"))
      return fail(ErrorCode::kInvalidRequest, "egress.mode: is required (public or allowlist)");
    if (e->mode == "deny")
      return fail(ErrorCode::kInvalidRequest,
                  "egress.mode: deny is fixed at create (such a sandbox has no network); to cut a running sandbox "
                  "off, set {\"mode\": \"allowlist\", \"allow\": []}");
    u.egress = std::move(*e);
  }
  return u;
}

}  // namespace b3os::sandbox
