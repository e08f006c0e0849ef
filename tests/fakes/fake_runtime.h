#pragma once
// FakeRuntime and FakeShims: in-memory stand-ins for runsc and b3os-shim, for unit tests of
// the sandbox module. Containers are entries in a map; a started or restored one gets a
// FakeAgent on its channel. Any verb can be made to fail or to hang, for one container or all,
// so a test can break every step of every operation and see what is left behind.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "daemon/runtime/runtime.h"
#include "tests/fakes/fake_agent.h"

namespace b3os::fakes {

class FakeRuntime : public runtime::Runtime {
 public:
  struct Container {
    runtime::ContainerState state = runtime::ContainerState::kCreated;
    UniqueFd agent_end;  // until started
    std::unique_ptr<FakeAgent> agent;
    bool frozen = false;
    int vcpu = 0;
    int64_t memory_limit = 0;
    std::string disk_dir;  // what create was given
  };

  /// The next `times` calls of `verb` (for container `id`, or any when empty) fail.
  void fail(const std::string& verb, int times = 1, const std::string& id = "");
  /// Calls of `verb` (for `id`, or any) wait `d` before doing their work, until cleared.
  void hang(const std::string& verb, std::chrono::milliseconds d, const std::string& id = "");
  void clear_faults();
  /// The agent of `id` dies (its channel reaches EOF).
  void crash(const std::string& id);
  /// The container's agent stops answering without dying.
  void stall(const std::string& id);
  /// Agents started or restored from now on know idle reports (true, the default) or are
  /// older agents that do not (as in a checkpoint image made by an older b3os).
  void set_agents_report_idle(bool yes) { agents_report_idle_ = yes; }
  /// Whether `id`'s cgroup is frozen (by set_frozen or pause).
  bool frozen(const std::string& id) const;
  /// Frames that reached a frozen agent, and runtime verbs that needed a running sandbox but
  /// found it frozen (each a bug: it would hang on a real one), over all containers.
  int frozen_violations() const;

  std::set<std::string> ids() const;
  /// Ids of the disks made and not removed, and their sizes.
  std::map<std::string, int> disks() const;
  /// The disk_dir container `id` was created with ("" when none or no such container).
  std::string disk_dir_of(const std::string& id) const;
  std::optional<runtime::ContainerState> state_of(const std::string& id) const;
  int calls(const std::string& verb) const;

  Result<void> create(const runtime::ContainerSpec& spec, int stdio_fd) override;
  Result<void> start(const std::string& id) override;
  Result<void> restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir) override;
  Result<void> checkpoint(const std::string& id, const std::string& image_dir) override;
  Result<void> pause(const std::string& id) override;
  Result<void> resume(const std::string& id) override;
  Result<void> destroy(const std::string& id) override;
  Result<runtime::ContainerState> state(const std::string& id) override;
  Result<std::vector<std::string>> list() override;
  void set_frozen(const std::string& id, bool frozen) override;
  Result<void> limit_cpu(const std::string& id, int vcpu) override;
  int64_t memory_limit_bytes(int memory_mib) const override { return int64_t(memory_mib + 256) << 20; }
  Result<void> set_memory_limit(const std::string& id, int64_t bytes) override;
  void reset_memory_peak(const std::string&) override {}
  runtime::MemoryUse memory_use(const std::string&) override { return {}; }
  Result<std::string> make_disk(const std::string& id, int gib) override;
  Result<void> remove_disk(const std::string& id) override;
  Result<std::vector<std::string>> list_disks() override;
  /// Puts a disk for `id` as a crash would have left it (no container, no record).
  void leave_disk(const std::string& id, int gib);

 private:
  /// Counts the call, waits out a hang, and fails when a fault says so.
  Result<void> enter(const std::string& verb, const std::string& id);

  mutable std::mutex mu_;
  std::map<std::string, Container> containers_;
  std::map<std::string, int> disks_;
  struct Fault {
    int times = 0;
    std::chrono::milliseconds hang{0};
  };
  std::map<std::pair<std::string, std::string>, Fault> faults_;  // (verb, id or "")
  std::map<std::string, int> calls_;
  std::atomic<bool> agents_report_idle_{true};
  int verbs_while_frozen_ = 0;
  int frames_while_frozen_gone_ = 0;  // counted by agents since destroyed
};

/// Holds a copy of each daemon end, as b3os-shim does, and gives it back on reclaim.
class FakeShims : public runtime::Shims {
 public:
  Result<pid_t> start(const std::string& dir, int fd, int log_fd = -1) override;
  void stop(const std::string& dir, pid_t pid, int watch = -1) override;
  pid_t recorded_pid(const std::string& dir) override;
  Result<Held> reclaim(const std::string& dir) override;
  /// An eventfd standing for the holder's pidfd: kill() makes it readable.
  Watched watch(const std::string& dir, pid_t child = -1) override;
  void reap(int /*watch*/, pid_t /*pid*/) override {}
  /// Directories with a running holder.
  std::set<std::string> held() const;
  void fail_next_start() { fail_start_ = true; }
  /// The holder of `dir` dies (as with a SIGKILL): what it held is gone, its watch readable.
  void kill(const std::string& dir);
  /// How many holders were started; how many of them were given a log pipe.
  int started() const;
  int started_with_log() const;

 private:
  struct Holder {
    pid_t pid;
    UniqueFd channel;
    UniqueFd log;
    UniqueFd gone;  // eventfd
  };
  mutable std::mutex mu_;
  std::map<std::string, Holder> held_;
  int started_ = 0;
  int started_with_log_ = 0;
  pid_t next_pid_ = 100000;
  bool fail_start_ = false;
};

}  // namespace b3os::fakes
