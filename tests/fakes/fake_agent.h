#pragma once
// FakeAgent: a stand-in for b3os-agent on the other end of a sandbox's channel, speaking the
// real wire format (protocol/frame.h) from a thread: HELLO on boot, RESYNC_ACK after a restore,
// IDENTITY_ACK, PONG, and short answers to exec and file streams. For unit tests of the
// sandbox module with tests/fakes/fake_runtime.h.
//
// Idle reports as the real agent sends them (unless made an old agent that does not know
// them): after OPEN {"op":"idle_reports"}, IDLE {"idle":bool} whenever it changes. An exec
// of argv ["background"] leaves a process behind (never idle), ["kill-background"] ends it.
// While frozen (FakeRuntime::set_frozen, pause) it answers nothing, and counts every frame
// that reaches it: the daemon must thaw a sandbox before it sends a frame.

#include <atomic>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace b3os::fakes {

class FakeAgent {
 public:
  /// Starts serving on `fd` (the agent's end). `booted`: sends HELLO first; otherwise it waits
  /// for the daemon's RESYNC, as a restored agent does.
  /// `reports_idle`: false for an agent older than idle reports (it answers the op with an
  /// unknown-op error, as the real old agent does).
  FakeAgent(UniqueFd fd, bool booted, bool reports_idle = true);
  ~FakeAgent();
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  /// Stops answering and closes its end: the daemon sees the agent die.
  void crash();
  /// Stops answering but keeps its end open, as a stopped (SIGSTOP) or hung agent does.
  void stall() { stalled_ = true; }
  /// Frozen: frames wait (and are counted) until thawed.
  void set_frozen(bool frozen);
  /// Frames that reached it while frozen.
  int frames_while_frozen() const { return frames_while_frozen_.load(); }

 private:
  void loop(bool booted);
  void send(uint8_t type, uint32_t stream, const std::string& payload);

  UniqueFd fd_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stalled_{false};
  std::atomic<bool> frozen_{false};
  std::atomic<int> frames_while_frozen_{0};
  const bool reports_idle_;
  std::thread thread_;
};

}  // namespace b3os::fakes
