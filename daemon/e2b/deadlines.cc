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

Result<void> Deadlines::reserve(const sandbox::Principal& p, const std::string& sandbox_id) {
  {
    std::lock_guard lk(mu_);
    const auto it = per_sandbox_.find(sandbox_id);
    if (it == per_sandbox_.end() || it->second < kPerSandbox) return {};
  }
  // At the bound: drop the deadlines of processes that ended without anyone following them.
  auto listed = sandboxes_.exec().list_processes(p, sandbox_id);
  if (!listed) return fail(listed.error());
  std::set<std::string> running;
  for (const auto& proc : listed->value("data", nlohmann::json::array()))
    if (proc.value("status", "") == "running") {
      running.insert(proc.value("id", ""));
      running.insert(std::to_string(proc.value("pid", 0)));
    }
  std::lock_guard lk(mu_);
  for (auto it = by_time_.begin(); it != by_time_.end();) {
    if (it->second.sandbox_id == sandbox_id && !running.count(it->second.proc)) {
      if (--per_sandbox_[sandbox_id] == 0) per_sandbox_.erase(sandbox_id);
      it = by_time_.erase(it);
    } else {
      ++it;
    }
  }
  const auto it = per_sandbox_.find(sandbox_id);
  if (it != per_sandbox_.end() && it->second >= kPerSandbox)
    return fail(ErrorCode::kQuotaExceeded, "this sandbox has " + std::to_string(kPerSandbox) +
                                               " commands running with a deadline; wait for some to end");
  return {};
}

void Deadlines::add(const sandbox::Principal& p, const std::string& sandbox_id, const std::string& proc, int64_t at_ms) {
  {
    std::lock_guard lk(mu_);
    by_time_.emplace(at_ms, Entry{p, sandbox_id, proc});
    ++per_sandbox_[sandbox_id];
  }
  cv_.notify_all();
}

void Deadlines::remove(const std::string& sandbox_id, const std::string& proc) {
  std::lock_guard lk(mu_);
  // Linear in the node's deadlines (a few thousand at most): called once per command's end.
  for (auto it = by_time_.begin(); it != by_time_.end(); ++it)
    if (it->second.sandbox_id == sandbox_id && it->second.proc == proc) {
      if (--per_sandbox_[sandbox_id] == 0) per_sandbox_.erase(sandbox_id);
      by_time_.erase(it);
      return;
    }
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
    Entry e = std::move(it->second);
    by_time_.erase(it);
    if (--per_sandbox_[e.sandbox_id] == 0) per_sandbox_.erase(e.sandbox_id);
    lk.unlock();
    // The whole group, as E2B's envd ends a command's context: bash -l -c and what it started.
    // A process that already ended, or a sandbox that is gone, is an error nobody needs.
    if (auto r = sandboxes_.exec().signal_process(e.principal, e.sandbox_id, e.proc, SIGKILL, true); r)
      spdlog::info("e2b: sandbox {} process {} killed at its deadline (Connect-Timeout-Ms)", e.sandbox_id, e.proc);
    lk.lock();
  }
}

}  // namespace b3os::e2b
