#pragma once
// Lifecycle: create, get, list, delete, pause, resume, the end of a sandbox (stop or failure)
// and reattaching after a restart. The other parts (checkpoints, exec, reaper) use its
// helpers to find a running sandbox, move it between states and keep its record.

#include <functional>
#include <mutex>
#include <set>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/runtime/runtime.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/freezer.h"
#include "daemon/sandbox/launcher.h"
#include "daemon/sandbox/live.h"
#include "daemon/sandbox/pools.h"
#include "daemon/sandbox/ports.h"
#include "daemon/sandbox/registry.h"
#include "daemon/sandbox/requests.h"
#include "daemon/sandbox/spec.h"
#include "daemon/sandbox/state.h"
#include "daemon/sandbox/templates.h"
#include "daemon/sandbox/types.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// The templates b3os knows by name, with their descriptions (others are found on disk).
const std::map<std::string, std::string>& builtin_templates();

class Lifecycle {
 public:
  using SpendLookup = std::function<std::optional<double>(const std::string& budget_id)>;
  Lifecycle(const Config& cfg, runtime::Runtime& rt, runtime::Shims& shims, store::SandboxStore& store,
            Registry& registry, Launcher& launcher, Pools& pools, Freezer& freezer, SpendLookup spent,
            const PortUrls* port_urls = nullptr)
      : cfg_(cfg), rt_(rt), shims_(shims), store_(store), registry_(registry), launcher_(launcher), pools_(pools),
        freezer_(freezer), spent_(std::move(spent)), port_urls_(port_urls) {}

  Result<nlohmann::json> create(const Principal& p, const SandboxSpec& spec, Timing& t);
  Result<nlohmann::json> get(const Principal& p, const std::string& id);
  Result<nlohmann::json> list(const Principal& p, store::SandboxQuery q);
  Result<nlohmann::json> remove(const Principal& p, const std::string& id, Timing& t);
  Result<nlohmann::json> pause(const Principal& p, const std::string& id, Timing& t);
  Result<nlohmann::json> resume(const Principal& p, const std::string& id, Timing& t);
  /// PATCH: a live sandbox's egress, stored before it is applied.
  Result<nlohmann::json> update(const Principal& p, const std::string& id, const UpdateRequest& u, Timing& t);
  /// Reattaches to sandboxes that survived a restart and fails the rest.
  Result<void> recover();
  /// What is not the launcher's (containers, sandbox directories, disks): what a dead b3osd
  /// left. After recover(), at any time.
  std::vector<std::string> orphans();
  /// Removes them (their containers, cgroups, shims, directories), a few at a time.
  void release_orphans(const std::vector<std::string>& ids);
  // ---- moves between nodes (checkpoints.cc: move_out, adopt) ----
  /// A sandbox being moved: out of the registry and its container ended here, its record
  /// untouched; requests for it get 503 with Retry-After until end_move.
  void begin_move(const std::shared_ptr<LiveSandbox>& s);
  void end_move(const std::string& id);
  /// Launches sandbox `rec` again from the image in `image` on `rootfs`, under its own id and
  /// record, and records it as this node's (a move's target, or its source when the move
  /// failed). `last_check` runs just before the record is written; its error undoes it all.
  Result<std::shared_ptr<LiveSandbox>> relaunch(const store::SandboxRecord& rec, const std::string& rootfs,
                                                const std::string& image, Timing& t,
                                                const std::function<Result<void>()>& last_check = nullptr);
  /// A failed move's source: the sandbox back from its image; if that fails too, its record
  /// ends failed, saying why.
  Result<void> restore_moved(const store::SandboxRecord& rec, const std::string& rootfs, const std::string& image,
                             Timing& t);
  bool has_network() const { return launcher_.network() != nullptr; }
  /// Removes the roots fetched from the object store that no live sandbox or snapshot of this
  /// node uses and no restore took for an hour (the reaper's collector thread, every
  /// --object-store-collect-every seconds).
  void collect_rootfs_cache();
  /// Removes the object store's shared roots (snapshots' and templates' roots) that no record
  /// refers to and no node asked for in --object-store-grace (the reaper's collector thread).
  void collect_object_store();
  int64_t collect_every_ms() const { return cfg_.collect_every_ms; }
  /// Forgets the records of ended sandboxes past --ended-retention-hours and, in each project,
  /// past its newest --ended-max-per-project (the reaper's collector thread, a second after
  /// start and then every minute, 5,000 a statement): creating and deleting sandboxes for ever
  /// must not grow the database.
  void forget_ended();
  void note_ended(const std::string& project_id);
  /// Starts a new shim for `s` when its own is gone (Launcher::keep_shim; the reaper's sweep).
  void keep_shim(LiveSandbox& s);

  // ---- for the other parts of the module ----

