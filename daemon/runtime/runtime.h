#pragma once
// Runtime: the verbs the sandbox module needs from a container runtime, as an interface, so
// the lifecycle can be unit-tested with a fake (tests/fakes/fake_runtime.h). Runsc (gVisor)
// is the real one; Shims holds the daemon's end of each agent channel across restarts.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::runtime {

/// One container to create.
struct ContainerSpec {
  std::string id;          // the sandbox id; also the runsc container id
  std::string bundle_dir;  // config.json is written here
  std::string rootfs;      // the template's read-only root filesystem
  std::string agent_path;  // host path of b3os-agent, bind-mounted read-only at /.b3os/agent
  std::string hostname;
  int vcpu = 1;
  int memory_mib = 512;
  std::string log_path;    // where runsc's and the agent's stderr end up (read on failure)
  int log_fd = -1;         // the write end of the stderr pipe a shim drains into log_path;
                           // -1: log_path is opened and written directly
  int log_drain_fd = -1;   // the read end of that pipe, to see it drained before reading log_path
  /// Where the root overlay's writable layer lives: the directory make_disk returned (a
  /// filesystem of the sandbox's own, sized disk_gib). Empty: in the sandbox's memory.
  std::string disk_dir;
  /// False: no root overlay at all (runsc --overlay2=none): the sandbox writes `rootfs` itself,
  /// through its gofer. Only for a template build's sandbox, whose root is a copy on its own
  /// disk (docs/templates.md); such a sandbox is never checkpointed.
  bool root_overlay = true;
  /// The network namespace the sandbox joins (runsc --network=sandbox takes its eth0); empty:
  /// no network at all (--network=none).
  std::string netns_path;
  /// With a network: the host file bind-mounted read-only at /etc/resolv.conf.
  std::string resolv_conf;
};

/// What the runtime says of a container.
enum class ContainerState { kMissing, kCreated, kRunning, kPaused, kStopped };

/// A container's memory cgroup: its limit and the highest use it recorded.
struct MemoryUse {
  int64_t limit_bytes = 0;
  int64_t peak_bytes = 0;
  /// Processes the kernel killed for the limit (-1: not known). File data on disk is page
  /// cache the cgroup fills to its limit and reclaims, so a peak at the limit is no sign of
  /// an OOM; this count is.
  int64_t oom_kills = -1;
};

class Runtime {
 public:
  virtual ~Runtime() = default;

