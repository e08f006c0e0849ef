#include "daemon/sandbox/service.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <thread>

#include <algorithm>
#include <filesystem>

namespace b3os::sandbox {

using nlohmann::json;
namespace fs = std::filesystem;

Capacity node_capacity(const Config& cfg) {
  Capacity c;
  const int64_t total_mib = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) >> 20;
  const int64_t usable_mib = std::max<int64_t>(0, total_mib - cfg.runtime.memory_reserve_mib);
  c.max_memory_mib = usable_mib;
  c.node.memory_mib = static_cast<int64_t>(static_cast<double>(usable_mib) * cfg.memory_overcommit);
  c.node.vcpu = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()) * cfg.vcpu_overcommit);
  const double reserve = cfg.disk_reserve_gib;
  // The filesystem the disks live on: their directory, or the nearest one above it that is
  // there yet (the directory is made at the first disk).
  auto disk_fs = [dir = cfg.runtime.disks.dir.empty() ? cfg.data_dir : cfg.runtime.disks.dir](struct statvfs& st) {
    for (std::string d = dir; !d.empty(); d = d.substr(0, d.find_last_of('/'))) {
      if (::statvfs(d.c_str(), &st) == 0) return true;
      if (d.find('/') == std::string::npos || d == "/") break;
    }
    return ::statvfs("/", &st) == 0;
  };
  struct statvfs st {};
  if (cfg.runtime.root_overlay == "disk" && disk_fs(st)) {
    const double total_gib = static_cast<double>(st.f_blocks) * st.f_frsize / double(1 << 30);
    c.node.disk_gib = static_cast<int64_t>(std::max(0.0, total_gib - reserve) * cfg.disk_overcommit);
    c.disk_free_gib = [disk_fs, reserve] {
      struct statvfs now {};
      if (!disk_fs(now)) return int64_t{1} << 40;  // unknown: not refused here
      return static_cast<int64_t>(static_cast<double>(now.f_bavail) * now.f_frsize / double(1 << 30) - reserve);
    };
  }
  c.per_project = Size{cfg.project_max_memory_mib, cfg.project_max_vcpu, cfg.project_max_disk_gib};
  return c;
}

SandboxService::SandboxService(Config cfg, runtime::Runtime& rt, runtime::Shims& shims, store::SandboxStore& store,
                               ModelHooks hooks, net::Network* network)
    : cfg_(std::move(cfg)),
      rt_(rt),
      port_urls_(PortUrls::load(cfg_.preview)),
      hooks_(std::move(hooks)),
      registry_(cfg_.max_sandboxes_per_project, cfg_.max_sandboxes_per_node, &store),
      freezer_(rt, registry_, cfg_.idle_freeze_ms),
      launcher_(cfg_, rt, shims, network),
      pools_(cfg_, rt, launcher_, registry_,
             [this](LiveSandbox& s, const std::string& dir, Timing& t, Stopwatch& sw) {
               return checkpoints_.write_image(s, dir, t, sw);
             }),
      life_(cfg_, rt, shims, store, registry_, launcher_, pools_, freezer_, hooks_.spent_usd, &port_urls_),
      checkpoints_(cfg_, rt, store, registry_, pools_, life_),
      fork_ahead_(cfg_, registry_, pools_, launcher_,
                  [this](const std::shared_ptr<LiveSandbox>& s) { return checkpoints_.make_spare(s); }),
      exec_(cfg_, life_),
      ports_(port_urls_, store, registry_, life_),
      reaper_(registry_, life_, std::chrono::milliseconds(cfg.liveness_quiet_ms),
              std::chrono::milliseconds(cfg.liveness_timeout_ms)) {
  Launcher::IncomingHandler incoming;
  if (hooks_.incoming)
    incoming = [this](const std::string& id, std::shared_ptr<agentlink::Stream> st) {
      guarded([&] { hooks_.incoming(id, std::move(st)); });
    };
  launcher_.set_handlers(
      [this](const std::string& id, const std::string& why) { guarded([&] { life_.on_channel_closed(id, why); }); },
      incoming);
  checkpoints_.set_fork_ahead(&fork_ahead_);
  registry_.set_capacity(node_capacity(cfg_));
  registry_.set_reclaimer([this](int n) { return fork_ahead_.give_way(n); });
}

void SandboxService::guarded(const std::function<void()>& fn) {
  {
    std::lock_guard lk(callbacks_mu_);
    if (callbacks_closed_) return;
    ++callbacks_active_;
  }
  fn();
  std::lock_guard lk(callbacks_mu_);
  if (--callbacks_active_ == 0) callbacks_cv_.notify_all();
}

