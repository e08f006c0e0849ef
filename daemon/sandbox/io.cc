// SandboxService: exec and file transfers over the agent channel.
#include "daemon/sandbox/service_internal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <set>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "shim/fd_passing.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace detail;
namespace fs = std::filesystem;

// ---- exec and files ----

Error SandboxService::explain(Sandbox& s, Error e) {
  if (!s.channel || !s.channel->closed()) return e;
  // The reader thread is recording why the sandbox died; give it a moment.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lk(s.mu);
      if (s.finished) {
        std::string why = s.doc["stop_message"].is_string() ? s.doc["stop_message"].get<std::string>()
                          : s.doc["stop_reason"] == "deleted" ? std::string("it was deleted")
                                                              : "its timeout passed with no API activity";
        return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + why, 0};
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + e.message, 0};
}

Result<std::shared_ptr<agentlink::Stream>> SandboxService::open_stream(Sandbox& s, const json& request) {
  std::shared_ptr<agentlink::AgentChannel> ch;
  {
    std::lock_guard lk(s.mu);
    if (s.finished) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is " + s.doc["status"].get<std::string>());
    if (s.doc["status"] == "paused")
      return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is paused; resume it first (POST /v1/sandboxes/" + s.id + "/resume)");
    ch = s.channel;
  }
  touch(s);
  return ch->open(request);
}

Result<ExecResult> SandboxService::exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                                        const CancelCheck& cancelled) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  ActiveOp busy(s.active_ops);
  json env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
              {"HOME", "/root"},
              {"LANG", "C.UTF-8"},
              {"B3OS_SANDBOX_ID", s.id}};
  {
    std::lock_guard lk(s.mu);
    // A grant of infer:run: a stock OpenAI client finds the node's model through the agent's
    // relay (the key is a placeholder: the gateway knows the sandbox). The sandbox's own env
    // may override these.
    if (grants_infer(s.doc)) {
      env["OPENAI_BASE_URL"] = kInferBaseUrl;
      env["OPENAI_API_KEY"] = kInferPlaceholderKey;
      // With no model configured the name is a placeholder; calls then get 503 saying how
      // to configure one.
      env["B3OS_MODEL"] = gw_ && !gw_->default_model().empty() ? gw_->default_model() : kUnconfiguredModel;
    }
    for (auto& [k, v] : s.doc["env"].items()) env[k] = v;
    for (auto& [k, v] : s.secrets.items()) env[k] = v;
  }
  for (auto& [k, v] : spec.env) env[k] = v;
  json req = {{"op", "exec"},
              {"argv", spec.argv},
              {"env", env},
              {"cwd", spec.cwd},
              {"timeout_ms", spec.timeout_ms},
              {"stdin", spec.stdin_data.has_value()},
              {"max_output", cfg_.max_exec_output}};
  auto stream = open_stream(s, req);
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto deadline = Clock::now() + std::chrono::milliseconds(spec.timeout_ms) + kExecGrace;
  if (spec.stdin_data) {
    if (auto r = st.send_data(*spec.stdin_data, deadline); !r && r.error().code != ErrorCode::kConflict)
      return fail(explain(s, r.error()));
    (void)st.send_eof();
  }
  ExecResult res;
  for (;;) {
    auto f = st.next(std::min(deadline, Clock::now() + 250ms));
    if (!f) {
      if (Clock::now() >= deadline) return fail(explain(s, f.error()));
      if (cancelled && cancelled()) {
        st.cancel();
        return fail(ErrorCode::kInternal, "the client went away; the command was cancelled");
      }
      if (s.channel->closed()) return fail(explain(s, f.error()));
      continue;
    }
    if (f->type == protocol::FrameType::kStdout || f->type == protocol::FrameType::kStderr) {
      auto& out = f->type == protocol::FrameType::kStdout ? res.stdout_data : res.stderr_data;
      size_t room = cfg_.max_exec_output > out.size() ? cfg_.max_exec_output - out.size() : 0;
      out.append(f->payload.data(), std::min(room, f->payload.size()));
      st.grant(static_cast<uint32_t>(f->payload.size()));
    } else if (f->type == protocol::FrameType::kEnd) {
      auto end = parse_end(*f);
      if (!end) return fail(end.error());
      res.exit_code = end->value("exit_code", -1);
      res.timed_out = end->value("timed_out", false);
      res.duration_ms = end->value("duration_ms", 0.0);
      res.stdout_truncated = end->value("stdout_truncated", false);
      res.stderr_truncated = end->value("stderr_truncated", false);
      break;
    }
  }
  touch(s);
  t.lap("exec", sw);
  return res;
}

Result<json> SandboxService::write_file(const Principal& p, const std::string& id, const std::string& path,
                                        const ChunkSource& source, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
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
      if (r.error().code != ErrorCode::kConflict) return fail(explain(**sr, r.error()));
      agent_ended = true;  // the agent refused the file; its END says why
      break;
    }
  }
  if (!agent_ended) {
    if (auto r = st.send_eof(); !r) return fail(explain(**sr, r.error()));
  }
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_end(*f);
    if (!end) return fail(end.error());
    touch(**sr);
    t.lap("write", sw);
    return json{{"path", path}, {"size", end->value("bytes", uint64_t{0})}};
  }
}

Result<void> SandboxService::read_file(const Principal& p, const std::string& id, const std::string& path,
                                       FileSink& sink, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
  auto stream = open_stream(**sr, {{"op", "file_read"}, {"path", path}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
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
        auto end = parse_end(*f);
        if (!end) return fail(end.error());
        touch(**sr);
        t.lap("read", sw);
        return {};
      }
      default:
        break;
    }
  }
}

Result<json> SandboxService::call_agent(const Principal& p, const std::string& id, const json& request) {
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
  auto stream = open_stream(**sr, request);
  if (!stream) return fail(stream.error());
  for (;;) {
    auto f = (*stream)->next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
    if (f->type == protocol::FrameType::kEnd) return parse_end(*f);
  }
}

Result<json> SandboxService::list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t) {
  Stopwatch sw;
  auto end = call_agent(p, id, {{"op", "list"}, {"path", path}});
  if (!end) return fail(end.error());
  json data = json::array();
  for (auto& e : (*end)["entries"]) {
    std::string name = e.value("name", "");
    data.push_back({{"name", name},
                    {"path", path == "/" ? "/" + name : path + "/" + name},
                    {"type", e.value("type", "other")},
                    {"size", e.value("size", uint64_t{0})},
                    {"mode", e.value("mode", 0)},
                    {"modified_at", format_rfc3339(e.value("mtime_ns", int64_t{0}) / 1000000)}});
  }
  t.lap("list", sw);
  return json{{"object", "list"}, {"path", path}, {"data", data}, {"next_cursor", nullptr}};
}

Result<json> SandboxService::remove_path(const Principal& p, const std::string& id, const std::string& path,
                                         bool recursive, Timing& t) {
  Stopwatch sw;
  auto end = call_agent(p, id, {{"op", "remove"}, {"path", path}, {"recursive", recursive}});
  if (!end) return fail(end.error());
  t.lap("remove", sw);
  return json{{"path", path}, {"deleted", true}};
}

Result<double> SandboxService::ping(const Principal& p, const std::string& id) {
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  return (*sr)->channel->ping(kControlTimeout);
}

}  // namespace b3os::sandbox
