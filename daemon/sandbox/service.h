#pragma once
// SandboxService: the sandbox module's one entry point. The REST handlers (and, next, MCP)
// call it with plain request structs; it knows nothing of HTTP. It assembles the parts, each
// with one job (docs/design.md has the map):
//   Registry     live sandboxes and capacity          registry.h
//   Launcher     containers up and down                launcher.h
//   Pools        warm pool, fork pool, template images pools.h
//   Lifecycle    create, get, list, delete, pause, resume, restarts   lifecycle.h
//   Checkpoints  fork and snapshots                    checkpoints.h
//   Exec         commands and files                    exec.h
//   Reaper       idle timeouts                         reaper.h
//   Freezer      idle sandboxes frozen, thawed on use  freezer.h
// over the Runtime, Shims and SandboxStore interfaces (fakes in tests/fakes/).

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/agentlink/channel.h"
#include "daemon/runtime/runtime.h"
#include "daemon/sandbox/checkpoints.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/exec.h"
#include "daemon/sandbox/freezer.h"
#include "daemon/sandbox/launcher.h"
#include "daemon/sandbox/lifecycle.h"
#include "daemon/sandbox/pools.h"
#include "daemon/sandbox/ports.h"
#include "daemon/sandbox/reaper.h"
#include "daemon/sandbox/registry.h"
#include "daemon/sandbox/spec.h"
#include "daemon/sandbox/types.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// What a sandbox's model grant is, for the gateway's relay.
struct ModelGrant {
  std::string project_id, budget_id;
  bool infer = false;  // the grant has the infer:run scope
};

/// How the sandbox module reaches the model gateway without depending on it (main wires it).
struct ModelHooks {
  /// Serves a stream the agent opened (an HTTP call to the in-sandbox model endpoint). Runs on
  /// the channel's reader thread: it must hand the work to another thread at once.
  std::function<void(const std::string& sandbox_id, std::shared_ptr<agentlink::Stream>)> incoming;
  /// What a budget has spent, in USD (nullopt: unknown).
  std::function<std::optional<double>(const std::string& budget_id)> spent_usd;
};

/// What this node admits (Registry::reserve): the host's memory, CPUs and data disk as
/// `cfg`'s ratios and reserves make them.
Capacity node_capacity(const Config& cfg);

class SandboxService {
 public:
  /// `network`: the node's sandbox networks (egress public and allowlist); null: none.
  SandboxService(Config cfg, runtime::Runtime& rt, runtime::Shims& shims, store::SandboxStore& store,
                 ModelHooks hooks = {}, net::Network* network = nullptr);
  ~SandboxService();

  /// Reattaches to sandboxes that survived a b3osd restart, fails the rest, and starts the
  /// reaper, the pools and (in the background) the removal of containers and files nobody owns.
  Result<void> recover();
  /// True once recover() has reattached every sandbox: requests can be served.
  bool ready() const { return ready_.load(); }
  /// Stops the reaper and the pools; running sandboxes keep running (a restart reattaches them).
  void stop();
  /// Waits until the host resources of every ended sandbox, and the orphans a restart found,
  /// are released (both happen behind the API). For tests and benchmarks; one caller at a time.
  void settle() {
    {
      std::unique_lock lk(sweep_mu_);
      sweep_cv_.wait(lk, [&] { return first_sweep_done_ || !sweeper_.joinable(); });
    }
    launcher_.settle();
  }

  Result<nlohmann::json> create(const Principal& p, const SandboxSpec& spec, Timing& t) { return life_.create(p, spec, t); }
  Result<nlohmann::json> get(const Principal& p, const std::string& id) { return life_.get(p, id); }
  /// One page: {"object":"list","data":[...],"next_cursor":...}.
  Result<nlohmann::json> list(const Principal& p, store::SandboxQuery q) { return life_.list(p, std::move(q)); }
  Result<nlohmann::json> remove(const Principal& p, const std::string& id, Timing& t) { return life_.remove(p, id, t); }
  /// Freezes a running sandbox (no vCPU is metered) and thaws it. Pausing a paused one or
  /// resuming a running one changes nothing.
  Result<nlohmann::json> pause(const Principal& p, const std::string& id, Timing& t) { return life_.pause(p, id, t); }
  Result<nlohmann::json> resume(const Principal& p, const std::string& id, Timing& t) { return life_.resume(p, id, t); }
  Result<nlohmann::json> update(const Principal& p, const std::string& id, const UpdateRequest& u, Timing& t) {
    return life_.update(p, id, u, t);
  }

  /// A draining node's moves (checkpoints.h, docs/cluster.md).
  Result<void> move_out(const std::shared_ptr<LiveSandbox>& s,
                        const std::function<Result<bool>(const std::string& move_id)>& adopt, Timing& t) {
    return checkpoints_.move_out(s, adopt, t);
  }
  Result<nlohmann::json> adopt(const std::string& project_id, const std::string& id, const std::string& move_id,
                               const std::string& from_node, int64_t deadline_ms, Timing& t) {
    return checkpoints_.adopt(project_id, id, move_id, from_node, deadline_ms, t);
  }

