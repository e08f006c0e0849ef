#pragma once
// SandboxService: the lifecycle of sandboxes (create, get, list, delete, timeouts, restarts)
// and what runs in them (exec, files). The REST handlers and, later, MCP call it; it knows
// nothing of HTTP.

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/result.h"
#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"
#include "daemon/config/config.h"
#include "daemon/gateway/gateway.h"
#include "daemon/runtime/runsc.h"
#include "daemon/sandbox/spec.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// Who is asking: the project a key belongs to.
struct Principal {
  std::string project_id;
  std::string key_id;
};

/// Phase durations of one operation, for Server-Timing and `timing`.
struct Timing {
  std::vector<std::pair<std::string, double>> phases;
  void add(std::string name, double ms) { phases.emplace_back(std::move(name), ms); }
  /// Runs the stopwatch's lap into `name` and restarts it.
  void lap(std::string name, Stopwatch& sw) {
    add(std::move(name), sw.elapsed_ms());
    sw.reset();
  }
};

/// The outcome of an exec.
struct ExecResult {
  int exit_code = -1;
  std::string stdout_data, stderr_data;
  bool timed_out = false;
  bool stdout_truncated = false, stderr_truncated = false;
  double duration_ms = 0;
};

/// Returns true when the client that asked has gone away (its work is then cancelled).
using CancelCheck = std::function<bool()>;
/// Reads the next chunk of an upload into buf; 0 at the end.
using ChunkSource = std::function<Result<size_t>(char* buf, size_t cap)>;
/// Receives a download: `begin(size)` once, then `data` chunks.
struct FileSink {
  std::function<Result<void>(uint64_t size)> begin;
  std::function<Result<void>(std::string_view chunk)> data;
};

class SandboxService {
 public:
  /// `gw` serves model calls from inside sandboxes (nullptr: they get 503).
  SandboxService(config::Config cfg, store::Store& store, gateway::Gateway* gw = nullptr);
  ~SandboxService();

  /// Reattaches to sandboxes that survived a b3osd restart, fails the rest, removes
  /// containers and files nobody owns, and starts the timeout reaper.
  Result<void> recover();
  /// Stops the reaper; running sandboxes keep running (a restart reattaches them).
  void stop();

  Result<nlohmann::json> create(const Principal& p, const SandboxSpec& spec, Timing& t);
  Result<nlohmann::json> get(const Principal& p, const std::string& id);
  /// One page: {"object":"list","data":[...],"next_cursor":...}.
  Result<nlohmann::json> list(const Principal& p, store::SandboxQuery q);
  Result<nlohmann::json> remove(const Principal& p, const std::string& id, Timing& t);
  /// Freezes a running sandbox (status paused; no vCPU is metered) and thaws it again. Both
  /// answer the sandbox; pausing a paused one or resuming a running one changes nothing.
  Result<nlohmann::json> pause(const Principal& p, const std::string& id, Timing& t);
  Result<nlohmann::json> resume(const Principal& p, const std::string& id, Timing& t);
  /// Saves a running sandbox's memory, disk and processes under a new snapshot id (on disk
  /// under DATA_DIR/snapshots; it outlives the sandbox and restarts of b3osd).
  Result<nlohmann::json> snapshot(const Principal& p, const std::string& id, Timing& t);
  Result<nlohmann::json> get_snapshot(const Principal& p, const std::string& id);
  Result<nlohmann::json> list_snapshots(const Principal& p, const std::optional<std::string>& after_id, int limit);
  Result<nlohmann::json> delete_snapshot(const Principal& p, const std::string& id);
  /// Forks a running forkable sandbox into `count` new running sandboxes with its memory,
  /// disk and processes: {"object":"list","data":[...]}. All or nothing.
  Result<nlohmann::json> fork(const Principal& p, const std::string& id, int count,
                              const std::optional<std::map<std::string, std::string>>& metadata, Timing& t);

