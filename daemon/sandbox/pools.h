#pragma once
// Pools: sandboxes made ahead of time so requests skip work. The warm pool keeps booted `base`
// sandboxes (agent up, no project) for non-forkable creates; the fork pool keeps containers
// created but not started, for forks, snapshot restores and boots of the base shape; template
// images are checkpoints of a booted template that creates may restore instead of booting.
// One background thread refills them, only while no request is launching. Members wait frozen.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "daemon/runtime/runtime.h"
#include "daemon/sandbox/config.h"
#include "daemon/sandbox/launcher.h"
#include "daemon/sandbox/registry.h"

namespace b3os::sandbox {

/// A template's checkpoint: a booted, agent-ready sandbox of it, saved once at start.
struct TemplateImage {
  std::string dir;        // empty until built
  int memory_mib = 0;     // the shape it was booted with (restores must match it)
  double boot_ms = 0;     // start + agent ready, measured when it was built
  double restore_ms = 0;  // restore + agent ready, measured right after
  bool use = false;       // creates restore it
  std::string error;      // why building it failed
};

class Pools {
 public:
  /// Writes a checkpoint of a running sandbox into a directory (checkpoints.cc).
  using Checkpointer = std::function<Result<void>(LiveSandbox&, const std::string& dir, Timing&, Stopwatch&)>;
  Pools(const Config& cfg, runtime::Runtime& rt, Launcher& launcher, Registry& registry, Checkpointer checkpoint);
  ~Pools() { stop(); }

  void start();
  /// Stops the refill thread and removes every pool member (they belong to no one).
  void stop();

  /// Launches `l`: restores the template's image when creates use it, and takes a pre-created
  /// container when one fits. While it runs, refills wait.
  Result<std::shared_ptr<LiveSandbox>> launch(LaunchRequest l, Timing& t, Stopwatch& sw);
  /// A ready sandbox from the warm pool for a create of `template_name`, or nullptr.
  /// Members have disks of the default disk_gib; a request for another size is not served.
  /// `network`: a member with a namespace of its own (egress public or allowlist); those wait
  /// with egress public applied, so a public create claims one without a firewall change.
  std::shared_ptr<LiveSandbox> claim_warm(const std::string& template_name, bool forkable, int disk_gib,
                                          bool network = false);
  /// A warm pool of a template users built (`key`: its build id), whose members are restored
  /// from the template's checkpoint (`shape`: rootfs, image, memory_mib, disk_gib) and wait
  /// frozen, without a network of their own. `target` 0 removes the pool and its members. The
  /// members of all templates' pools together are at most `node_cap` (first asked, first served).
  void set_template_pool(const std::string& key, int target, const LaunchRequest& shape);
  void set_template_pool_cap(int node_cap) { template_pool_cap_ = node_cap; }
  /// A member of template pool `key` for a non-forkable create of that shape, or nullptr.
  std::shared_ptr<LiveSandbox> claim_template(const std::string& key, int memory_mib, int disk_gib);
  /// Members waiting in each pool now, and each pool's target size (for metrics).
  struct Sizes {
    int warm = 0, fork = 0, net_warm = 0, net_fork = 0;
    int warm_target = 0, fork_target = 0, net_warm_target = 0, net_fork_target = 0;
    int fork_ahead = 0, fork_ahead_target = 0;  // fork-ahead's spares (filled by the service)
  };
  Sizes sizes() const;
  /// What is known of a template's checkpoint (nullopt: not built yet).
  std::optional<TemplateImage> template_image(const std::string& name) const;

  /// Whether a request is launching or forking now (a Hold is held), or one ended (or took a
  /// pool member) less than refill_settle_ms ago: background work waits.
  bool launching() const { return busy_.load() > 0 || steady_ms() < settled_at_ms_.load(); }
  /// A request got what it asked for (a launch or a claim ended): background work waits
  /// refill_settle_ms more, so that the caller's next request has the CPU.
  void settle();

  /// Holds refills back while a request is launching or forking: on a small machine a refill's
  /// runtime create would take the CPU the request is waiting for.
  class Hold {
   public:
    explicit Hold(Pools& p) : p_(p) { ++p_.busy_; }
    ~Hold() {
      p_.settle();
      if (--p_.busy_ == 0) p_.cv_.notify_all();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    Pools& p_;
  };

 private:
  void loop();
  /// Discards the members found dead (on the pool's thread: a slow runtime delays no request).
  void discard_doomed();
  void build_template_image(const std::string& name);
  std::string image_for(const LaunchRequest& l) const;
  std::string base_rootfs() const { return cfg_.templates_dir() + "/base/rootfs"; }

  const Config& cfg_;
  runtime::Runtime& rt_;
  Launcher& launcher_;
  Registry& registry_;
  Checkpointer checkpoint_;

  std::atomic<int> busy_{0};
  std::atomic<int64_t> settled_at_ms_{0};  // steady_ms() before which background work waits
  mutable std::mutex mu_;  // warm_, precreated_, images_, stopping_
  std::condition_variable cv_;
  // Index 0: no network; 1: a namespace of its own.
  std::deque<std::shared_ptr<LiveSandbox>> warm_[2];
  std::deque<Precreated> precreated_[2];
  int warm_size(bool network) const { return network ? cfg_.net_warm_pool_size : cfg_.warm_pool_size; }
  int precreated_size(bool network) const { return network ? cfg_.net_fork_pool_size : cfg_.fork_pool_size; }
  bool networks() const { return launcher_.network() != nullptr; }
  /// Adds one member to the pool that is short of one (false: none could be made now).
  bool refill(bool network, bool warm);
  std::deque<std::shared_ptr<LiveSandbox>> doomed_;  // dead members the thread discards
  std::map<std::string, TemplateImage> images_;
  struct TemplatePool {
    int target = 0;
    LaunchRequest shape;
    std::deque<std::shared_ptr<LiveSandbox>> members;
  };
  std::map<std::string, TemplatePool> template_pools_;  // by build id
  int template_pool_cap_ = 8;
  /// Adds a member to a template pool that is short of one (false: none is, or none could be made).
  bool refill_template_pool();
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace b3os::sandbox