  Result<nlohmann::json> fork(const Principal& p, const std::string& id, int count,
                              const std::optional<std::map<std::string, std::string>>& metadata, Timing& t) {
    return checkpoints_.fork(p, id, count, metadata, t);
  }
  Result<nlohmann::json> snapshot(const Principal& p, const std::string& id, Timing& t) {
    return checkpoints_.snapshot(p, id, t);
  }
  Result<nlohmann::json> get_snapshot(const Principal& p, const std::string& id) { return checkpoints_.get_snapshot(p, id); }
  Result<nlohmann::json> list_snapshots(const Principal& p, const std::optional<std::string>& after_id, int limit) {
    return checkpoints_.list_snapshots(p, after_id, limit);
  }
  Result<nlohmann::json> delete_snapshot(const Principal& p, const std::string& id) {
    return checkpoints_.delete_snapshot(p, id);
  }

  Result<ExecResult> exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                          const CancelCheck& cancelled, const Exec::OutputSink& on_output = {},
                          const Exec::StartSink& on_start = {}) {
    return exec_.exec(p, id, spec, t, cancelled, on_output, on_start);
  }
  Result<nlohmann::json> write_file(const Principal& p, const std::string& id, const std::string& path,
                                    const ChunkSource& source, Timing& t) {
    return exec_.write_file(p, id, path, source, t);
  }
  Result<void> read_file(const Principal& p, const std::string& id, const std::string& path, FileSink& sink, Timing& t) {
    return exec_.read_file(p, id, path, sink, t);
  }
  Result<nlohmann::json> list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t,
                                  const std::string& after = {}, int limit = 1000) {
    return exec_.list_dir(p, id, path, t, after, limit);
  }
  Result<nlohmann::json> remove_path(const Principal& p, const std::string& id, const std::string& path, bool recursive,
                                     Timing& t) {
    return exec_.remove_path(p, id, path, recursive, t);
  }
  /// Times the idle freezer froze and thawed sandbox `id` (tests; nullopt when not live).
  std::optional<std::pair<uint64_t, uint64_t>> freeze_counts(const std::string& id);
  /// One pass of the idle freezer now (tests).
  void freeze_idle_now() { freezer_.sweep(steady_ms() + freezer_.grace_ms()); }

  /// A preview URL of `port` that expires after `ttl_s` (docs/ports.md).
  Result<nlohmann::json> mint_port_url(const Principal& p, const std::string& id, int port, int ttl_s) {
    return ports_.mint(p, id, port, ttl_s);
  }
  /// A connection to a port inside a sandbox, for a preview request carrying `token`.
  Result<std::unique_ptr<PortConnection>> connect_port(const PreviewTarget& t, const std::optional<std::string>& token) {
    return ports_.connect(t, token);
  }
  /// connect_port's token check alone, with no other effect.
  Result<void> authorize_port(const PreviewTarget& t, const std::optional<std::string>& token) {
    return ports_.authorize(t, token);
  }

  /// The access token of sandbox `id`'s E2B in-sandbox API (PortUrls::access_token).
  std::string access_token(std::string_view id) const { return port_urls_.access_token(id); }
  /// The token of all of sandbox `id`'s ports at once (PortUrls::traffic_token).
  std::string traffic_token(std::string_view id) const { return port_urls_.traffic_token(id); }

  /// Round trip over a sandbox's agent channel (benchmarks).
  Result<double> ping(const Principal& p, const std::string& id) { return exec_.ping(p, id); }

  /// The templates this node knows: {"object":"list","data":[...]}.
  nlohmann::json templates() const;

  /// What the node holds now, for metrics and `b3os status`: live sandboxes by settled state
  /// (running, paused) and template, capacity, and the pools.
  struct Stats {
    std::map<std::pair<std::string, std::string>, int> sandboxes;  // (state, template) -> count
    Registry::Usage usage;
    Pools::Sizes pools;
  };
  Stats stats() const;
  // ---- the parts the template module (daemon/template) builds with: sandboxes of its own
  // that no project reaches, their commands and checkpoints ----
  Registry& registry() { return registry_; }
  runtime::Runtime& runtime() { return rt_; }
  Launcher& launcher() { return launcher_; }
  Exec& exec() { return exec_; }
  Checkpoints& checkpoints() { return checkpoints_; }
  Pools& pools() { return pools_; }
  ForkAhead& fork_ahead() { return fork_ahead_; }
  Lifecycle& lifecycle() { return life_; }
  const Config& config() const { return cfg_; }
  /// Creates then resolve `template` through `c` too (null: only the templates on disk).
  void set_templates(TemplateCatalog* c) { life_.set_templates(c); }

  /// The model grant of live sandbox `id` (nullopt when it is not live).
  std::optional<ModelGrant> model_grant(const std::string& id);

 private:
  Config cfg_;
  runtime::Runtime& rt_;
  PortUrls port_urls_;
  ModelHooks hooks_;
  Registry registry_;
  Freezer freezer_;
  Launcher launcher_;
  Pools pools_;
  Lifecycle life_;
  Checkpoints checkpoints_;
  ForkAhead fork_ahead_;
  Exec exec_;
  Ports ports_;
  Reaper reaper_;
  std::atomic<bool> ready_{false};
  std::thread sweeper_;  // removes orphans after a restart, and looks again now and then
  std::mutex sweep_mu_;
  std::condition_variable sweep_cv_;
  bool first_sweep_done_ = false;  // guarded by sweep_mu_
  bool sweep_stopping_ = false;    // guarded by sweep_mu_

  // Channel callbacks run on the channels' reader threads; stop() waits for those in flight
  // and turns later ones away, so none reaches a part that is being destroyed.
  std::mutex callbacks_mu_;
  std::condition_variable callbacks_cv_;
  int callbacks_active_ = 0;
  bool callbacks_closed_ = false;
  /// Runs `fn` unless stop() has begun.
  void guarded(const std::function<void()>& fn);
};

}  // namespace b3os::sandbox
