#pragma once
// Freezer: idle sandboxes cost no CPU. A running sandbox whose agent reported it idle (nothing
// but the agent alive, no stream or relay connection open: docs/agent-protocol.md) and which
// no operation of the daemon holds awake is frozen with the cgroup freezer after a grace
// (--idle-freeze-ms), as pool members wait. Every operation that sends a frame to the agent or
// runs a runtime verb on the container holds it awake (Freezer::awake) for its whole length:
// that thaws it first if it was frozen, and keeps it thawed until the last holder is gone.
// The API still shows the sandbox `running`; this is not a state of the state machine.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "daemon/runtime/runtime.h"
#include "daemon/sandbox/live.h"
#include "daemon/sandbox/registry.h"

namespace b3os::sandbox {

/// Holds a sandbox awake (thawed, and not frozen again) while it lives.
class Awake {
 public:
  Awake() = default;
  explicit Awake(LiveSandbox* s) : s_(s) {}
  Awake(Awake&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Awake& operator=(Awake&& o) noexcept;
  Awake(const Awake&) = delete;
  Awake& operator=(const Awake&) = delete;
  ~Awake() { release(); }
  void release();
  explicit operator bool() const { return s_ != nullptr; }

 private:
  LiveSandbox* s_ = nullptr;
};

class Freezer {
 public:
  /// `grace_ms` of idleness before a freeze; 0 never freezes.
  Freezer(runtime::Runtime& rt, Registry& registry, int grace_ms) : rt_(rt), registry_(registry), grace_ms_(grace_ms) {}
  ~Freezer() { stop(); }
  void start();
  void stop();

  /// The one hook for everything that reaches a sandbox (exec, files, fork, snapshot, pause,
  /// resume, delete, the reaper's stop or pause, ping; port requests when they come): thaws
  /// it if the freezer froze it, and keeps it thawed until the returned guard goes.
  /// `changes`: the operation may change the sandbox (LiveSandbox::changes); fork and
  /// snapshot pass false.
  Awake awake(LiveSandbox& s, bool changes = true);
  /// Holds a sandbox that nothing holds awake now (an empty guard otherwise), and says what
  /// its change count was when it was taken: fork-ahead's checkpoint of a quiet sandbox.
  Awake hold_quiet(LiveSandbox& s, uint64_t& changes);
  /// An IDLE report from the sandbox's agent (on its channel's reader thread).
  static void on_report(LiveSandbox& s, bool idle, bool held);
  /// One pass: freezes every running sandbox idle for the grace at `now_ms` (steady_ms()).
  void sweep(int64_t now_ms);
  int grace_ms() const { return grace_ms_; }

 private:
  runtime::Runtime& rt_;
  Registry& registry_;
  const int grace_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace b3os::sandbox
