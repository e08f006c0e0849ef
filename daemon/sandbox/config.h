#pragma once
// The sandbox module's configuration: where sandboxes live, limits, pools. main() fills it
// from flags (docs/configuration.md).

#include <cstddef>
#include <string>

#include "daemon/runtime/runsc.h"

namespace b3os::objstore {
class ObjectStore;
}

namespace b3os::sandbox {

/// Where preview URLs point (ports.h).
struct PreviewConfig {
  std::string domain = "localhost";
  int listen_port = 7080;
  /// A file of 32 random bytes (made 0600 on first start) from which public ports' tokens are
  /// derived; "" keeps a key in memory only (public URLs then change at every start).
  std::string key_file;
};


struct Config {
  /// A cluster's object storage (docs/cluster.md), where snapshots go so that another node can
  /// restore them; null on a single node. Not owned.
  objstore::ObjectStore* object_store = nullptr;
  /// How often the collectors of fetched roots and of the object store's shared roots run,
  /// and how long a root of the object store stays after a node last asked for it.
  int64_t collect_every_ms = 10 * 60 * 1000;
  int64_t object_root_grace_ms = 60 * 60 * 1000;
  std::string node_id;  // this node's name in a shared store ("" alone)
  std::string data_dir = "/var/lib/b3os";  // b3os.db, templates/, snapshots/, fork-images/
  std::string run_dir = "/run/b3os";       // per-sandbox bundles, shim sockets, logs
  std::string templates_dir_override;      // default: data_dir/templates
  std::string agent_path;                  // b3os-agent, bind-mounted into every sandbox
  runtime::RuntimeConfig runtime;

  size_t max_exec_output = 1 << 20;    // per stream, then truncated
  int max_sandboxes_per_project = 64;  // 429 concurrency_limited
  int max_sandboxes_per_node = 256;    // 503 capacity_unavailable
  /// Admission by what sandboxes commit (their limits): the sums of memory_mib, vcpu and
  /// disk_gib may reach the host's memory (less --memory-reserve-mib), CPUs and data disk
  /// (less --disk-reserve-gib) times these (503 capacity_unavailable past them), and a
  /// project's sums its quotas (0: none; 429 quota_exceeded). docs/configuration.md.
  double memory_overcommit = 4.0;
  double vcpu_overcommit = 128.0;  // CPU is shared by time: 256 one-vCPU sandboxes on 2 cores
  double disk_overcommit = 4.0;
  int64_t project_max_memory_mib = 0, project_max_vcpu = 0, project_max_disk_gib = 0;
  /// What a project may keep as snapshots (429 quota_exceeded at the limit) and the free
  /// space a snapshot leaves the data disk for running sandboxes (503 capacity_unavailable).
  int snapshots_max_per_project = 1000;
  double snapshots_max_gib_per_project = 256;
  double disk_reserve_gib = 2;
  /// Ended (stopped, failed) sandboxes stay listed and readable this long, and a project keeps at
  /// most this many of them (its newest); older records are forgotten (404 after).
  double ended_retention_hours = 168;
  int ended_max_per_project = 10000;
  int warm_pool_size = 2;  // booted `base` sandboxes kept ready for non-forkable creates
  int fork_pool_size = 3;
  // The same two pools for sandboxes with a network of their own (egress public, allowlist):
  // a namespace and its container, ready.
  int net_warm_pool_size = 1;
  int net_fork_pool_size = 1;
  /// A running sandbox whose agent reported it idle (nothing but the agent alive, no stream
  /// open) and that no operation holds awake is frozen after this long (freezer.h); 0 never.
  int idle_freeze_ms = 1500;  // created, not started containers kept for forks, snapshot restores and boots
  /// Fork-ahead (fork_ahead.h): spares made of each quiet forkable sandbox (0: off), of all
  /// sandboxes together at most fork_ahead_node, and only while the host's MemAvailable stays
  /// above fork_ahead_min_free_mib plus the source's memory (all dropped below the floor).
  int fork_ahead = 1;
  int fork_ahead_node = 8;
  int fork_ahead_min_free_mib = 2048;
  /// Background work (pool refills, fork-ahead spares) starts only this long after the last
  /// launch, fork or pool claim ended, so that the caller's next request (the first exec in what
  /// it just got) has the CPU to itself; a refill waits at most a second for such a pause.
  int refill_settle_ms = 250;
  // Template checkpoints: "auto" builds one per template at start and restores it for creates
  // when a restore measured faster than a boot; "on" always restores it; "off" never builds one.
  std::string template_checkpoints = "auto";
  // Liveness: an agent silent for liveness_quiet_ms is sent a PING; one that then answers
  // nothing for liveness_timeout_ms fails its sandbox.
  int liveness_quiet_ms = 3000;
  int liveness_timeout_ms = 8000;
  /// The gateway's default model, set in sandboxes granted infer:run as B3OS_MODEL ("" when
  /// no model is configured).
  std::string default_model;
  /// Preview URLs of ports (docs/ports.md).
  PreviewConfig preview;

  std::string templates_dir() const { return templates_dir_override.empty() ? data_dir + "/templates" : templates_dir_override; }
  std::string snapshots_dir() const { return data_dir + "/snapshots"; }
  /// Fork images live only while a fork runs; on the data disk rather than RUN_DIR, which is
  /// often a small tmpfs (an image is as large as the source's memory). Swept at start.
  std::string fork_images_dir() const { return data_dir + "/fork-images"; }
  std::string sandboxes_dir() const { return run_dir + "/sandboxes"; }
  /// Template roots fetched from the object store for restores of other nodes' snapshots, one
  /// directory per root's fingerprint (kept: the sandboxes restored on them read them).
  std::string rootfs_cache_dir() const { return data_dir + "/rootfs-cache"; }
};

}  // namespace b3os::sandbox