  /// The live sandbox `id` of this project, or 404 / 409 (not running) from its record.
  Result<std::shared_ptr<LiveSandbox>> running(const Principal& p, const std::string& id);
  /// Holds the sandbox awake (thawed if it was frozen idle) for as long as the guard lives;
  /// everything that reaches the agent or the container takes one first (freezer.h).
  /// `changes`: false for what leaves the sandbox as it was (fork, snapshot).
  Awake awake(LiveSandbox& s, bool changes = true) { return freezer_.awake(s, changes); }
  Freezer& freezer() { return freezer_; }
  /// Applies `t` to the sandbox's state under its lock (no I/O); the new state, or a 409.
  Result<State> transition(LiveSandbox& s, Transition t);
  /// Writes the sandbox's record to the store (holding only its persist_mu).
  Result<void> persist(LiveSandbox& s);
  /// Notes API activity (pushes expires_at), written through to the store.
  void touch(LiveSandbox& s);
  /// The sandbox object now.
  nlohmann::json view(LiveSandbox& s);
  /// Ends a live sandbox: records it stopped or failed, then releases every host resource.
  /// Returns false when it had already ended.
  bool finish(const std::shared_ptr<LiveSandbox>& s, Transition end, store::StopReason reason,
              const std::string& message);
  /// Undoes a launch that never became visible (nothing is recorded).
  void discard(LiveSandbox& s) { launcher_.discard(s); }
  /// Gives a launch made with defer_identity (a fork-ahead spare) its identity.
  Result<void> identify(LiveSandbox& s) { return launcher_.identify(s); }
  Result<void> apply_egress(LiveSandbox& s, const net::EgressPolicy& policy) { return launcher_.apply_egress(s, policy); }
  /// Pauses a running sandbox (the reaper's on_idle: pause, and the API).
  Result<void> pause_live(LiveSandbox& s, const char* why);
  /// Turns a channel failure into "the sandbox stopped: why" when the sandbox is gone.
  Error explain(LiveSandbox& s, Error e);
  /// Registers launched sandboxes with their records and makes them visible (all or nothing).
  Result<void> publish(const std::vector<std::shared_ptr<LiveSandbox>>& made);
  /// The channel of a sandbox broke: its runtime died.
  void on_channel_closed(const std::string& id, const std::string& why);
  /// The budget a new sandbox's model calls charge (see grants.cc).
  Result<std::string> grant_budget(const Principal& p, const SandboxSpec& spec, const std::string& inherited);
  /// The templates users build; null: only those on disk (base).
  void set_templates(TemplateCatalog* c) { templates_ = c; }
  TemplateCatalog* templates() const { return templates_; }
  /// The root filesystem directory of a template name ("" if the name is not valid).
  std::string template_rootfs(const std::string& name) const;

 private:
  static constexpr size_t kReattachThreads = 4;
  void reattach(const store::SandboxRecord& row);
  Result<nlohmann::json> create_launched(const Principal& p, const SandboxSpec& spec, const std::string& tname,
                                         const std::string& rootfs, const std::optional<std::string>& snapshot_id,
                                         Timing& t, Stopwatch& sw, const std::string& inherited_budget,
                                         const TemplateChoice* tpl = nullptr);
  Result<nlohmann::json> create_from_snapshot(const Principal& p, const SandboxSpec& request, Timing& t);
  /// Why sandbox `id`'s runtime ended, as a sentence; `kind` gets its metrics label.
  std::string diagnose_exit(const std::string& id, std::string* kind = nullptr);

  const Config& cfg_;
  runtime::Runtime& rt_;
  runtime::Shims& shims_;
  store::SandboxStore& store_;
  Registry& registry_;
  Launcher& launcher_;
  Pools& pools_;
  Freezer& freezer_;
  SpendLookup spent_;
  const PortUrls* port_urls_;  // public ports' URLs in the sandbox object (null: none)
  TemplateCatalog* templates_ = nullptr;
  std::mutex moving_mu_;
  std::set<std::string> moving_;  // ids between begin_move and end_move
  /// Orphans the last pass removed, which the next pass removes once more (orphans()).
  std::mutex orphans_mu_;
  std::set<std::string> released_last_;
  /// Projects a sandbox ended in since forget_ended's last turn (every project with ended
  /// records before its first).
  std::mutex ended_mu_;
  std::set<std::string> ended_in_;
  bool ended_projects_known_ = false;  // forget_ended's own (one thread)
};

/// b3os_sandbox_failures_total{kind}: a sandbox failed (kinds in docs/operations.md).
void count_failure(std::string_view kind);
/// b3os_channel_reconnects_total{outcome}: a channel taken back after a restart.
void count_reconnect(bool ok);
/// Counts a shim started again after its own was gone.
void count_shim_restart(bool ok);

}  // namespace b3os::sandbox
