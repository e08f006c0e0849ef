// File watches (docs/api.md, "Watching files"): the agent watches with inotify inside the
// sandbox (agent/watch_stream.h) and sends events as JSON lines; this hands them on as they
// come, granting the agent more only once the reader took them (a slow reader holds the agent's
// bounded buffer, never the daemon's memory).

#include <chrono>

#include "daemon/sandbox/exec.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {
constexpr auto kStartTimeout = 30s;  // a tree of 8,192 directories is walked well within it
constexpr auto kQuietEvery = 15s;
}  // namespace

Result<json> Exec::watch_files(const Principal& p, const std::string& id, const std::string& path, bool recursive,
                               int64_t max_ms, const WatchReader& reader, const CancelCheck& cancelled) {
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  // A watcher keeps the sandbox awake (not frozen) for as long as it watches.
  Awake awake = lifecycle_.awake(s);
  auto stream = open_stream(s, {{"op", "watch"}, {"path", path}, {"recursive", recursive}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto start_deadline = Clock::now() + kStartTimeout;
  const auto until = Clock::now() + std::chrono::milliseconds(max_ms);
  auto quiet_at = Clock::now() + kQuietEvery;
  bool begun = false;
  auto gone = [&]() -> Result<json> {
    st.cancel();
    return fail(ErrorCode::kInternal, "the client went away");
  };
  for (;;) {
    auto f = st.next(std::min(Clock::now() + 250ms, begun ? until : start_deadline));
    if (cancelled && cancelled()) return gone();
    if (!f) {
      if (s.channel->closed()) return fail(lifecycle_.explain(s, f.error()));
      const auto now = Clock::now();
      if (!begun && now >= start_deadline) {
        st.cancel();
        return fail(lifecycle_.explain(s, f.error()));
      }
      if (begun && now >= until) {
        st.cancel();
        return json{{"reason", "timeout"}};
      }
      if (begun && now >= quiet_at) {
        quiet_at = now + kQuietEvery;
        if (reader.quiet && !reader.quiet()) return gone();
      }
      continue;
    }
    switch (f->type) {
      case protocol::FrameType::kHeader: {
        auto h = parse_agent_json(*f);
        if (!h) return fail(h.error());
        begun = true;
        lifecycle_.touch(s);
        h->erase("ok");
        if (reader.begin && !reader.begin(*h)) return gone();
        break;
      }
      case protocol::FrameType::kStdout: {
        const std::string_view lines(f->payload.data(), f->payload.size());
        if (reader.events && !reader.events(lines)) return gone();
        st.grant(static_cast<uint32_t>(lines.size()));
        quiet_at = Clock::now() + kQuietEvery;
        break;
      }
      case protocol::FrameType::kEnd: {
        auto end = parse_agent_json(*f);
        if (!end) return fail(end.error());
        return json{{"reason", end->value("reason", "deleted")}};
      }
      default:
        break;
    }
  }
}

}  // namespace b3os::sandbox
