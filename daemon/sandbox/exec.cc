#include "daemon/sandbox/exec.h"

#include "common/ids.h"

#include <algorithm>
#include <chrono>

#include "common/clock.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {
constexpr auto kControlTimeout = 5s;
constexpr auto kFileIdleTimeout = 60s;
constexpr auto kExecGrace = 10s;
constexpr const char* kInferBaseUrl = "http://127.0.0.1:7700/v1/infer";
constexpr const char* kInferPlaceholderKey = "b3os-sandbox-no-key-needed";
constexpr const char* kUnconfiguredModel = "b3os/unconfigured";

Error agent_error(const json& end) {
  const json& e = end.contains("error") ? end["error"] : json::object();
  Error err;
  err.code = error_code_from_name(e.value("code", "internal"));
  err.message = e.value("message", "the agent reported an error");
  err.err_no = e.value("errno", 0);
  return err;
}
}  // namespace

Result<json> parse_agent_json(const protocol::Frame& f) {
  json j = json::parse(f.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(ErrorCode::kInternal, "unreadable answer from the agent");
  // END always says "ok"; a HEADER may not (a gap of process output), and is then no error.
  if (j.contains("ok") && !j.value("ok", false)) return fail(agent_error(j));
  return j;
}

Result<std::shared_ptr<agentlink::Stream>> Exec::open_stream(LiveSandbox& s, const json& request) {
  {
    std::lock_guard lk(s.mu);
    const std::string_view status = api_status(s.rec.state);
    if (s.rec.ended()) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is " + std::string(status));
    if (status == "paused")
      return fail(ErrorCode::kSandboxNotRunning,
                  "sandbox " + s.id + " is paused; resume it first (POST /v1/sandboxes/" + s.id + "/resume)");
  }
  lifecycle_.touch(s);
  return s.channel->open(request);
}

Result<ExecResult> Exec::exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                              const CancelCheck& cancelled, const OutputSink& on_output, const StartSink& on_start) {
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  ActiveOp busy(s);
  Awake awake = lifecycle_.awake(s);
  auto res = run_live(s, with_defaults(s, spec), cancelled, on_output, on_start);
  if (res) t.lap("exec", sw);
  return res;
}

ExecSpec Exec::with_defaults(LiveSandbox& s, const ExecSpec& spec) {
  // A template's defaults for its commands (docs/templates.md): working directory and user.
  ExecSpec e = spec;
  if (auto* catalog = lifecycle_.templates(); catalog && (!spec.cwd_given || spec.user.empty())) {
    std::string template_id, rootfs;
    {
      std::lock_guard lk(s.mu);
      template_id = s.rec.template_id;
      rootfs = s.rec.rootfs;
    }
    const auto d = template_id.empty() ? TemplateCatalog::ExecDefaults{} : catalog->exec_defaults(template_id, rootfs);
    if (!spec.cwd_given && !d.workdir.empty()) e.cwd = d.workdir;
    if (spec.user.empty() && !d.user.empty()) e.user = d.user;
  }
  return e;
}

json Exec::command_env(LiveSandbox& s, const ExecSpec& spec) {
  json env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
              {"LANG", "C.UTF-8"},
              {"B3OS_SANDBOX_ID", s.id}};
  // As another user, HOME comes from the sandbox's /etc/passwd, which only the agent reads;
  // it adds HOME, USER and LOGNAME where this environment does not set them.
  if (spec.user.empty()) env["HOME"] = "/root";
  {
    std::lock_guard lk(s.mu);
    const store::SandboxRecord& rec = s.rec;
    // A grant of infer:run: a stock OpenAI client finds the node's model through the agent's
    // relay (the key is a placeholder: the gateway knows the sandbox). The sandbox's own env
    // may override these.
    if (std::find(rec.api_scopes.begin(), rec.api_scopes.end(), "infer:run") != rec.api_scopes.end()) {
      env["OPENAI_BASE_URL"] = kInferBaseUrl;
      env["OPENAI_API_KEY"] = kInferPlaceholderKey;
      // With no model configured the name is a placeholder; calls then get 503 saying how
      // to configure one.
      env["B3OS_MODEL"] = cfg_.default_model.empty() ? kUnconfiguredModel : cfg_.default_model;
    }
    for (auto& [k, v] : rec.env) env[k] = v;
    for (auto& [k, v] : rec.secrets) env[k] = v;
  }
  for (auto& [k, v] : spec.env) env[k] = v;
  return env;
}

