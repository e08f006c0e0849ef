#pragma once
// Checkpoints: everything built on saving a running sandbox (its memory, disk and processes):
// fork into N copies, snapshots kept on disk, and the images the pools build of templates.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "daemon/sandbox/fork_ahead.h"
#include "daemon/sandbox/lifecycle.h"

namespace b3os::sandbox {

class Checkpoints {
 public:
  Checkpoints(const Config& cfg, runtime::Runtime& rt, store::SandboxStore& store, Registry& registry, Pools& pools,
              Lifecycle& lifecycle)
      : cfg_(cfg), rt_(rt), store_(store), registry_(registry), pools_(pools), lifecycle_(lifecycle) {}

  /// Forks a running forkable sandbox into `count` new running sandboxes: all or nothing.
  Result<nlohmann::json> fork(const Principal& p, const std::string& id, int count,
                              const std::optional<std::map<std::string, std::string>>& metadata, Timing& t);
  /// Saves a running sandbox under a new snapshot id (on disk under DATA_DIR/snapshots).
  Result<nlohmann::json> snapshot(const Principal& p, const std::string& id, Timing& t);
  Result<nlohmann::json> get_snapshot(const Principal& p, const std::string& id);
  Result<nlohmann::json> list_snapshots(const Principal& p, const std::optional<std::string>& after_id, int limit);
  Result<nlohmann::json> delete_snapshot(const Principal& p, const std::string& id);

  /// Moves a running forkable sandbox to another node (this one drains; docs/cluster.md):
  /// its image (memory, root overlay, processes) is taken and its container here ended (its
  /// record untouched), the image goes to the object store as move `move_id`, then
  /// `adopt(move_id)` asks the other node to restore it under the same id and record it as
  /// its own (true: it did). Not taken: restored here from the image, as it was (if that
  /// fails too, its record ends failed). Requests meanwhile get 503 with Retry-After.
  Result<void> move_out(const std::shared_ptr<LiveSandbox>& s,
                        const std::function<Result<bool>(const std::string& move_id)>& adopt, Timing& t);
  /// The other side of a move: restores sandbox `id` of `from_node` from move `move_id`'s
  /// image under its id and record, and records it as this node's. Refused (nothing made)
  /// after `deadline_ms`, when the mover has given up on the answer.
  Result<nlohmann::json> adopt(const std::string& project_id, const std::string& id, const std::string& move_id,
                               const std::string& from_node, int64_t deadline_ms, Timing& t);

  /// Writes an image of `s` into `dir` with its channel quiesced; no state change (the pools
  /// use it on a sandbox no one else can see yet).
  Result<void> write_image(LiveSandbox& s, const std::string& dir, Timing& t, Stopwatch& sw);

  /// Fork-ahead (fork_ahead.h): forks claim spares from `f` when it has them (null: never).
  void set_fork_ahead(ForkAhead* f) { fork_ahead_ = f; }
  /// A spare of a quiet sandbox: checkpointed, restored, warmed, frozen, with no identity;
  /// kConflict when the source was not quiet or changed meanwhile (nothing kept).
  Result<Spare> make_spare(const std::shared_ptr<LiveSandbox>& source);

 private:
  /// write_image inside the checkpointing state (pause, resume and a second checkpoint's
  /// end wait their turn; several checkpoints of one sandbox may run at once).
  /// A launch of `base`'s shape restored from `image` (a fork's, or a spare's), with a new id.
  LaunchRequest fork_launch(const store::SandboxRecord& base, const std::string& image) const;
  /// `spare`: fork-ahead's, which a pause waits out instead of refusing.
  Result<void> checkpoint_into(LiveSandbox& s, const std::string& dir, Timing& t, Stopwatch& sw, bool spare = false);
  /// The spares of `src` a fork of `count` can claim, thawed, with the source's egress and a
  /// fresh identity; empty when there are not enough (or one failed: the fork goes the usual way).
  std::vector<std::shared_ptr<LiveSandbox>> claim_spares(const std::shared_ptr<LiveSandbox>& src,
                                                         const store::SandboxRecord& base, int count);

  const Config& cfg_;
  runtime::Runtime& rt_;
  store::SandboxStore& store_;
  Registry& registry_;
  Pools& pools_;
  Lifecycle& lifecycle_;
  ForkAhead* fork_ahead_ = nullptr;

  /// A snapshot under way counts against its project's quota until it is recorded or given
  /// up (snapshots of one project at once could otherwise all pass the check).
  class SnapshotSlot;
  Result<std::unique_ptr<SnapshotSlot>> snapshot_slot(const std::string& project_id, int memory_mib);
  struct UnderWay {
    int count = 0;
    uint64_t bytes = 0;  // each counted as its sandbox's memory_mib until its image is recorded
  };
  std::mutex quota_mu_;
  std::map<std::string, UnderWay> snapshots_under_way_;  // by project
};

}  // namespace b3os::sandbox
