#include "daemon/sandbox/reaper.h"

#include <malloc.h>

#include <algorithm>
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
  // Ended sandboxes' records past their time (a second after start, then every minute); roots
  // fetched from the object store that nothing uses any more, and the object store's own (a
  // cluster's nodes; nothing to do on a single node), every collect_every_ms.
  // Each timer counts from the end of its last pass (a slow object store never makes its passes
  // run back to back), on the steady clock (a clock set back stops neither).
  collector_ = std::thread([this] {
    std::unique_lock lk(mu_);
    const int64_t every = lifecycle_.collect_every_ms();
    int64_t collected = steady_ms(), forgot = collected - 60'000 + 1'000;  // forgetting first after 1 s
    while (!stopping_) {
      const int64_t now = steady_ms();
      cv_.wait_for(lk, std::chrono::milliseconds(
                           std::max<int64_t>(100, std::min(forgot + 60'000 - now, collected + every - now))));
      if (stopping_) break;
      lk.unlock();
      if (steady_ms() - forgot >= 60'000) {
        lifecycle_.forget_ended();
        // Memory the load's threads freed goes back to the host (glibc keeps a freed arena's
        // pages until asked): after a burst of streams b3osd kept 742 MB.
        ::malloc_trim(0);
        forgot = steady_ms();
      }
      if (steady_ms() - collected >= every) {
        lifecycle_.collect_rootfs_cache();
        lifecycle_.collect_object_store();
        collected = steady_ms();
      }
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
  if (collector_.joinable()) collector_.join();
}

// An agent that sends nothing for quiet_ is sent a PING; one that then answers nothing for
// unanswered_ (stopped with SIGSTOP, or hung) fails the sandbox, so no request waits on it.
bool Reaper::alive(const std::shared_ptr<LiveSandbox>& s) {
  if (!s->channel) return true;
  std::chrono::milliseconds unanswered{0};
  {
    // Under freeze_mu, so the freezer cannot freeze it between the look and the PING (the
    // PING's write gives up after 50 ms, so the lock is held no longer).
    std::lock_guard lk(s->freeze_mu);
    if (s->idle_frozen) {  // frozen idle on purpose: it cannot answer until thawed
      s->channel->reset_probe();
      return true;
    }
    unanswered = s->channel->probe(quiet_);
  }
  if (unanswered < unanswered_) return true;
  spdlog::warn("sandbox {}: the agent has not answered for {} ms", s->id, unanswered.count());
  if (lifecycle_.finish(s, Transition::kFail, store::StopReason::kFailed,
                        "the agent (PID 1) stopped answering for " + std::to_string(unanswered.count() / 1000) +
                            " s (stopped with SIGSTOP, hung, or starved by the sandbox's own processes, as by a fork bomb), so the sandbox was stopped"))
    count_failure("agent_unresponsive");
  return false;
}

void Reaper::sweep(int64_t now_ms) {
  for (auto& s : registry_.all()) {
    lifecycle_.keep_shim(*s);  // in every state: the next restart of b3osd needs it
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
    // pause, resume or checkpoint is in use; nor one being moved to another node (its
    // requests are held off, which is no inactivity).
    if (state != State::kRunning || s->moving) {
      if (s->channel) s->channel->reset_probe();  // it cannot answer until it runs again
      continue;
    }
    if (!alive(s)) continue;
    if (s->agent_held.load()) {
      // In use by a background process or a terminal: its activity, written through at most
      // every 30 s (or half its timeout), so that timeout_s counts from when they end.
      if (now_ms >= s->last_activity_ms.load() + std::min<int64_t>(30'000, timeout_ms / 2)) lifecycle_.touch(*s);
      continue;
    }
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
