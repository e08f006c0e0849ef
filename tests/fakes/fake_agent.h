#pragma once
// FakeAgent: a stand-in for b3os-agent on the other end of a sandbox's channel, speaking the
// real wire format (protocol/frame.h) from a thread: HELLO on boot, RESYNC_ACK after a restore,
// IDENTITY_ACK, PONG, and short answers to exec and file streams. For unit tests of the
// sandbox module with tests/fakes/fake_runtime.h.

#include <atomic>
#include <string>
#include <thread>

#include "common/unique_fd.h"

namespace b3os::fakes {

class FakeAgent {
 public:
  /// Starts serving on `fd` (the agent's end). `booted`: sends HELLO first; otherwise it waits
  /// for the daemon's RESYNC, as a restored agent does.
  FakeAgent(UniqueFd fd, bool booted);
  ~FakeAgent();
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  /// Stops answering and closes its end: the daemon sees the agent die.
  void crash();
  /// Stops answering but keeps its end open, as a stopped (SIGSTOP) or hung agent does.
  void stall() { stalled_ = true; }

 private:
  void loop(bool booted);
  void send(uint8_t type, uint32_t stream, const std::string& payload);

  UniqueFd fd_;
  UniqueFd wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> stalled_{false};
  std::thread thread_;
};

}  // namespace b3os::fakes
