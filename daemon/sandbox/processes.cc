// Background processes (docs/api.md, "Background processes"): the agent owns them
// (agent/processes.h); these are the daemon's requests for them over the agent channel.

#include <chrono>

#include "common/clock.h"
#include "daemon/sandbox/exec.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {
constexpr auto kControlTimeout = 30s;

/// The agent's answer with times as the API writes them.
json api_process(json p) {
  if (p.contains("started_at_ms")) p["started_at"] = format_rfc3339(p["started_at_ms"].get<int64_t>());
  if (p.contains("exited_at_ms")) p["exited_at"] = format_rfc3339(p["exited_at_ms"].get<int64_t>());
  p.erase("started_at_ms");
  p.erase("exited_at_ms");
  p["object"] = "process";
  return p;
}
}  // namespace

Result<Exec::Terminal> Exec::open_terminal(const Principal& p, const std::string& id, const TerminalSpec& spec) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  Terminal t;
  t.sandbox = *sr;
  auto& s = **sr;
  t.awake = lifecycle_.awake(s);
  const ExecSpec e = with_defaults(s, spec.cmd);
  json env = command_env(s, e);
  if (!e.env.count("TERM")) env["TERM"] = spec.term;
  json req = {{"op", "pty"}, {"argv", e.argv}, {"env", env}, {"cwd", e.cwd}, {"rows", spec.rows}, {"cols", spec.cols}};
  if (!e.user.empty()) req["user"] = e.user;
  auto stream = open_stream(s, req);
  if (!stream) return fail(stream.error());
  t.stream = *stream;
  for (;;) {
    auto f = t.stream->next(Clock::now() + kControlTimeout);
    if (!f) return fail(lifecycle_.explain(s, f.error()));
    if (f->type == protocol::FrameType::kHeader) {
      auto h = parse_agent_json(*f);
      if (!h) return fail(h.error());
      t.pid = h->value("pid", -1);
      lifecycle_.touch(s);
      return t;
    }
    if (f->type == protocol::FrameType::kEnd) {
      auto end = parse_agent_json(*f);
      if (!end) return fail(end.error());
      return fail(ErrorCode::kInternal, "the terminal ended before it started");
    }
  }
}

Result<json> Exec::start_process(const Principal& p, const std::string& id, const ProcessSpec& spec, Timing& t) {
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  ActiveOp busy(s);
  Awake awake = lifecycle_.awake(s);
  const ExecSpec e = with_defaults(s, spec.cmd);
  json req = {{"op", "proc_start"},
              {"argv", e.argv},
              {"env", command_env(s, e)},
              {"cwd", e.cwd},
              {"stdin", spec.stdin_open},
              {"ring_bytes", spec.output_bytes}};
  if (!e.user.empty()) req["user"] = e.user;
  if (!spec.tag.empty()) req["tag"] = spec.tag;
  if (spec.pty) req["pty"] = {{"rows", spec.pty->first}, {"cols", spec.pty->second}};
  auto stream = open_stream(s, req);
  if (!stream) return fail(stream.error());
  for (;;) {
    auto f = (*stream)->next(Clock::now() + kControlTimeout);
    if (!f) return fail(lifecycle_.explain(s, f.error()));
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_agent_json(*f);
    if (!end) return fail(end.error());
    if (end->value("ok", false) == false || !end->contains("process"))
      return fail(ErrorCode::kInternal, "the agent did not say which process it started (an agent too old for processes?)");
    t.lap("start", sw);
    lifecycle_.touch(s);
    return api_process((*end)["process"]);
  }
}

Result<json> Exec::list_processes(const Principal& p, const std::string& id) {
  auto end = call_agent(p, id, {{"op", "proc_list"}});
  if (!end) return fail(end.error());
  json data = json::array();
  for (auto& proc : end->value("processes", json::array())) data.push_back(api_process(proc));
  return json{{"object", "list"}, {"data", data}};
}

Result<json> Exec::get_process(const Principal& p, const std::string& id, const std::string& proc) {
  auto end = call_agent(p, id, {{"op", "proc_get"}, {"id", proc}});
  if (!end) return fail(end.error());
  return api_process((*end)["process"]);
}

Result<json> Exec::signal_process(const Principal& p, const std::string& id, const std::string& proc, int signal,
                                  bool group) {
  auto end = call_agent(p, id, {{"op", "proc_signal"}, {"id", proc}, {"signal", signal}, {"group", group}});
  if (!end) return fail(end.error());
  return json{{"delivered", end->value("delivered", false)}, {"process", api_process((*end)["process"])}};
}

Result<json> Exec::resize_process(const Principal& p, const std::string& id, const std::string& proc, int rows, int cols) {
  auto end = call_agent(p, id, {{"op", "proc_resize"}, {"id", proc}, {"rows", rows}, {"cols", cols}});
  if (!end) return fail(end.error());
  return api_process((*end)["process"]);
}

Result<json> Exec::forget_process(const Principal& p, const std::string& id, const std::string& proc) {
  auto end = call_agent(p, id, {{"op", "proc_forget"}, {"id", proc}});
  if (!end) return fail(end.error());
  return json{{"id", proc}, {"deleted", true}};
}

