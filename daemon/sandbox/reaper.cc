#include "daemon/sandbox/reaper.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace b3os::sandbox {

using namespace std::chrono_literals;

void Reaper::start() {
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stopping_) {
      cv_.wait_for(lk, 500ms);
      if (stopping_) break;
      lk.unlock();
      sweep(now_unix_ms());
      lk.lock();
    }
  });
}

void Reaper::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reaper::sweep(int64_t now_ms) {
  for (auto& s : registry_.all()) {
    State state;
    int64_t timeout_ms;
    bool pause;
    {
      std::lock_guard lk(s->mu);
      state = s->rec.state;
      timeout_ms = int64_t(s->rec.timeout_s) * 1000;
      pause = s->rec.on_idle == "pause";
    }
    // Only a running sandbox expires: a paused one does not, and one in the middle of a
    // pause, resume or checkpoint is in use.
    if (state != State::kRunning) continue;
    if (s->active_ops.load() > 0 || now_ms < s->last_activity_ms.load() + timeout_ms) continue;
    if (pause) {
      if (auto r = lifecycle_.pause_live(*s, "idle"); !r)
        spdlog::warn("sandbox {}: idle pause: {}", s->id, r.error().message);
      continue;
    }
    lifecycle_.finish(s, Transition::kStop, store::StopReason::kTimeout,
                      "no API activity for timeout_s (" + std::to_string(timeout_ms / 1000) + " s)");
  }
}

}  // namespace b3os::sandbox
