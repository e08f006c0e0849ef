#pragma once
// Launcher: puts a container on the host and brings its agent up (a boot, or a restore of a
// checkpoint image), and takes it all down again. Nothing it leaves half-made survives a
// failure: every path that fails undoes what it did.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"
#include "daemon/net/network.h"
#include "daemon/runtime/runtime.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/live.h"
#include "daemon/sandbox/timing.h"

namespace b3os::sandbox {

/// What starting one container needs: a boot, or a restore of a checkpoint image.
struct LaunchRequest {
  std::string id, project_id, rootfs;
  int vcpu = 1, memory_mib = 512;
  int disk_gib = 1;       // the size of its disk (when the root overlay is on disk)
  std::string image;      // checkpoint directory to restore; empty: boot
  bool from_pool = true;  // may take a pre-created container (the pool's own refills may not)
  bool network = false;   // a namespace of its own (egress public or allowlist): net::Network
  /// Fork-ahead's spares: restored, but given their identity only when a fork claims them
  /// (identify), so that a spare carries nothing of a sandbox that does not exist yet.
  bool defer_identity = false;
  /// A template build's sandbox: called with its disk's directory once the disk is made (before
  /// the container), puts the root filesystem there and returns its path; the sandbox then
  /// writes that root in place (no overlay). Never pooled, never checkpointed.
  std::function<Result<std::string>(const std::string& disk_dir)> root_on_disk;
};

/// A container created (its shim holding the channel) but not started yet.
struct Precreated {
  std::shared_ptr<LiveSandbox> sandbox;
  UniqueFd daemon_end;
};

class Launcher {
 public:
  /// `on_closed(id, why)` runs when a sandbox's channel breaks (on the channel's reader
  /// thread); `incoming(id, stream)` takes streams the agent opens.
  using ClosedHandler = std::function<void(const std::string& id, const std::string& why)>;
  using IncomingHandler = std::function<void(const std::string& id, std::shared_ptr<agentlink::Stream>)>;
  /// `network`: the node's sandbox networks; null when it has none (networked launches fail).
  Launcher(const Config& cfg, runtime::Runtime& rt, runtime::Shims& shims, net::Network* network = nullptr);
  ~Launcher();
  void set_handlers(ClosedHandler closed, IncomingHandler incoming) {
    closed_ = std::move(closed);
    incoming_ = std::move(incoming);
  }

  /// The first half of a launch: directory, socketpair, shim, runtime create.
  Result<Precreated> precreate(const LaunchRequest& l, Timing& t, Stopwatch& sw);
  /// Starts a container (`pooled`, or a new one), agent ready, identity and CPU limit applied.
  Result<std::shared_ptr<LiveSandbox>> launch(const LaunchRequest& l, std::optional<Precreated> pooled, Timing& t,
                                              Stopwatch& sw);
  /// Starts the channel reader on `fd` with this sandbox's handlers (its agent's IDLE reports
  /// go to `s`, which the channel does not keep alive).
  std::shared_ptr<agentlink::AgentChannel> attach(UniqueFd fd, const std::shared_ptr<LiveSandbox>& s);
  /// Gives a launched sandbox's agent its identity (sandbox id, hostname, a fresh machine id
  /// and random seed, the time) and asks for IDLE reports: the end of every launch, or of a
  /// claim of a spare launched with defer_identity.
  Result<void> identify(LiveSandbox& s);
  /// Asks the agent for IDLE reports (after the agent is up, and after every resync); an
  /// agent that does not know them is simply never frozen.
  void request_idle_reports(LiveSandbox& s);
  /// Logs what asking for idle reports gave (never frozen when they will not come).
  static void note_idle_reports(LiveSandbox& s, const Result<bool>& r);
  /// Undoes a launch that will not become a sandbox, or ends one: channel, container, shim, files.
  void discard(LiveSandbox& s);
  /// Ends a sandbox at once and releases it afterwards: its channel closes and its cgroup is
  /// frozen now (nothing in it runs or answers from here); a cleaner thread then removes the
  /// container, shim and files. A storm of deletes cannot pile up host resources: new
  /// containers wait while kMaxBacklog releases are waiting (precreate), and past kHardBacklog
  /// (ends that launches did not hold back: timeouts, failures) it releases here instead.
  void end(LiveSandbox& s);
  /// Waits until every release that end() queued is done.
  void settle();
  /// Whether `id` is a container this launcher made and has not released yet (a pool
  /// member, a sandbox, a launch in flight): never an orphan.
  bool owns(const std::string& id);
  /// Takes `id` (a sandbox a previous b3osd launched, reattached) as its own.
  void adopt(const std::string& id);
  /// Releases the host resources of `id` (container, disk, shim, directory). The shim is
  /// `shim_watch` (its pidfd) when valid, else `shim_pid`, else (<= 0) the one recorded in
  /// or found serving its directory.
  void release(const std::string& id, pid_t shim_pid, int shim_watch = -1);
  /// Starts a new shim for `s` when its own is gone (killed by hand, or by the kernel's OOM
  /// killer): b3osd still holds the channel and the log pipe, and hands copies to the new one,
  /// so the sandbox outlives the next restart of b3osd and its log is drained. Nothing when
  /// there was nothing to do, else whether the new one started (tried again 5 s later when
  /// not). For the reaper's sweep; cheap when the shim lives (a poll of its pidfd).
  std::optional<bool> keep_shim(LiveSandbox& s);
  std::string dir_of(const std::string& id) const { return cfg_.sandboxes_dir() + "/" + id; }
  net::Network* network() const { return network_; }
  /// Sets a networked sandbox's egress (and remembers it in `s`, so a claim that wants what
  /// a pool member already has skips the firewall).
  Result<void> apply_egress(LiveSandbox& s, const net::EgressPolicy& policy);
  /// The disk a launch of `l` gets: disk_gib, or 0 when the root overlay is in memory.
  int disk_for(const LaunchRequest& l) const { return cfg_.runtime.root_overlay == "memory" ? 0 : l.disk_gib; }

 private:
  static constexpr size_t kCleaners = 3;
  static constexpr size_t kMaxBacklog = 32;
  static constexpr size_t kHardBacklog = 128;
  static constexpr std::chrono::seconds kRoomWait{30};
  void clean();
  /// Holds a launch back (up to kRoomWait) while kMaxBacklog releases are waiting.
  void wait_for_room();
  struct ShimRef {
    pid_t pid = -1;
    UniqueFd watch;
  };
  /// Marks `s`'s shim as being released (keep_shim starts none any more) and hands it over.
  ShimRef take_shim(LiveSandbox& s);
  /// A shim that failed to start this many times in a row (5 s apart) is given up.
  static constexpr int kShimTries = 12;

  const Config& cfg_;
  runtime::Runtime& rt_;
  runtime::Shims& shims_;
  net::Network* network_;
  ClosedHandler closed_;
  IncomingHandler incoming_;

  std::mutex owned_mu_;
  std::set<std::string> owned_;  // guarded by owned_mu_

  std::mutex clean_mu_;
  std::condition_variable clean_cv_;
  struct Pending {
    std::string id;
    ShimRef shim;
  };
  std::deque<Pending> to_release_;  // guarded by clean_mu_
  size_t releasing_ = 0;                                   // guarded by clean_mu_
  bool stopping_ = false;                                  // guarded by clean_mu_
  std::vector<std::thread> cleaners_;
};

}  // namespace b3os::sandbox