Result<json> Exec::write_process_stdin(const Principal& p, const std::string& id, const std::string& proc,
                                       std::string_view data, bool eof) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  ActiveOp busy(s);
  Awake awake = lifecycle_.awake(s);
  auto stream = open_stream(s, {{"op", "proc_stdin"}, {"id", proc}, {"eof", eof}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto deadline = Clock::now() + kControlTimeout;
  bool ended = false;
  if (!data.empty()) {
    if (auto r = st.send_data(data, deadline); !r) {
      if (r.error().code != ErrorCode::kConflict) return fail(lifecycle_.explain(s, r.error()));
      ended = true;  // the agent refused; its END says why
    }
  }
  if (!ended) (void)st.send_eof();
  for (;;) {
    auto f = st.next(deadline);
    if (!f) return fail(lifecycle_.explain(s, f.error()));
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_agent_json(*f);
    if (!end) return fail(end.error());
    lifecycle_.touch(s);
    return json{{"written", end->value("written", uint64_t{0})}, {"process", api_process((*end)["process"])}};
  }
}

Result<json> Exec::wait_process(const Principal& p, const std::string& id, const std::string& proc, int64_t timeout_ms,
                                const CancelCheck& cancelled) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  Awake awake = lifecycle_.awake(s);
  auto stream = open_stream(s, {{"op", "proc_wait"}, {"id", proc}, {"timeout_ms", timeout_ms}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms) + kControlTimeout;
  for (;;) {
    auto f = st.next(std::min(deadline, Clock::now() + 250ms));
    if (cancelled && cancelled()) {
      st.cancel();
      return fail(ErrorCode::kInternal, "the client went away");
    }
    if (!f) {
      if (Clock::now() >= deadline || s.channel->closed()) return fail(lifecycle_.explain(s, f.error()));
      continue;
    }
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_agent_json(*f);
    if (!end) return fail(end.error());
    return json{{"exited", end->value("exited", false)}, {"process", api_process((*end)["process"])}};
  }
}

Result<json> Exec::process_output(const Principal& p, const std::string& id, const std::string& proc, uint64_t since,
                                  bool follow, int64_t max_ms, const OutputReader& reader, const CancelCheck& cancelled) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  // A reader keeps the sandbox awake (not frozen) for as long as it follows.
  Awake awake = lifecycle_.awake(s);
  auto stream = open_stream(s, {{"op", "proc_output"}, {"id", proc}, {"since", since}, {"follow", follow}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto until = Clock::now() + std::chrono::milliseconds(max_ms);
  // Nothing from the agent for this long (not following) means it is gone.
  auto idle_deadline = Clock::now() + kControlTimeout;
  uint64_t offset = since;
  bool begun = false;
  const bool keepalives = follow && reader.quiet && reader.quiet_every_ms > 0;
  auto quiet_at = Clock::now() + std::chrono::milliseconds(reader.quiet_every_ms);
  for (;;) {
    auto f = st.next(std::min(Clock::now() + 250ms, follow ? until : idle_deadline));
    if (cancelled && cancelled()) {
      st.cancel();
      return fail(ErrorCode::kInternal, "the client went away");
    }
    if (!f) {
      if (s.channel->closed()) return fail(lifecycle_.explain(s, f.error()));
      if (follow && Clock::now() >= until) {
        // Long enough: the reader comes back with `next` (and misses nothing).
        st.cancel();
        return json{{"next", offset}, {"running", true}, {"cut", true}};
      }
      if (keepalives && begun && Clock::now() >= quiet_at) {
        quiet_at = Clock::now() + std::chrono::milliseconds(reader.quiet_every_ms);
        if (!reader.quiet()) {
          st.cancel();
          return fail(ErrorCode::kInternal, "the client went away or stopped reading");
        }
      }
      if (!follow && Clock::now() >= idle_deadline) return fail(lifecycle_.explain(s, f.error()));
      continue;
    }
    idle_deadline = Clock::now() + kControlTimeout;
    switch (f->type) {
      case protocol::FrameType::kHeader: {
        auto h = parse_agent_json(*f);
        if (!h) return fail(h.error());
        if (!begun) {
          begun = true;
          offset = h->value("from", since);
          if (reader.begin && !reader.begin(*h)) {
            st.cancel();
            return fail(ErrorCode::kInternal, "the client went away");
          }
        } else if (h->contains("gap_from")) {
          const uint64_t to = h->value("gap_to", offset);
          if (reader.gap && !reader.gap(h->value("gap_from", offset), to)) {
            st.cancel();
            return fail(ErrorCode::kInternal, "the client went away");
          }
          offset = to;
        }
        break;
      }
      case protocol::FrameType::kStdout:
      case protocol::FrameType::kStderr: {
        const std::string_view bytes(f->payload.data(), f->payload.size());
        // Handed on before the agent may send more: a slow reader holds the agent back (the
        // process never: its output goes on into the ring).
        if (reader.data && !reader.data(offset, f->type == protocol::FrameType::kStderr, bytes)) {
          st.cancel();
          return fail(ErrorCode::kInternal, "the client went away or stopped reading");
        }
        offset += bytes.size();
        if (reader.full && reader.full()) {
          st.cancel();
          return json{{"next", offset}, {"more", true}};
        }
        st.grant(static_cast<uint32_t>(bytes.size()));
        quiet_at = Clock::now() + std::chrono::milliseconds(reader.quiet_every_ms);
        break;
      }
      case protocol::FrameType::kEnd: {
        auto end = parse_agent_json(*f);
        if (!end) return fail(end.error());
        json out = {{"next", end->value("next", offset)}, {"running", end->value("running", false)}};
        if (end->contains("exit_code")) {
          out["exit_code"] = (*end)["exit_code"];
          out["signal"] = end->value("signal", 0);
        }
        return out;
      }
      default:
        break;
    }
  }
}

}  // namespace b3os::sandbox