Result<ExecResult> Exec::run_live(LiveSandbox& s, const ExecSpec& spec, const CancelCheck& cancelled,
                                  const OutputSink& on_output, const StartSink& on_start) {
  json req = {{"op", "exec"},
              {"argv", spec.argv},
              {"env", command_env(s, spec)},
              {"cwd", spec.cwd},
              {"timeout_ms", spec.timeout_ms},
              {"stdin", spec.stdin_data.has_value()},
              // A streamed command's output is all forwarded, as fast as its client reads it.
              {"max_output", spec.stream && on_output ? ~uint64_t{0} : cfg_.max_exec_output}};
  if (!spec.user.empty()) req["user"] = spec.user;
  if (on_start) req["announce"] = true;  // the agent says HEADER {"pid"} once it started
  auto stream = open_stream(s, req);
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  auto deadline = Clock::now() + std::chrono::milliseconds(spec.timeout_ms) + kExecGrace;
  if (spec.stdin_data) {
    if (auto r = st.send_data(*spec.stdin_data, deadline); !r && r.error().code != ErrorCode::kConflict)
      return fail(lifecycle_.explain(s, r.error()));
    (void)st.send_eof();
  }
  ExecResult res;
  // The caller is asked every 250 ms whether to go on, output or not: a command that prints
  // without pause must not outlive the client that went away (nor miss its progress).
  auto next_check = Clock::now() + 250ms;
  for (;;) {
    auto f = st.next(std::min(deadline, next_check));
    if (Clock::now() >= next_check) {
      next_check = Clock::now() + 250ms;
      if (cancelled && cancelled()) {
        st.cancel();
        return fail(ErrorCode::kInternal, "the client went away; the command was cancelled");
      }
    }
    if (!f) {
      if (Clock::now() >= deadline) return fail(lifecycle_.explain(s, f.error()));
      if (s.channel->closed()) return fail(lifecycle_.explain(s, f.error()));
      continue;
    }
    if (f->type == protocol::FrameType::kHeader) {
      json h = json::parse(f->payload, nullptr, false);
      if (on_start && h.is_object() && !on_start(h.value("pid", -1))) {
        st.cancel();
        return fail(ErrorCode::kInternal, "the client went away; the command was cancelled");
      }
    } else if (f->type == protocol::FrameType::kStdout || f->type == protocol::FrameType::kStderr) {
      // The credit goes back only once the bytes were handed on: a client that reads slowly
      // holds the command's output in its pipe, not in b3osd's memory.
      if (on_output &&
          !on_output(f->type == protocol::FrameType::kStderr, std::string_view(f->payload.data(), f->payload.size()))) {
        st.cancel();
        return fail(ErrorCode::kInternal, "the client went away or stopped reading; the command was cancelled");
      }
      if (!(spec.stream && on_output)) {
        auto& out = f->type == protocol::FrameType::kStdout ? res.stdout_data : res.stderr_data;
        size_t room = cfg_.max_exec_output > out.size() ? cfg_.max_exec_output - out.size() : 0;
        out.append(f->payload.data(), std::min(room, f->payload.size()));
      }
      st.grant(static_cast<uint32_t>(f->payload.size()));
      // Output still flowing to a slow client after the command's time: the agent has killed
      // it at timeout_ms; what it wrote before is still owed.
      if (spec.stream) deadline = std::max(deadline, Clock::now() + kExecGrace);
    } else if (f->type == protocol::FrameType::kEnd) {
      auto end = parse_agent_json(*f);
      if (!end) return fail(end.error());
      res.exit_code = end->value("exit_code", -1);
      res.timed_out = end->value("timed_out", false);
      res.signal = end->value("signal", 0);
      res.duration_ms = end->value("duration_ms", 0.0);
      res.stdout_truncated = end->value("stdout_truncated", false);
      res.stderr_truncated = end->value("stderr_truncated", false);
      break;
    }
  }
  lifecycle_.touch(s);
  return res;
}

