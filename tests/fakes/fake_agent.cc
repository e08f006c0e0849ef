#include "tests/fakes/fake_agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "protocol/frame.h"

namespace b3os::fakes {

using nlohmann::json;
using protocol::FrameType;

FakeAgent::FakeAgent(UniqueFd fd, bool booted, bool reports_idle)
    : fd_(std::move(fd)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), reports_idle_(reports_idle) {
  thread_ = std::thread([this, booted] { loop(booted); });
}

FakeAgent::~FakeAgent() { crash(); }

void FakeAgent::crash() {
  stop_ = true;
  uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  fd_.reset();
}

void FakeAgent::set_frozen(bool frozen) {
  frozen_ = frozen;
  uint64_t one = 1;
  if (wake_) (void)!::write(wake_.get(), &one, sizeof one);
}

void FakeAgent::send(uint8_t type, uint32_t stream, const std::string& payload) {
  std::string buf = protocol::encode_frame(static_cast<FrameType>(type), stream, payload);
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t w = ::send(fd_.get(), buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

void FakeAgent::loop(bool booted) {
  auto out = [&](FrameType t, uint32_t s, const std::string& p) { send(static_cast<uint8_t>(t), s, p); };
  if (booted) out(FrameType::kHello, 0, json{{"version", 1}, {"agent", "fake"}, {"boot_id", "fake"}}.dump());
  protocol::FrameParser parser(FrameType::kResync);
  if (!booted) parser.force_resync();
  std::map<uint32_t, json> open;      // stream -> its OPEN request
  std::map<uint32_t, uint64_t> bytes;  // stream -> DATA bytes received
  std::deque<protocol::Frame> pending;  // read while frozen
  bool reporting = false;
  std::optional<bool> reported;
  int children = 0;  // processes left behind by execs
  auto report = [&](bool idle) {
    if (!reporting || reported == idle) return;
    reported = idle;
    out(FrameType::kIdle, 0, json{{"idle", idle}}.dump());
  };
  char buf[64 * 1024];
  while (!stop_) {
    pollfd pfds[2] = {{fd_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
    if (::poll(pfds, 2, -1) < 0) continue;
    if (stop_) break;
    if (pfds[1].revents) {
      uint64_t n;
      (void)!::read(wake_.get(), &n, sizeof n);
    }
    if (pfds[0].revents) {
      ssize_t r = ::read(fd_.get(), buf, sizeof buf);
      if (r <= 0) break;
      if (stalled_) continue;
      parser.feed(buf, static_cast<size_t>(r));
      while (auto f = parser.next()) {
        if (frozen_) ++frames_while_frozen_;
        pending.push_back(std::move(*f));
      }
    }
    if (frozen_) continue;  // a frozen sandbox runs nothing; its frames wait
    while (!pending.empty()) {
      std::optional<protocol::Frame> f = std::move(pending.front());
      pending.pop_front();
      switch (f->type) {
        case FrameType::kResync:
          open.clear();
          reporting = false;
          reported.reset();
          out(FrameType::kResyncAck, 0, f->payload);
          break;
        case FrameType::kIdentity:
          out(FrameType::kIdentityAck, 0, json{{"ok", true}}.dump());
          break;
        case FrameType::kPing:
          out(FrameType::kPong, 0, f->payload);
          break;
        case FrameType::kOpen: {
          json req = json::parse(f->payload, nullptr, false);
          const std::string op = req.is_object() ? req.value("op", "") : "";
          if (op == "idle_reports") {
            if (!reports_idle_) {
              out(FrameType::kEnd, f->stream, json{{"ok", false}, {"error", {{"code", "invalid_request"}, {"message", "unknown op \"idle_reports\""}}}}.dump());
              break;
            }
            out(FrameType::kEnd, f->stream, json{{"ok", true}}.dump());
            reporting = true;
            reported.reset();
          } else if (op == "exec") {
            report(false);  // a process runs now
            const json argv = req.value("argv", json::array());
            const std::string cmd = argv.is_array() && !argv.empty() && argv[0].is_string() ? argv[0].get<std::string>() : "";
            if (cmd == "background") ++children;
            if (cmd == "kill-background") children = 0;
            if (req.value("stdin", false)) {
              open[f->stream] = req;  // answered at EOF
              break;
            }
            out(FrameType::kStdout, f->stream, "ok\n");
            out(FrameType::kEnd, f->stream,
                json{{"ok", true}, {"exit_code", 0}, {"timed_out", false}, {"duration_ms", 1.0}}.dump());
          } else if (op == "file_write") {
            open[f->stream] = req;
            bytes[f->stream] = 0;
          } else if (op == "file_read") {
            out(FrameType::kHeader, f->stream, json{{"size", 3}}.dump());
            out(FrameType::kData, f->stream, "abc");
            out(FrameType::kEnd, f->stream, json{{"ok", true}}.dump());
          } else if (op == "list") {
            out(FrameType::kEnd, f->stream, json{{"ok", true}, {"entries", json::array()}}.dump());
          } else {
            out(FrameType::kEnd, f->stream, json{{"ok", true}}.dump());
          }
          break;
        }
        case FrameType::kData:
          bytes[f->stream] += f->payload.size();
          out(FrameType::kWindow, f->stream, protocol::encode_u32(static_cast<uint32_t>(f->payload.size())));
          break;
        case FrameType::kEof: {
          auto it = open.find(f->stream);
          if (it == open.end()) break;
          json end = it->second.value("op", "") == "exec"
                         ? json{{"ok", true}, {"exit_code", 0}, {"timed_out", false}, {"duration_ms", 1.0}}
                         : json{{"ok", true}, {"bytes", bytes[f->stream]}};
          out(FrameType::kEnd, f->stream, end.dump());
          open.erase(it);
          break;
        }
        case FrameType::kCancel:
          open.erase(f->stream);
          out(FrameType::kEnd, f->stream, json{{"ok", false}, {"error", {{"code", "internal"}, {"message", "cancelled"}}}}.dump());
          break;
        default:
          break;
      }
    }
    report(open.empty() && children == 0);
  }
}

}  // namespace b3os::fakes