SandboxService::~SandboxService() { stop(); }

Result<void> SandboxService::recover() {
  if (auto r = life_.recover(); !r) return r;
  // Orphans are removed behind the API (each takes seconds), never before it answers. A
  // `runsc create` the last b3osd started outlives it and can finish after the first look:
  // look again after 10 s, then every 5 minutes.
  sweeper_ = std::thread([this] {
    for (auto wait = std::chrono::seconds(10);; wait = std::chrono::seconds(300)) {
      life_.release_orphans(life_.orphans());
      std::unique_lock lk(sweep_mu_);
      first_sweep_done_ = true;
      sweep_cv_.notify_all();
      if (sweep_cv_.wait_for(lk, wait, [&] { return sweep_stopping_; })) return;
    }
  });
  ready_ = true;
  reaper_.start();
  pools_.start();
  freezer_.start();
  fork_ahead_.start();
  return {};
}

void SandboxService::stop() {
  fork_ahead_.stop();
  freezer_.stop();
  reaper_.stop();
  pools_.stop();
  // b3osd _Exits after this: the releases of sandboxes deleted just before (queued for the
  // cleaner threads) are finished first, or their containers would run on until the next
  // start's orphan sweep.
  launcher_.settle();
  {
    std::lock_guard lk(sweep_mu_);
    sweep_stopping_ = true;
  }
  sweep_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
  {
    std::unique_lock lk(callbacks_mu_);
    callbacks_closed_ = true;
    callbacks_cv_.wait(lk, [&] { return callbacks_active_ == 0; });
  }
  // The readers stop; the sandboxes run on (their shims keep the channels for a restart).
  for (auto& s : registry_.all())
    if (s->channel) s->channel->shutdown();
}

SandboxService::Stats SandboxService::stats() const {
  Stats st;
  for (auto& s : registry_.all()) {
    std::lock_guard lk(s->mu);
    // Live and visible only: one being created is not shown yet, one ending already shows its end.
    const store::State shown = store::settled(s->rec.state);
    if (s->rec.state == store::State::kCreating || (shown != store::State::kRunning && shown != store::State::kPaused))
      continue;
    ++st.sandboxes[{std::string(store::state_name(shown)), s->rec.template_name}];
  }
  st.usage = registry_.usage();
  st.pools = pools_.sizes();
  st.pools.fork_ahead = fork_ahead_.size();
  st.pools.fork_ahead_target = cfg_.fork_ahead > 0 ? cfg_.fork_ahead_node : 0;
  return st;
}

json SandboxService::templates() const {
  json data = json::array();
  std::map<std::string, std::string> names = builtin_templates();
  std::error_code ec;
  for (auto& e : fs::directory_iterator(cfg_.templates_dir(), ec)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && fs::exists(e.path() / ".b3os-ready") && !names.count(n)) names[n] = "";
  }
  for (auto& [n, desc] : names) {
    bool ready = fs::exists(cfg_.templates_dir() + "/" + n + "/.b3os-ready");
    json item = {{"id", "tpl_" + n}, {"object", "template"}, {"name", n}, {"status", ready ? "ready" : "missing"},
                 {"description", desc}};
    // b3os extension: the template's checkpoint, and whether creates restore it or boot.
    json ck = {{"status", cfg_.template_checkpoints == "off" ? "off" : "building"}};
    if (auto img = pools_.template_image(n)) {
      ck = {{"status", img->dir.empty() ? "failed" : "ready"},
            {"boot_ms", img->boot_ms},
            {"restore_ms", img->restore_ms},
            {"creates", img->use ? "restore" : "boot"}};
      if (!img->error.empty()) ck["error"] = img->error;
    }
    if (!ready) ck = {{"status", "missing"}};
    item["checkpoint"] = ck;
    data.push_back(item);
  }
  return {{"object", "list"}, {"data", data}, {"next_cursor", nullptr}};
}

std::optional<std::pair<uint64_t, uint64_t>> SandboxService::freeze_counts(const std::string& id) {
  auto s = registry_.find(id);
  if (!s) return std::nullopt;
  std::lock_guard lk(s->freeze_mu);
  return std::make_pair(s->freezes, s->thaws);
}

std::optional<ModelGrant> SandboxService::model_grant(const std::string& id) {
  auto s = registry_.find(id);
  if (!s) return std::nullopt;
  std::lock_guard lk(s->mu);
  const auto& scopes = s->rec.api_scopes;
  return ModelGrant{s->rec.project_id, s->rec.budget_id,
                    std::find(scopes.begin(), scopes.end(), "infer:run") != scopes.end()};
}

}  // namespace b3os::sandbox