Result<json> Exec::write_file(const Principal& p, const std::string& id, const std::string& path,
                                        const ChunkSource& source, Timing& t) {
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy(**sr);
  Awake awake = lifecycle_.awake(**sr);
  auto stream = open_stream(**sr, {{"op", "file_write"}, {"path", path}, {"mode", 0644}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  std::vector<char> buf(protocol::kMaxData);
  bool agent_ended = false;
  for (;;) {
    auto n = source(buf.data(), buf.size());
    if (!n) return fail(n.error());
    if (*n == 0) break;
    auto r = st.send_data(std::string_view(buf.data(), *n), Clock::now() + kFileIdleTimeout);
    if (!r) {
      if (r.error().code != ErrorCode::kConflict) return fail(lifecycle_.explain(**sr, r.error()));
      agent_ended = true;  // the agent refused the file; its END says why
      break;
    }
  }
  if (!agent_ended) {
    if (auto r = st.send_eof(); !r) return fail(lifecycle_.explain(**sr, r.error()));
  }
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(lifecycle_.explain(**sr, f.error()));
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_agent_json(*f);
    if (!end) return fail(end.error());
    lifecycle_.touch(**sr);
    t.lap("write", sw);
    return json{{"path", path}, {"size", end->value("bytes", uint64_t{0})}};
  }
}

Result<void> Exec::read_file(const Principal& p, const std::string& id, const std::string& path,
                                       FileSink& sink, Timing& t) {
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy(**sr);
  Awake awake = lifecycle_.awake(**sr);
  auto stream = open_stream(**sr, {{"op", "file_read"}, {"path", path}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(lifecycle_.explain(**sr, f.error()));
    switch (f->type) {
      case protocol::FrameType::kHeader: {
        json h = json::parse(f->payload, nullptr, false);
        if (h.is_discarded()) return fail(ErrorCode::kInternal, "unreadable file header from the agent");
        t.lap("open", sw);
        if (auto r = sink.begin(h.value("size", uint64_t{0})); !r) return r;
        break;
      }
      case protocol::FrameType::kData:
        if (auto r = sink.data(f->payload); !r) return r;
        st.grant(static_cast<uint32_t>(f->payload.size()));
        break;
      case protocol::FrameType::kEnd: {
        auto end = parse_agent_json(*f);
        if (!end) return fail(end.error());
        lifecycle_.touch(**sr);
        t.lap("read", sw);
        return {};
      }
      default:
        break;
    }
  }
}

Result<json> Exec::call_agent(const Principal& p, const std::string& id, const json& request) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy(**sr);
  Awake awake = lifecycle_.awake(**sr);
  auto stream = open_stream(**sr, request);
  if (!stream) return fail(stream.error());
  for (;;) {
    auto f = (*stream)->next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(lifecycle_.explain(**sr, f.error()));
    if (f->type == protocol::FrameType::kEnd) return parse_agent_json(*f);
  }
}

namespace {
/// A file entry as the API shows it, from the agent's stat of `path`.
json entry_json(const std::string& path, const json& e) {
  const size_t slash = path.find_last_of('/');
  json out = {{"name", slash == std::string::npos ? path : path.substr(slash + 1)},
              {"path", path},
              {"type", e.value("type", "other")},
              {"size", e.value("size", uint64_t{0})},
              {"mode", e.value("mode", 0)},
              {"modified_at", format_rfc3339(e.value("mtime_ns", int64_t{0}) / 1000000)},
              {"owner", e.value("owner", "")},
              {"group", e.value("group", "")}};
  if (e.contains("target")) out["symlink_target"] = e["target"];
  return out;
}
}  // namespace

Result<json> Exec::stat_path(const Principal& p, const std::string& id, const std::string& path) {
  auto end = call_agent(p, id, {{"op", "stat"}, {"path", path}});
  if (!end) return fail(end.error());
  return entry_json(path, *end);
}

Result<json> Exec::make_dir(const Principal& p, const std::string& id, const std::string& path) {
  auto end = call_agent(p, id, {{"op", "mkdir"}, {"path", path}});
  if (!end) return fail(end.error());
  json out = entry_json(path, *end);
  out["created"] = end->value("created", false);
  return out;
}

Result<json> Exec::move_path(const Principal& p, const std::string& id, const std::string& from, const std::string& to) {
  auto end = call_agent(p, id, {{"op", "rename"}, {"path", from}, {"to", to}});
  if (!end) return fail(end.error());
  return entry_json(to, *end);
}

Result<json> Exec::list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t,
                            const std::string& after, int limit) {
  Stopwatch sw;
  json req = {{"op", "list"}, {"path", path}, {"limit", limit}};
  if (!after.empty()) req["after"] = after;
  auto end = call_agent(p, id, req);
  if (!end) return fail(end.error());
  json data = json::array();
  for (auto& e : end->value("entries", json::array())) {
    std::string name = e.value("name", "");
    data.push_back(entry_json(path == "/" ? "/" + name : path + "/" + name, e));
  }
  t.lap("list", sw);
  json out = {{"object", "list"}, {"path", path}, {"data", data}, {"next_cursor", nullptr}};
  // The cursor is the page's last name in hex: names are any bytes but '/' and NUL.
  if (end->value("truncated", false)) {
    const json last = end->value("last", json());
    if (last.is_string() && !last.get_ref<const std::string&>().empty()) out["next_cursor"] = to_hex(last.get<std::string>());
    else out["truncated"] = true;  // an agent of an older b3os cuts without saying where
  }
  return out;
}

Result<json> Exec::remove_path(const Principal& p, const std::string& id, const std::string& path,
                                         bool recursive, Timing& t) {
  Stopwatch sw;
  auto end = call_agent(p, id, {{"op", "remove"}, {"path", path}, {"recursive", recursive}});
  if (!end) return fail(end.error());
  t.lap("remove", sw);
  return json{{"path", path}, {"deleted", true}};
}

Result<double> Exec::ping(const Principal& p, const std::string& id) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  Awake awake = lifecycle_.awake(**sr);
  return (*sr)->channel->ping(kControlTimeout);
}

}  // namespace b3os::sandbox
