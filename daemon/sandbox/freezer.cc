#include "daemon/sandbox/freezer.h"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "daemon/sandbox/state.h"

namespace b3os::sandbox {

using namespace std::chrono_literals;

Awake& Awake::operator=(Awake&& o) noexcept {
  if (this != &o) {
    release();
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

void Awake::release() {
  if (!s_) return;
  std::lock_guard lk(s_->freeze_mu);
  --s_->awake;
  s_->quiet_since_ms = steady_ms();
  s_ = nullptr;
}

Awake Freezer::awake(LiveSandbox& s, bool changes) {
  std::lock_guard lk(s.freeze_mu);
  ++s.awake;
  if (changes) ++s.changes;
  if (s.idle_frozen) {
    // Under freeze_mu: a freeze in progress has finished, and none starts while awake > 0.
    rt_.set_frozen(s.id, false);
    s.idle_frozen = false;
    ++s.thaws;
  }
  return Awake(&s);
}

Awake Freezer::hold_quiet(LiveSandbox& s, uint64_t& changes) {
  std::lock_guard lk(s.freeze_mu);
  // A busy report sets agent_idle under this lock after its count: either it came before
  // (not idle now) or it moves the count after `changes` was read.
  if (s.awake > 0 || s.agent_idle.load() != 1) return Awake();
  ++s.awake;
  changes = s.changes.load();
  if (s.idle_frozen) {
    rt_.set_frozen(s.id, false);
    s.idle_frozen = false;
    ++s.thaws;
  }
  return Awake(&s);
}

void Freezer::on_report(LiveSandbox& s, bool idle, bool held) {
  if (!idle) {
    // Something but the agent runs in it: whatever a spare of it holds may be stale.
    std::lock_guard lk(s.freeze_mu);
    ++s.changes;
    s.agent_idle = 0;
  }
  if (idle && s.agent_idle.load() != 1) s.agent_idle_since_ms = steady_ms();
  s.agent_idle = idle ? 1 : 0;
  s.agent_held = held;
}

void Freezer::sweep(int64_t now_ms) {
  if (grace_ms_ <= 0) return;
  for (auto& s : registry_.all()) {
    // Cheap checks first, without a lock: most sandboxes are busy or already frozen.
    if (s->agent_idle.load() != 1 || s->active_ops.load() > 0) continue;
    std::lock_guard fl(s->freeze_mu);
    if (s->idle_frozen || s->awake > 0 || s->agent_idle.load() != 1) continue;
    const int64_t since = std::max(s->agent_idle_since_ms.load(), s->quiet_since_ms);
    if (now_ms - since < grace_ms_) continue;
    {
      // Only a running sandbox: a paused one is frozen already (and resume thaws it), one
      // pausing, resuming or being checkpointed is held awake, an ended one is going.
      std::lock_guard lk(s->mu);
      if (s->rec.state != State::kRunning) continue;
    }
    if (s->active_ops.load() > 0) continue;
    rt_.set_frozen(s->id, true);
    s->idle_frozen = true;
    ++s->freezes;
    spdlog::debug("sandbox {}: idle, frozen", s->id);
  }
}

void Freezer::start() {
  if (grace_ms_ <= 0) return;
  thread_ = std::thread([this] {
    // A quarter of the grace (at least 50 ms, at most 500 ms) between passes: a sandbox is
    // frozen between grace and 1.25 x grace after it became idle.
    const auto tick = std::chrono::milliseconds(std::clamp(grace_ms_ / 4, 50, 500));
    std::unique_lock lk(mu_);
    while (!stopping_) {
      cv_.wait_for(lk, tick);
      if (stopping_) break;
      lk.unlock();
      sweep(steady_ms());
      lk.lock();
    }
  });
}

void Freezer::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace b3os::sandbox
