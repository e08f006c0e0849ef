#pragma once
// The deadline of a command started through envd (docs/e2b.md). E2B's SDK gives every
// commands.run a timeoutMs (60 s unless told; 0 for none) and sends it as Connect-Timeout-Ms;
// envd kills the command when it passes, whether or not anyone still follows it. b3osd does the
// same here: one thread, woken at the earliest deadline, sends SIGKILL to the process group
// of each command still running at its deadline.
//
// Bounded: a sandbox holds at most kPerSandbox deadlines; at that many, the ones of processes
// no longer running are dropped first (one list of the sandbox's processes), and a start that
// would still pass the bound is refused; the node holds at most kPerNode (503 past that), and
// a deadline is at most a day away (the caller's bound). A process's entry goes when its
// stream saw it end, a sandbox's when a kill finds the sandbox gone. Entries name the agent's
// process id ("proc_N"), never reused. A kill that finds the sandbox paused or busy is tried
// again every kRetryMs; one its agent does not answer moves the sandbox's other due kills
// kRetryMs later rather than waiting on each in turn.

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
  static constexpr size_t kPerNode = 65'536;
  static constexpr int64_t kRetryMs = 5'000;

 private:
  struct Entry {
    sandbox::Principal principal;
    std::string sandbox_id, proc;
  };
  using ByTime = std::multimap<int64_t, Entry>;
  void run();
  void erase_locked(ByTime::iterator it);
  void drop_sandbox_locked(const std::string& sandbox_id);

  sandbox::SandboxService& sandboxes_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  ByTime by_time_;
  std::map<std::string, std::map<std::string, ByTime::iterator>> by_sandbox_;  // sandbox -> proc -> entry
  std::thread thread_;
};

}  // namespace b3os::e2b
