#pragma once
// The deadline of a command started through envd (docs/e2b.md). E2B's SDK gives every
// commands.run a timeoutMs (60 s unless told; 0 for none) and sends it as Connect-Timeout-Ms;
// envd kills the command when it passes, whether or not anyone still follows it. b3osd does the
// same here: one thread, woken at the earliest deadline, sends SIGKILL to the process group
// of each command still running at its deadline.
//
// Bounded: a sandbox holds at most kPerSandbox deadlines; at that many, the ones of processes
// no longer running are dropped first (one list of the sandbox's processes), and a start that
// would still pass the bound is refused. A process's entry goes when its stream saw it end.

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <set>
#include <thread>

#include "common/result.h"
#include "daemon/sandbox/service.h"

namespace b3os::e2b {

class Deadlines {
 public:
  explicit Deadlines(sandbox::SandboxService& sandboxes);
  ~Deadlines();
  Deadlines(const Deadlines&) = delete;
  Deadlines& operator=(const Deadlines&) = delete;

  /// Room for one more deadline in this sandbox (ask before starting the process).
  Result<void> reserve(const sandbox::Principal& p, const std::string& sandbox_id);
  /// Kill process `proc` of the sandbox at steady time `at_ms`.
  void add(const sandbox::Principal& p, const std::string& sandbox_id, const std::string& proc, int64_t at_ms);
  /// The process ended (its stream saw it): nothing to kill.
  void remove(const std::string& sandbox_id, const std::string& proc);

  static constexpr size_t kPerSandbox = 1024;

 private:
  struct Entry {
    sandbox::Principal principal;
    std::string sandbox_id, proc;
  };
  void run();
  size_t count_locked(const std::string& sandbox_id) const;

  sandbox::SandboxService& sandboxes_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::multimap<int64_t, Entry> by_time_;
  std::map<std::string, size_t> per_sandbox_;
  std::thread thread_;
};

}  // namespace b3os::e2b