  /// Creates a container with `stdio_fd` as the agent's stdin and stdout (not started). On
  /// failure nothing is left: no container, no cgroup.
  virtual Result<void> create(const ContainerSpec& spec, int stdio_fd) = 0;
  /// Starts a created container (the agent begins to run).
  virtual Result<void> start(const std::string& id) = 0;
  /// Restores `image_dir` into a created (not started) container.
  virtual Result<void> restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir) = 0;
  /// Saves a running container's memory, root overlay and processes to `image_dir`; the
  /// container runs on.
  virtual Result<void> checkpoint(const std::string& id, const std::string& image_dir) = 0;
  /// Freezes every process of a container, and thaws it.
  virtual Result<void> pause(const std::string& id) = 0;
  virtual Result<void> resume(const std::string& id) = 0;
  /// Kills and deletes a container and its cgroup; a missing container is not an error.
  virtual Result<void> destroy(const std::string& id) = 0;
  virtual Result<ContainerState> state(const std::string& id) = 0;
  /// Ids of every container this runtime holds.
  virtual Result<std::vector<std::string>> list() = 0;

  /// Makes a disk for container `id`: a filesystem of `gib` GiB of its own, mounted, for its
  /// root overlay's writable layer (a write past it gets ENOSPC inside). Returns the directory
  /// to put in ContainerSpec::disk_dir. On failure nothing is left.
  virtual Result<std::string> make_disk(const std::string& id, int gib) = 0;
  /// Unmounts and deletes the disk of `id`; a missing disk is not an error. After destroy:
  /// the container's sentry holds its file until it is gone.
  virtual Result<void> remove_disk(const std::string& id) = 0;
  /// Ids of every disk there is (to sweep those no sandbox owns).
  virtual Result<std::vector<std::string>> list_disks() = 0;

  /// Freezes or thaws with the cgroup freezer alone (pool members wait frozen).
  virtual void set_frozen(const std::string& id, bool frozen) = 0;
  /// CPU quota of a running container: vcpu cores.
  virtual Result<void> limit_cpu(const std::string& id, int vcpu) = 0;
  /// The memory cgroup limit that `memory_mib` gets (memory_mib plus the runtime's overhead).
  virtual int64_t memory_limit_bytes(int memory_mib) const = 0;
  /// Sets a container's memory cgroup limit to `bytes`.
  virtual Result<void> set_memory_limit(const std::string& id, int64_t bytes) = 0;
  /// Sets the limit for `memory_mib`.
  Result<void> limit_memory(const std::string& id, int memory_mib) {
    return set_memory_limit(id, memory_limit_bytes(memory_mib));
  }
  /// Forgets the memory cgroup's recorded peak.
  virtual void reset_memory_peak(const std::string& id) = 0;
  /// The memory cgroup's limit and peak (zeros when unknown), to tell an OOM from a crash.
  virtual MemoryUse memory_use(const std::string& id) = 0;
  /// The pids cgroup's limit and how often a new process or thread was refused at it (-1 each
  /// when unknown), to tell a sandbox stopped at its process limit from a crash.
  struct PidsUse {
    int64_t limit = -1;
    int64_t refused = -1;
  };
  virtual PidsUse pids_use(const std::string& /*id*/) { return {}; }

  /// How a container's sandbox process ended, as a wait status, when this process reaped it
  /// (waiting up to `wait`); nullopt when unknown (not ours, not yet reaped, or still alive).
  virtual std::optional<int> exit_status(const std::string& /*id*/, std::chrono::milliseconds /*wait*/) {
    return std::nullopt;
  }
  /// The same for the container's gofer (the host process serving its root filesystem).
  virtual std::optional<int> gofer_exit_status(const std::string& /*id*/, std::chrono::milliseconds /*wait*/) {
    return std::nullopt;
  }

  /// Start-up housekeeping before any request: temporaries a crash left, and deciding once
  /// how the runtime is driven.
  virtual void prepare() {}
};

/// Holders of the daemon's end of each agent channel (b3os-shim processes), so the channel
/// outlives a restart of b3osd.
class Shims {
 public:
  virtual ~Shims() = default;
  /// Starts a holder of `fd` in `dir`; returns its pid. With `log_fd` (the read end of the
  /// sandbox's stderr pipe) it also drains that pipe into `dir`/sandbox.log, capped in size
  /// and rate.
  virtual Result<pid_t> start(const std::string& dir, int fd, int log_fd = -1) = 0;
  /// Stops the holder: through `watch` (its pidfd, from watch()) when valid, which also reaps
  /// it if it is this process's child; else `pid`, or when pid <= 0 the one recorded in or
  /// found serving `dir`, if its command line says it serves `dir`.
  virtual void stop(const std::string& dir, pid_t pid, int watch = -1) = 0;
  /// The pid recorded in `dir` (-1 when none).
  virtual pid_t recorded_pid(const std::string& dir) = 0;
  /// What a holder hands back: a copy of the channel's fd and, while the sandbox's stderr pipe
  /// has writers, of that pipe's read end (invalid when it has none, or the holder is older).
  struct Held {
    UniqueFd channel;
    UniqueFd log;
  };
  /// Takes copies of what the holder in `dir` holds (after a restart).
  virtual Result<Held> reclaim(const std::string& dir) = 0;
  /// A holder being watched: a pidfd, readable once it is gone, and its pid.
  struct Watched {
    UniqueFd fd;
    pid_t pid = -1;
  };
  /// Watches the holder `child`, just returned by start() (its pid is its own until this
  /// process reaps it), or when child <= 0 the one recorded in or found serving `dir` (checked
  /// by its command line once the pidfd is open). An invalid fd when there is none.
  virtual Watched watch(const std::string& dir, pid_t child = -1) = 0;
  /// Reaps a holder that is gone through its pidfd, if it was this process's child.
  virtual void reap(int watch, pid_t pid) = 0;
};

}  // namespace b3os::runtime
