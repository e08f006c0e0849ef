#pragma once
// The gVisor driver: OCI bundles and the runsc verbs b3osd uses.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "daemon/runtime/disk.h"
#include "daemon/runtime/runtime.h"

namespace b3os::runtime {

class ControlConnection;

/// Where runsc and its state live, and the flags every sandbox gets.
struct RuntimeConfig {
  std::string runsc = "runsc";
  std::string root_dir = "/run/b3os/runsc";  // runsc --root: its own container state
  std::string platform = "systrap";
  /// Host memory the runtime itself needs beyond memory_mib (sentry, gofer, page tables).
  int memory_overhead_mib = 256;
  /// Host memory no sandbox may take: the parent cgroup of every sandbox is bounded to the
  /// host's memory less this (--memory-reserve-mib), so sandboxes that together use more are
  /// reclaimed and OOM-killed among themselves, never b3osd or the host.
  int memory_reserve_mib = 1024;
  bool debug = false;
  /// How start, checkpoint and restore reach the sandbox: "cli" runs the runsc CLI, "direct"
  /// calls the sandbox's control socket itself (control.h), "auto" is direct for the runsc
  /// versions whose messages are known and the CLI otherwise.
  std::string control = "auto";
  /// Where the root overlay's writable layer lives: "disk" (a disk of disk_gib per sandbox,
  /// disk.h) or "memory" (the sandbox's memory, as before; disk_gib is not enforced).
  std::string root_overlay = "disk";
  /// The per-sandbox disks (DATA_DIR/disks).
  DiskConfig disks;
};

class Runsc : public Runtime {
 public:
  explicit Runsc(RuntimeConfig cfg) : cfg_(std::move(cfg)) {
    bound_all_sandboxes_pids();
    bound_all_sandboxes_memory(cfg_.memory_reserve_mib);
  }

  /// Writes the OCI config and runs `runsc create` with `stdio_fd` as the agent's stdin and
  /// stdout. On failure nothing is left: no container, no cgroup.
  Result<void> create(const ContainerSpec& spec, int stdio_fd) override;
  /// Applies the CPU limit (vcpu x 100 ms per 100 ms) to a running container's cgroup. Done
  /// after boot rather than in the OCI config: a 1-vCPU quota during boot throttles gVisor's
  /// own start-up by about 100 ms.
  Result<void> limit_cpu(const std::string& id, int vcpu) override;
  /// The cgroup limit for memory_mib: memory_mib plus the runtime's overhead.
  int64_t memory_limit_bytes(int memory_mib) const override;
  PidsUse pids_use(const std::string& id) override;
  /// The parent cgroup of every sandbox (/b3os) gets pids.max = the host's pid_max less a
  /// quarter, so that sandboxes each within their own bound still leave b3osd, runsc and the
  /// host processes ids whatever their number. Best effort (logged when it cannot be set).
  static void bound_all_sandboxes_pids();
  /// The parent cgroup of every sandbox gets the host's memory less `reserve_mib` as its limit
  /// (memory.max, or v1's memory.limit_in_bytes). Best effort, logged.
  static void bound_all_sandboxes_memory(int64_t reserve_mib);
  /// Sets a container's memory cgroup limit to `bytes`.
  Result<void> set_memory_limit(const std::string& id, int64_t bytes) override;
  /// Forgets the memory cgroup's recorded peak (cgroup v1 max_usage_in_bytes).
  void reset_memory_peak(const std::string& id) override;
  MemoryUse memory_use(const std::string& id) override;
  /// Saves a running container's memory, root overlay and processes to `image_dir`; the
  /// container runs on (`--leave-running`).
  Result<void> checkpoint(const std::string& id, const std::string& image_dir) override;
  /// Restores `image_dir` into a created (not started) container.
  Result<void> restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir) override;
  /// Freezes or thaws a container's processes with the cgroup freezer alone (a file write):
  /// pooled containers wait frozen so they cost no CPU, and thaw in microseconds.
  void set_frozen(const std::string& id, bool frozen) override;
  /// Freezes every process of a container (cgroup freezer), and thaws it.
  Result<void> pause(const std::string& id) override;
  Result<void> resume(const std::string& id) override;
  /// Starts a created container (the agent begins to run).
  Result<void> start(const std::string& id) override;
  /// Kills and deletes a container and its cgroup; a missing container is not an error.
  Result<void> destroy(const std::string& id) override;
  /// The container's state.
  Result<ContainerState> state(const std::string& id) override;
  /// Ids of every container under our root.
  Result<std::vector<std::string>> list() override;
  /// Sweeps state temporaries and decides how runsc is driven (runsc --version, once).
  std::optional<int> exit_status(const std::string& id, std::chrono::milliseconds wait) override;
  std::optional<int> gofer_exit_status(const std::string& id, std::chrono::milliseconds wait) override;
  void prepare() override;
  /// A disk of `gib` GiB for `id` under cfg.disks.dir (disk.h).
  Result<std::string> make_disk(const std::string& id, int gib) override;
  Result<void> remove_disk(const std::string& id) override;
  Result<std::vector<std::string>> list_disks() override;

