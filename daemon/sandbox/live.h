#pragma once
// LiveSandbox: a sandbox that holds host resources (a container, a shim, a channel), with its
// typed record. Shared by the parts of the sandbox module; not part of its interface.

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"
#include "daemon/net/network.h"
#include "daemon/store/records.h"

namespace b3os::sandbox {

/// Lock order inside the sandbox module (docs/design.md): a thread holds at most one of
///   Registry::mu_, Pools::mu_, LiveSandbox::mu, LiveSandbox::room_mu
/// at a time, and never across a runtime call, a store write, a thread join or a channel
/// wait. LiveSandbox::persist_mu is taken alone and held across the store write of this
/// sandbox's record only (it orders writes of one record; no request of another sandbox, and
/// no read of this one, waits on it). The store's own mutex and the channel's locks are
/// leaves below all of these. LiveSandbox::freeze_mu (freezer.cc) is taken alone or before
/// mu, never while holding another lock of the module, and is held across the cgroup write
/// that freezes or thaws this sandbox (nothing else: no runsc CLI, store or channel wait).
/// LiveSandbox::shim_mu is taken alone, and held across starting a shim (a process spawn and
/// its "ready" line) and nothing else.
struct LiveSandbox {
  // Set at launch, before the sandbox is shared; read without a lock afterwards.
  std::string id;
  std::string hostname;
  int disk_gib = 0;  // the size of its container's disk; 0: its root overlay is in memory
  bool networked = false;  // it has a network namespace of its own (net::Network)
  std::shared_ptr<agentlink::AgentChannel> channel;

  // Its b3os-shim (holding a copy of the channel, draining the sandbox's stderr pipe into its
  // log): set at launch; afterwards guarded by shim_mu, which is taken alone and held across
  // starting a new shim when this one is gone (Launcher::keep_shim).
  std::mutex shim_mu;
  pid_t shim_pid = -1;
  UniqueFd shim_watch;          // a pidfd of the shim, readable once it is gone; none: not replaced
  UniqueFd log_rd;              // a copy of the read end of the stderr pipe, for a new shim
  bool shim_released = false;   // being released: no new shim is started for it
  int64_t shim_started_ms = 0;  // steady ms of the last start by this b3osd
  int64_t shim_retry_ms = 0;    // steady ms: no new shim is tried before
  int shim_failures = 0;        // starts that failed in a row

  // Guarded by mu: the record (state included) and the count of checkpoints in flight.
  mutable std::mutex mu;
  store::SandboxRecord rec;
  int checkpoints = 0;
  int spare_checkpoints = 0;  // of those, fork-ahead's (fork_ahead.h): a pause waits them out

  std::atomic<int64_t> last_activity_ms{0};
  std::atomic<int> active_ops{0};  // execs and transfers in flight: the sandbox is not idle
  /// Being moved to another node (its node drains; Checkpoints::move_out): requests get 503
  /// with Retry-After, and the reaper leaves it alone until it leaves the registry.
  std::atomic<bool> moving{false};

  // Orders the store writes of this record (see above).
  std::mutex persist_mu;
  int64_t persisted_activity_ms = 0;  // guarded by persist_mu

  // Idle freezing (freezer.cc). Guarded by freeze_mu: whether the freezer froze it, how many
  // operations hold it awake (Freezer::awake), and when the last of them ended (steady ms).
  std::mutex freeze_mu;
  bool idle_frozen = false;
  int awake = 0;
  int64_t quiet_since_ms = 0;
  uint64_t freezes = 0, thaws = 0;  // counts, for tests and logs
  // What the agent reported (IDLE frames, on the channel's reader thread): -1 never (an agent
  // that does not report is never frozen), 0 busy, 1 idle; and since when (steady ms).
  std::atomic<int> agent_idle{-1};
  std::atomic<int64_t> agent_idle_since_ms{0};
  // A background process runs or a terminal is open (the agent's IDLE reports): the sandbox
  // is in use, and timeout_s counts from when the last of them ended.
  std::atomic<bool> agent_held{false};
  /// Counts what may have changed the sandbox: every operation that reaches it (Freezer::awake,
  /// but for fork and snapshot, which leave it as it was) and every agent report that anything
  /// but the agent runs. Bumped under freeze_mu; fork-ahead's spares (fork_ahead.h) are of one
  /// count, and claimed only while it has not moved.
  std::atomic<uint64_t> changes{0};

  // The egress its network has now (networked sandboxes; launcher.cc apply_egress). Guarded
  // by egress_mu, which is taken alone and held across the firewall change: changes of one
  // sandbox's egress are applied in the order they were stored.
  std::mutex egress_mu;
  std::optional<net::EgressPolicy> egress_applied;
  // Held by a PATCH across its store write and its firewall change (taken before persist_mu
  // and egress_mu, with no other lock held): two changes of one sandbox land in their order.
  std::mutex egress_change_mu;

  // Checkpoint images of this sandbox still charged to its memory cgroup (checkpoints.cc).
  std::mutex room_mu;
  int image_rooms = 0;
};

/// Marks a sandbox busy for the life of one operation (the reaper leaves it alone).
class ActiveOp {
 public:
  explicit ActiveOp(LiveSandbox& s) : n_(s.active_ops) { ++n_; }
  ~ActiveOp() { --n_; }
  ActiveOp(const ActiveOp&) = delete;
  ActiveOp& operator=(const ActiveOp&) = delete;

 private:
  std::atomic<int>& n_;
};

}  // namespace b3os::sandbox
