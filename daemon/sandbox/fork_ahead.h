#pragma once
// ForkAhead: a fork of a quiet sandbox is a claim. A forkable sandbox in which only the agent
// is alive and which nothing has reached for a while gets a *spare* in the background: its
// checkpoint, restored into a container of its shape, warmed and frozen, without an identity.
// A fork while the sandbox is still exactly as it was then (LiveSandbox::changes has not
// moved) takes the spare instead of checkpointing and restoring: thaw, egress, identity,
// record. Spares are pool members: they count against the node's capacity (and give way to
// any request on a full node), never against a project's; one thread makes them, one at a
// time, only while no request launches, and rests four times as long as each one took.
// docs/design.md, "Fork-ahead".

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/launcher.h"
#include "daemon/sandbox/live.h"
#include "daemon/sandbox/pools.h"
#include "daemon/sandbox/registry.h"

namespace b3os::sandbox {

/// One spare: a restore of `source` as it was at change count `changes`, frozen.
struct Spare {
  std::weak_ptr<LiveSandbox> source;  // that very sandbox (an id that comes back is another)
  uint64_t changes = 0;
  std::shared_ptr<LiveSandbox> sandbox;
};

/// The host's MemAvailable in MiB (/proc/meminfo), or -1 when it cannot be read.
int64_t mem_available_mib();

class ForkAhead {
 public:
  /// Makes a spare of a quiet sandbox (Checkpoints::make_spare); kConflict when the sandbox
  /// was not quiet or changed meanwhile (not a failure of the source).
  using Maker = std::function<Result<Spare>(const std::shared_ptr<LiveSandbox>& source)>;
  /// How long a sandbox must have been quiet before a spare is made of it.
  static constexpr int64_t kQuietMs = 500;

  ForkAhead(const Config& cfg, Registry& registry, Pools& pools, Launcher& launcher, Maker make)
      : cfg_(cfg), registry_(registry), pools_(pools), launcher_(launcher), make_(std::move(make)),
        min_free_mib_(cfg.fork_ahead_min_free_mib) {}
  ~ForkAhead() { stop(); }
  void start();
  /// Stops the maker and ends every spare.
  void stop();

  /// `count` spares of `source` made at its current change count, or none (then the fork
  /// takes the usual path). The caller owns them: they are no longer pool members.
  std::vector<std::shared_ptr<LiveSandbox>> take(const std::shared_ptr<LiveSandbox>& source, int count);
  /// A full node: ends `n` spares so that a request fits, or none when there are fewer; how
  /// many went.
  int give_way(int n);
  /// Spares waiting now.
  int size() const;
  /// The memory floor (starts at --fork-ahead-min-free-mib).
  void set_min_free_mib(int mib) { min_free_mib_ = mib; }
  /// One pass of the maker at `now_ms` (steady_ms()): drops stale spares (and all of them
  /// under the memory floor), and makes at most one unless resting after the last. Returns
  /// how long making took (ms), or 0. Called by one thread at a time.
  int64_t tick(int64_t now_ms);

 private:
  struct Source {
    std::weak_ptr<LiveSandbox> live;
    int unclaimed = 0;          // spares of it in a row that went stale unclaimed
    int64_t not_before_ms = 0;  // steady ms: no spare of it before then
  };
  /// The running, forkable, quiet sandbox to make a spare of next, or nullptr (`avail`: the
  /// host's MemAvailable in MiB, -1 unknown).
  std::shared_ptr<LiveSandbox> candidate(int64_t now_ms, int64_t avail);
  /// A source's next spare waits (500 ms doubling to 64 s): its spares went stale unclaimed,
  /// or something reached it while one was being made (under mu_).
  static void back_off(Source& so, const std::shared_ptr<LiveSandbox>& src, int64_t now_ms);
  /// Ends spares (pool members) outside any lock.
  void end(std::vector<std::shared_ptr<LiveSandbox>> spares);
  /// Moves the spares that can no longer be claimed out of the shelf, with their sources'
  /// backoff.
  void collect_stale(int64_t now_ms, std::vector<std::shared_ptr<LiveSandbox>>& out);

  const Config& cfg_;
  Registry& registry_;
  Pools& pools_;
  Launcher& launcher_;
  Maker make_;
  std::atomic<int> min_free_mib_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Spare> shelf_;               // guarded by mu_
  std::map<std::string, Source> sources_;  // guarded by mu_
  bool stopping_ = false;                  // guarded by mu_
  int64_t rest_until_ms_ = 0;              // the maker's thread only
  std::thread thread_;
};

}  // namespace b3os::sandbox