  const RuntimeConfig& config() const { return cfg_; }
  /// Whether start, checkpoint and restore go to the control socket (decided once, from
  /// `control` and `runsc --version`).
  bool direct_control();
  /// Removes state-file temporaries a crash left mid-rewrite (runsc never removes them: its
  /// own files end in .state and .lock). Only while no start or restore is running.
  void sweep_state_temporaries();
  /// The global flags before a verb (root, platform, overlay, network). `disk_dir` is where
  /// the root overlay's writable layer goes (`--overlay2 root:dir=...`), empty for memory: it
  /// matters to the verbs that make a sandbox (create, and restore by the CLI); the others
  /// only find the container and are given the memory form.
  /// `network`: the container has a namespace of its own (--network=sandbox).
  std::vector<std::string> base_argv(const std::string& disk_dir = "", bool network = false) const;
  /// Whether `id` was created with a network (start and restore then go through the CLI,
  /// which sets the sandbox's interfaces up from its namespace).
  bool networked(const std::string& id) const;

 private:
  // The operations themselves; the public ones count their failures (b3os_runsc_failures_total).
  Result<void> do_create(const ContainerSpec& spec, int stdio_fd);
  Result<void> do_checkpoint(const std::string& id, const std::string& image_dir);
  Result<void> do_restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir);
  Result<void> do_pause(const std::string& id);
  Result<void> do_resume(const std::string& id);
  Result<void> do_start(const std::string& id);
  Result<void> do_destroy(const std::string& id);
  // The direct forms of start, restore and checkpoint (control.h).
  Result<void> start_direct(const std::string& id);
  Result<void> restore_direct(const std::string& id, const std::string& image_dir);
  Result<void> checkpoint_direct(const std::string& id, const std::string& image_dir);
  // What runsc start and restore do for a root container under --network=none, around `run`:
  // under the state file's lock, require "created", set up loopback, then record "running".
  Result<void> start_root(const std::string& id, std::string_view verb,
                          const std::function<Result<void>(ControlConnection&, const std::string& sandbox_id)>& run);
  /// The network the sandbox gets just before it starts or restores, as the CLI would give
  /// it: loopback alone, or with its namespace's eth0 (a packet socket on it, the address
  /// moved from the host side into the sandbox).
  Result<void> create_links(ControlConnection& conn, const std::string& id, const std::string& what);
  struct StatePids {
    pid_t sandbox = 0, gofer = 0;
  };
  std::optional<StatePids> state_pids(const std::string& id) const;
  bool kill_processes(const std::string& id);
  std::string state_path(const std::string& id) const;
  std::string lock_path(const std::string& id) const;

  /// The CLI form of a verb on a networked container: runsc refuses to set up a network when
  /// /proc/sys/net/core/rmem_default exists (its test for the host's namespace, true of every
  /// namespace on Linux 6.x), so the CLI runs in a mount namespace of its own with a tmpfs
  /// over /proc/sys/net (ARCHITECTURE.md, quirk 1).
  static std::vector<std::string> with_private_sysnet(std::vector<std::string> argv);

  RuntimeConfig cfg_;
  mutable std::mutex networked_mu_;
  std::map<std::string, std::string> networked_;  // id -> its netns path; guarded by networked_mu_
  /// The netns path of a networked container ("" for none).
  std::string netns_of(const std::string& id) const;
  std::once_flag control_once_;
  bool direct_ = false;
};

/// The memory cgroup limit for `memory_mib`: memory_mib plus the runtime's overhead.
int64_t memory_limit_bytes(const RuntimeConfig& cfg, int memory_mib);

/// The host processes and threads a sandbox of `memory_mib` may hold (its pids cgroup): each
/// process inside costs about two on the host (gVisor's systrap stubs), so 256 + 2 per MiB
/// (1,280 for 512 MiB, about 500 processes inside), and never more than an eighth of the
/// host's `pid_max`, so that no sandbox can take the host's process ids from b3osd and runsc.
int64_t pids_limit(int memory_mib, int64_t pid_max);
/// The host's /proc/sys/kernel/pid_max (32768 when it cannot be read), read once.
int64_t host_pid_max();

/// The OCI config.json of a sandbox (pure; unit-tested).
std::string oci_config(const ContainerSpec& spec, const RuntimeConfig& cfg);

}  // namespace b3os::runtime
