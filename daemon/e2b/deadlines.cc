#include "daemon/e2b/deadlines.h"

#include <csignal>

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace b3os::e2b {

Deadlines::Deadlines(sandbox::SandboxService& sandboxes) : sandboxes_(sandboxes), thread_([this] { run(); }) {}

Deadlines::~Deadlines() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Deadlines::erase_locked(ByTime::iterator it) {
  auto& procs = by_sandbox_[it->second.sandbox_id];
  procs.erase(it->second.proc);
  if (procs.empty()) by_sandbox_.erase(it->second.sandbox_id);
  by_time_.erase(it);
}

void Deadlines::drop_sandbox_locked(const std::string& sandbox_id) {
  auto s = by_sandbox_.find(sandbox_id);
  if (s == by_sandbox_.end()) return;
  for (auto& [proc, it] : s->second) by_time_.erase(it);
  by_sandbox_.erase(s);
}

Result<void> Deadlines::reserve(const sandbox::Principal& p, const std::string& sandbox_id) {
  {
    std::lock_guard lk(mu_);
    if (by_time_.size() >= kPerNode)
      return fail(ErrorCode::kCapacityUnavailable, "this node has " + std::to_string(kPerNode) +
                                                       " commands running with a deadline; retry shortly");
    const auto it = by_sandbox_.find(sandbox_id);
    if (it == by_sandbox_.end() || it->second.size() < kPerSandbox) return {};
  }
  // At the bound: drop the deadlines of processes that ended without anyone following them.
  auto listed = sandboxes_.exec().list_processes(p, sandbox_id);
  if (!listed) return fail(listed.error());
  std::set<std::string> running;
  for (const auto& proc : listed->value("data", nlohmann::json::array()))
    if (proc.value("status", "") == "running") running.insert(proc.value("id", ""));
  std::lock_guard lk(mu_);
  if (auto s = by_sandbox_.find(sandbox_id); s != by_sandbox_.end()) {
    std::vector<ByTime::iterator> ended;
    for (auto& [proc, it] : s->second)
      if (!running.count(proc)) ended.push_back(it);
    for (auto it : ended) erase_locked(it);
  }
  const auto it = by_sandbox_.find(sandbox_id);
  if (it != by_sandbox_.end() && it->second.size() >= kPerSandbox)
    return fail(ErrorCode::kQuotaExceeded, "this sandbox has " + std::to_string(kPerSandbox) +
                                               " commands running with a deadline; wait for some to end");
  return {};
}

void Deadlines::add(const sandbox::Principal& p, const std::string& sandbox_id, const std::string& proc, int64_t at_ms) {
  {
    std::lock_guard lk(mu_);
    auto& procs = by_sandbox_[sandbox_id];
    if (auto old = procs.find(proc); old != procs.end()) by_time_.erase(old->second);
    procs[proc] = by_time_.emplace(at_ms, Entry{p, sandbox_id, proc});
  }
  cv_.notify_all();
}

void Deadlines::remove(const std::string& sandbox_id, const std::string& proc) {
  std::lock_guard lk(mu_);
  auto s = by_sandbox_.find(sandbox_id);
  if (s == by_sandbox_.end()) return;
  if (auto it = s->second.find(proc); it != s->second.end()) erase_locked(it->second);
}

void Deadlines::run() {
  std::unique_lock lk(mu_);
  while (!stopping_) {
    if (by_time_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const int64_t now = steady_ms();
    auto it = by_time_.begin();
    if (it->first > now) {
      cv_.wait_for(lk, std::chrono::milliseconds(it->first - now));
      continue;
    }
    const Entry e = it->second;
    erase_locked(it);
    lk.unlock();
    // The whole group, as E2B's envd ends a command's context: bash -l -c and what it started.
    // By the agent's process id ("proc_N"), which is never reused (a pid may be).
    auto r = sandboxes_.exec().signal_process(e.principal, e.sandbox_id, e.proc, SIGKILL, true);
    lk.lock();
    if (r) {
      spdlog::info("e2b: sandbox {} process {} killed at its deadline (Connect-Timeout-Ms)", e.sandbox_id, e.proc);
    } else if (r.error().code == ErrorCode::kSandboxNotFound || r.error().code == ErrorCode::kProcessNotFound) {
      // The sandbox ended (its other deadlines with it), or the process was forgotten.
      if (r.error().code == ErrorCode::kSandboxNotFound) drop_sandbox_locked(e.sandbox_id);
    } else if (r.error().code == ErrorCode::kSandboxNotRunning || r.error().code == ErrorCode::kConflict) {
      // Paused, or being saved or moved: the command still must not outlive its deadline
      // once the sandbox runs again; a sandbox that has ended answers not found next time.
      if (by_time_.size() < kPerNode) {
        auto& procs = by_sandbox_[e.sandbox_id];
        if (!procs.count(e.proc)) procs[e.proc] = by_time_.emplace(steady_ms() + kRetryMs, e);
      }
    } else {
      // The sandbox's agent did not answer: its other deadlines due now are not tried one by
      // one (each could wait as long), they are tried again later.
      spdlog::warn("e2b: sandbox {} process {}: the kill at its deadline failed: {}", e.sandbox_id, e.proc,
                   r.error().message);
      if (auto s = by_sandbox_.find(e.sandbox_id); s != by_sandbox_.end()) {
        const int64_t later = steady_ms() + kRetryMs;
        std::vector<std::string> due;
        for (auto& [proc, at] : s->second)
          if (at->first <= later) due.push_back(proc);
        for (const auto& proc : due) {
          auto at = s->second[proc];
          Entry moved = at->second;
          by_time_.erase(at);
          s->second[proc] = by_time_.emplace(later, std::move(moved));
        }
      }
    }
  }
}

}  // namespace b3os::e2b