  Result<ExecResult> exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                          const CancelCheck& cancelled);
  Result<nlohmann::json> write_file(const Principal& p, const std::string& id, const std::string& path,
                                    const ChunkSource& source, Timing& t);
  Result<void> read_file(const Principal& p, const std::string& id, const std::string& path, FileSink& sink,
                         Timing& t);
  Result<nlohmann::json> list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t);
  Result<nlohmann::json> remove_path(const Principal& p, const std::string& id, const std::string& path,
                                     bool recursive, Timing& t);

  /// The templates this node knows: {"object":"list","data":[...]}.
  nlohmann::json templates() const;

  /// Round trip over a sandbox's agent channel (benchmarks).
  Result<double> ping(const Principal& p, const std::string& id);

 private:
  struct Sandbox;

  /// What starting one container needs: a boot, or a restore of a checkpoint image.
  struct Launch {
    std::string id, project_id, rootfs;
    int vcpu = 1, memory_mib = 512;
    std::string image;  // checkpoint directory to restore; empty: the template's (boot or restore)
    bool from_pool = true;  // may take a pre-created container (the pool's own refills may not)
  };
  /// A template's checkpoint: a booted, agent-ready sandbox of it, saved once at start.
  struct TemplateImage {
    std::string dir;            // empty until built
    int memory_mib = 0;         // the shape it was booted with (restores must match it)
    double boot_ms = 0;         // start + agent ready, measured when it was built
    double restore_ms = 0;      // restore + agent ready, measured right after
    bool use = false;           // creates restore it
    std::string error;          // why building it failed
  };
  /// A container created (its shim holding the channel) but not started yet.
  struct Precreated {
    std::shared_ptr<Sandbox> sandbox;
    UniqueFd daemon_end;
  };
  /// The first half of a launch: directory, socketpair, shim, `runsc create`.
  Result<Precreated> precreate(const Launch& l, Timing& t, Stopwatch& sw);
  /// Starts a container with its shim and channel, agent ready, identity and limits applied.
  /// On failure nothing of it is left.
  Result<std::shared_ptr<Sandbox>> launch(const Launch& l, Timing& t, Stopwatch& sw);
  Result<nlohmann::json> create_from_snapshot(const Principal& p, const SandboxSpec& request, Timing& t);
  /// The common tail of create: reserve, launch (boot, or restore `snapshot_id`), record.
  Result<nlohmann::json> create_launched(const Principal& p, const SandboxSpec& spec, const std::string& tname,
                                         const std::string& rootfs, const std::string& snapshot_id, Timing& t,
                                         Stopwatch& sw, const std::string& inherited_budget = "");
  /// The budget a new sandbox's model calls charge: `inherited` (a snapshot's), a new grant
  /// with the spec's cap, or the creating key's own budget when the spec gives no cap.
  Result<std::string> grant_budget(const Principal& p, const SandboxSpec& spec, const std::string& inherited);
  /// Serves one HTTP request the agent relayed from inside sandbox `id` (on its own thread).
  void serve_relay(const std::string& id, std::shared_ptr<agentlink::Stream> st);
  void relay_one(const std::string& id, const std::shared_ptr<agentlink::Stream>& st);
  /// Starts a sandbox's channel with the relay handler attached.
  std::shared_ptr<agentlink::AgentChannel> start_channel(UniqueFd fd, const std::string& id);
  /// Counts `n` sandboxes about to start against the project's and the node's limits.
  Result<void> reserve(const std::string& project_id, int n);
  void unreserve(const std::string& project_id, int n);
  /// Undoes a launch that will not become a sandbox.
  void discard(Sandbox& s);
  std::shared_ptr<Sandbox> find_live(const Principal& p, const std::string& id);
  Result<std::shared_ptr<Sandbox>> running(const Principal& p, const std::string& id);
  Result<std::shared_ptr<agentlink::Stream>> open_stream(Sandbox& s, const nlohmann::json& request);
  /// One request whose whole answer is the agent's END (list, remove, stat).
  Result<nlohmann::json> call_agent(const Principal& p, const std::string& id, const nlohmann::json& request);
  nlohmann::json view(const Sandbox& s) const;
  /// Turns a channel failure into "the sandbox stopped: why" when the sandbox is gone.
  Error explain(Sandbox& s, Error e);
  Result<void> persist(Sandbox& s);
  void touch(Sandbox& s);
  /// Moves a sandbox to stopped/failed, persists it, and releases every host resource.
  void finish(const std::shared_ptr<Sandbox>& s, const std::string& status, const std::string& reason,
              const std::string& message);
  void release(const std::string& id, pid_t shim_pid);
  void reaper_loop();
  /// Pauses `s` (caller holds no lock); `why` goes to the log.
  Result<void> pause_locked(Sandbox& s, const char* why);
  /// Writes a checkpoint of running sandbox `s` into `dir`, with the channel quiesced.
  Result<void> checkpoint_into(Sandbox& s, const std::string& dir, Timing& t, Stopwatch& sw);
  void on_channel_closed(const std::string& id, const std::string& why);
  std::string diagnose_exit(const std::string& id);
  Result<pid_t> start_shim(const std::string& dir, int fd);
  std::string template_rootfs(const std::string& name) const;

  config::Config cfg_;
  store::Store& store_;
  gateway::Gateway* gw_;
  runtime::Runsc runsc_;

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Sandbox>> live_;  // running or paused sandboxes
  int starting_ = 0;                                      // creates in flight (capacity)
  std::map<std::string, int> starting_by_project_;

  /// Takes a ready sandbox from the warm pool for `spec`, or nullptr (then boot one).
  std::shared_ptr<Sandbox> claim_warm(const SandboxSpec& spec, const std::string& tname);
  void pool_loop();
  /// Boots a sandbox of `tname`, checkpoints it into DATA_DIR/template-images/tname, and times
  /// a restore of it against the boot.
  void build_template_image(const std::string& tname);
  /// The checkpoint a boot of this launch may restore instead, or "".
  std::string template_image_for(const Launch& l);

  /// Holds pool refills back while a request is launching or forking: a refill's `runsc
  /// create` on a small machine would take the CPU the request is waiting for.
  class Busy {
   public:
    explicit Busy(SandboxService& s) : s_(s) { ++s_.busy_; }
    ~Busy() {
      if (--s_.busy_ == 0) s_.pool_cv_.notify_all();
    }
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    SandboxService& s_;
  };
  std::atomic<int> busy_{0};
  mutable std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<std::shared_ptr<Sandbox>> warm_;  // booted, agent ready, owned by no project
  std::deque<Precreated> precreated_;          // created, not started: restores and boots of base
  std::map<std::string, TemplateImage> images_;  // by template name
  std::thread pool_thread_;
  bool stopping_pool_ = false;

  std::thread reaper_;
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  bool stopping_ = false;
};

/// Adds `usage` to a sandbox document from its lifetime (pure; unit-tested).
void compute_usage(nlohmann::json& doc, int64_t now_ms);

}  // namespace b3os::sandbox
