#include "daemon/sandbox/pools.h"

#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/metrics.h"

namespace b3os::sandbox {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {
/// The sum of the named phases of a launch.
double phase_sum(const Timing& t, std::initializer_list<std::string_view> names) {
  double ms = 0;
  for (auto& [name, v] : t.phases)
    for (auto n : names) ms += name == n ? v : 0;
  return ms;
}
}  // namespace

Pools::Pools(const Config& cfg, runtime::Runtime& rt, Launcher& launcher, Registry& registry, Checkpointer checkpoint)
    : cfg_(cfg), rt_(rt), launcher_(launcher), registry_(registry), checkpoint_(std::move(checkpoint)) {}

void Pools::start() {
  if (cfg_.warm_pool_size > 0 || cfg_.fork_pool_size > 0 || cfg_.template_checkpoints != "off" ||
      (networks() && (cfg_.net_warm_pool_size > 0 || cfg_.net_fork_pool_size > 0)))
    thread_ = std::thread([this] { loop(); });
}

void Pools::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  discard_doomed();
  std::deque<std::shared_ptr<LiveSandbox>> warm;
  std::deque<Precreated> created;
  {
    std::lock_guard lk(mu_);
    for (int n = 0; n < 2; ++n) {
      for (auto& m : warm_[n]) warm.push_back(std::move(m));
      for (auto& m : precreated_[n]) created.push_back(std::move(m));
      warm_[n].clear();
      precreated_[n].clear();
    }
    for (auto& [key, pool] : template_pools_) {
      for (auto& m : pool.members) warm.push_back(std::move(m));
      pool.members.clear();
    }
  }
  registry_.pooled(-static_cast<int>(warm.size() + created.size()));
  // Outside the lock: each discard waits for the runtime and the shim.
  for (auto& s : warm) launcher_.discard(*s);
  for (auto& pc : created) launcher_.discard(*pc.sandbox);
}

std::string Pools::image_for(const LaunchRequest& l) const {
  // The template's image was saved without a network: its netstack has no interface to restore.
  if (cfg_.template_checkpoints == "off" || l.network) return "";
  std::lock_guard lk(mu_);
  for (auto& [name, img] : images_)
    if (img.use && !img.dir.empty() && img.memory_mib == l.memory_mib &&
        l.rootfs == cfg_.templates_dir() + "/" + name + "/rootfs")
      return img.dir;
  return "";
}

namespace {
// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_claims = metrics::metrics().counter(
    "b3os_pool_claims_total",
    "requests that could take a pool member, by pool (warm, fork, net_warm, net_fork, template) and outcome (hit, miss)",
    {"pool", "outcome"});

/// b3os_pool_claims_total{pool, outcome}: a request that could use a pool's member took one
/// (hit) or found none and did the work itself (miss).
void count_claim(const char* pool, bool hit) {
  m_claims.with({pool, hit ? "hit" : "miss"}).inc();
}
}  // namespace

Pools::Sizes Pools::sizes() const {
  Sizes z;
  {
    std::lock_guard lk(mu_);
    z.warm = static_cast<int>(warm_[0].size());
    z.net_warm = static_cast<int>(warm_[1].size());
    z.fork = static_cast<int>(precreated_[0].size());
    z.net_fork = static_cast<int>(precreated_[1].size());
  }
  z.warm_target = warm_size(false);
  z.fork_target = precreated_size(false);
  z.net_warm_target = networks() ? warm_size(true) : 0;
  z.net_fork_target = networks() ? precreated_size(true) : 0;
  return z;
}

std::optional<TemplateImage> Pools::template_image(const std::string& name) const {
  std::lock_guard lk(mu_);
  auto it = images_.find(name);
  if (it == images_.end()) return std::nullopt;
  return it->second;
}

Result<std::shared_ptr<LiveSandbox>> Pools::launch(LaunchRequest l, Timing& t, Stopwatch& sw) {
  std::optional<Hold> hold;
  if (l.from_pool) hold.emplace(*this);
  if (l.image.empty()) l.image = image_for(l);
  // A launch of the base template's shape can take a container created ahead of time: any
  // restore (the image fixes the memory), or a boot with the pool's default memory size.
  // Its disk was made with it, of the default size (a mounted ext4 cannot shrink, and growing
  // it online needs CAP_SYS_RESOURCE): a launch that asks for another size makes its own.
  std::optional<Precreated> pc;
  if (l.from_pool && l.rootfs == base_rootfs() && (!l.image.empty() || l.memory_mib == LaunchRequest{}.memory_mib)) {
    std::lock_guard lk(mu_);
    auto& pool = precreated_[l.network ? 1 : 0];
    if (!pool.empty() && pool.front().sandbox->disk_gib == launcher_.disk_for(l)) {
      pc = std::move(pool.front());
      pool.pop_front();
    }
  }
  // Counted only for a launch a member could have served (the shape the pool makes).
  if (l.from_pool && precreated_size(l.network) > 0 && l.rootfs == base_rootfs() &&
      (!l.image.empty() || l.memory_mib == LaunchRequest{}.memory_mib) &&
      launcher_.disk_for(l) == launcher_.disk_for(LaunchRequest{}))
    count_claim(l.network ? "net_fork" : "fork", pc.has_value());
  if (pc) {
    registry_.pooled(-1);
    cv_.notify_all();  // refill
  }
  return launcher_.launch(l, std::move(pc), t, sw);
}

std::shared_ptr<LiveSandbox> Pools::claim_warm(const std::string& template_name, bool forkable, int disk_gib,
                                              bool network) {
  // Forkable sandboxes are restored for themselves, never claimed; the pool holds `base`.
  if (forkable || template_name != "base" || warm_size(network) <= 0) return nullptr;
  auto& pool = warm_[network ? 1 : 0];
  LaunchRequest shape;  // what the members were launched with
  shape.disk_gib = disk_gib;
  if (launcher_.disk_for(shape) != launcher_.disk_for(LaunchRequest{})) return nullptr;
  for (;;) {
    std::shared_ptr<LiveSandbox> s;
    {
      std::lock_guard lk(mu_);
      if (pool.empty()) break;
      s = pool.front();
      pool.pop_front();
    }
    registry_.pooled(-1);
    settle();
    cv_.notify_all();  // refill
    // Outside the lock: a member that died while waiting is discarded without holding up
    // any other claim.
    rt_.set_frozen(s->id, false);
    if (!s->channel->closed()) {
      count_claim(network ? "net_warm" : "warm", true);
      return s;
    }
    {
      std::lock_guard lk(mu_);
      doomed_.push_back(std::move(s));
    }
    cv_.notify_all();
  }
  count_claim(network ? "net_warm" : "warm", false);
  return nullptr;
}

void Pools::settle() {
  const int64_t until = steady_ms() + cfg_.refill_settle_ms;
  int64_t cur = settled_at_ms_.load();
  while (cur < until && !settled_at_ms_.compare_exchange_weak(cur, until)) {
  }
}

void Pools::set_template_pool(const std::string& key, int target, const LaunchRequest& shape) {
  std::deque<std::shared_ptr<LiveSandbox>> gone;
  {
    std::lock_guard lk(mu_);
    if (target <= 0) {
      auto it = template_pools_.find(key);
      if (it == template_pools_.end()) return;
      gone = std::move(it->second.members);
      template_pools_.erase(it);
    } else {
      auto& pool = template_pools_[key];
      pool.target = target;
      pool.shape = shape;
      while (static_cast<int>(pool.members.size()) > target) {
        gone.push_back(std::move(pool.members.back()));
        pool.members.pop_back();
      }
    }
    for (auto& m : gone) doomed_.push_back(std::move(m));
  }
  registry_.pooled(-static_cast<int>(gone.size()));
  cv_.notify_all();
  if (target > 0 && !thread_.joinable()) {
    std::lock_guard lk(mu_);
    if (!stopping_ && !thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
}

std::shared_ptr<LiveSandbox> Pools::claim_template(const std::string& key, int memory_mib, int disk_gib) {
  for (;;) {
    std::shared_ptr<LiveSandbox> s;
    {
      std::lock_guard lk(mu_);
      auto it = template_pools_.find(key);
      if (it == template_pools_.end()) return nullptr;
      // The image fixes the memory; a mounted disk cannot shrink or grow.
      if (it->second.shape.memory_mib != memory_mib || it->second.shape.disk_gib != disk_gib) return nullptr;
      if (it->second.members.empty()) {
        count_claim("template", false);
        return nullptr;
      }
      s = it->second.members.front();
      it->second.members.pop_front();
    }
    registry_.pooled(-1);
    settle();
    cv_.notify_all();  // refill
    rt_.set_frozen(s->id, false);
    if (!s->channel->closed()) {
      count_claim("template", true);
      return s;
    }
    std::lock_guard lk(mu_);
    doomed_.push_back(std::move(s));
  }
}

bool Pools::refill_template_pool() {
  std::string key;
  LaunchRequest l;
  {
    std::lock_guard lk(mu_);
    int held = 0;
    for (auto& [k, pool] : template_pools_) held += static_cast<int>(pool.members.size());
    if (held >= template_pool_cap_) return false;
    for (auto& [k, pool] : template_pools_)
      if (static_cast<int>(pool.members.size()) < pool.target) {
        key = k;
        l = pool.shape;
        break;
      }
  }
  if (key.empty() || !registry_.reserve("", 1)) return false;
  Reservation reserved(registry_, "", 1);
  l.id = new_id("sbx");
  l.project_id.clear();
  l.from_pool = false;
  l.network = false;
  Timing t;
  Stopwatch sw;
  auto s = launcher_.launch(l, std::nullopt, t, sw);
  if (!s) {
    spdlog::warn("template pool {}: {}", key, s.error().message);
    return false;
  }
  rt_.set_frozen((*s)->id, true);
  std::lock_guard lk(mu_);
  auto it = template_pools_.find(key);
  if (stopping_ || it == template_pools_.end() || static_cast<int>(it->second.members.size()) >= it->second.target) {
    doomed_.push_back(std::move(*s));  // the pool went or filled meanwhile
    return true;
  }
  registry_.pooled(+1);
  it->second.members.push_back(std::move(*s));
  return true;
}

void Pools::discard_doomed() {
  for (;;) {
    std::shared_ptr<LiveSandbox> s;
    {
      std::lock_guard lk(mu_);
      if (doomed_.empty()) return;
      s = std::move(doomed_.front());
      doomed_.pop_front();
    }
    launcher_.discard(*s);
  }
}

void Pools::build_template_image(const std::string& tname) {
  TemplateImage img;
  const std::string dir = cfg_.data_dir + "/template-images/" + tname;
  const std::string building = dir + ".building";
  std::error_code ec;
  auto give_up = [&](const std::string& why) {
    spdlog::warn("template {}: no checkpoint ({}); creates boot", tname, why);
    fs::remove_all(building, ec);
    img.error = why;
    std::lock_guard lk(mu_);
    images_[tname] = img;
  };
  // Rebuilt at every start: an image from another runsc, agent or rootfs would not restore.
  fs::remove_all(dir, ec);
  fs::remove_all(building, ec);
  fs::create_directories(building, ec);
  if (ec) return give_up("creating " + building + ": " + ec.message());
  if (!registry_.reserve("", 2)) return give_up("the node is full");
  Reservation reserved(registry_, "", 2);

  LaunchRequest l;
  l.id = new_id("sbx");
  l.rootfs = cfg_.templates_dir() + "/" + tname + "/rootfs";
  l.from_pool = false;
  Timing boot_t;
  Stopwatch sw;
  auto booted = launcher_.launch(l, std::nullopt, boot_t, sw);
  if (!booted) return give_up(booted.error().message);
  img.boot_ms = phase_sum(boot_t, {"start", "agent"});
  img.memory_mib = l.memory_mib;
  Timing ck_t;
  auto saved = checkpoint_(**booted, building, ck_t, sw);
  launcher_.discard(**booted);
  if (!saved) return give_up(saved.error().message);
  fs::rename(building, dir, ec);
  if (ec) return give_up("renaming " + building + ": " + ec.message());
  img.dir = dir;

  // Time one restore of it, like for like with the boot (both after the runtime's create).
  LaunchRequest r = l;
  r.id = new_id("sbx");
  r.image = dir;
  Timing restore_t;
  auto restored = launcher_.launch(r, std::nullopt, restore_t, sw);
  if (!restored) {
    fs::remove_all(dir, ec);
    img.dir.clear();
    return give_up("a trial restore failed: " + restored.error().message);
  }
  img.restore_ms = phase_sum(restore_t, {"restore", "agent"});
  launcher_.discard(**restored);
  img.use = cfg_.template_checkpoints == "on" || img.restore_ms < img.boot_ms;
  spdlog::info("template {}: checkpoint saved; boot {:.1f} ms, restore {:.1f} ms: creates {}", tname, img.boot_ms,
               img.restore_ms, img.use ? "restore it" : "boot");
  std::lock_guard lk(mu_);
  images_[tname] = img;
}

void Pools::loop() {
  bool image_tried = false;
  for (;;) {
    discard_doomed();
    if (!image_tried && cfg_.template_checkpoints != "off" && fs::exists(cfg_.templates_dir() + "/base/.b3os-ready")) {
      image_tried = true;
      build_template_image("base");
    }
    bool templates_pooled;
    {
      std::lock_guard lk(mu_);
      templates_pooled = !template_pools_.empty();
    }
    const bool any_pool = cfg_.warm_pool_size > 0 || cfg_.fork_pool_size > 0 || templates_pooled ||
                          (networks() && (cfg_.net_warm_pool_size > 0 || cfg_.net_fork_pool_size > 0));
    if (!any_pool) {
      // Nothing to keep now; a template pool may be asked for later (set_template_pool).
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, 5s, [&] { return stopping_ || !template_pools_.empty(); });
      if (stopping_) return;
      continue;
    }
    // Which pool is short, first the ones without a network (most creates), warm before fork.
    int want = -1;  // 2 * network + (warm ? 0 : 1)
    {
      std::unique_lock lk(mu_);
      auto short_of = [&] {
        want = -1;
        for (int n = 0; n < (networks() ? 2 : 1) && want < 0; ++n) {
          if (static_cast<int>(warm_[n].size()) < warm_size(n == 1)) want = 2 * n;
          else if (static_cast<int>(precreated_[n].size()) < precreated_size(n == 1)) want = 2 * n + 1;
        }
        // Then the templates' own pools, within their node-wide cap.
        if (want < 0) {
          int held = 0;
          bool short_one = false;
          for (auto& [k, pool] : template_pools_) {
            held += static_cast<int>(pool.members.size());
            short_one = short_one || static_cast<int>(pool.members.size()) < pool.target;
          }
          if (short_one && held < template_pool_cap_) want = 4;
        }
        return want >= 0;
      };
      cv_.wait_for(lk, 2s, [&] { return stopping_ || !doomed_.empty() || short_of(); });
      if (stopping_) return;
      if (!doomed_.empty() || want < 0) continue;
      // Refill once no request is launching, and none got its sandbox in the last
      // refill_settle_ms (its caller's next request is on its way): a request never waits on
      // the pool's CPU use. Under a steady stream of requests the pause is waited for at most
      // a second, or the pools would never refill.
      cv_.wait_for(lk, 10s, [&] { return stopping_ || busy_ == 0; });
      // A launch in flight ends with a notify (Hold), which pushes the pause on: no polling.
      const int64_t give_up = steady_ms() + 1000;
      for (int64_t now = steady_ms(); !stopping_ && launching() && now < give_up; now = steady_ms()) {
        const int64_t until = busy_ > 0 ? give_up : std::min(settled_at_ms_.load(), give_up);
        cv_.wait_for(lk, std::chrono::milliseconds(std::max<int64_t>(1, until - now)));
      }
      if (stopping_) return;
    }
    if (want == 4 ? !refill_template_pool() : !refill(want >= 2, want % 2 == 0)) {
      // No template yet, a full node or a broken runtime: wait rather than spin.
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, 5s, [&] { return stopping_; });
      if (stopping_) return;
    }
  }
}

bool Pools::refill(bool network, bool warm) {
  if (!fs::exists(cfg_.templates_dir() + "/base/.b3os-ready") || !registry_.reserve("", 1)) return false;
  Reservation reserved(registry_, "", 1);
  LaunchRequest l;
  l.id = new_id("sbx");
  l.rootfs = base_rootfs();
  l.from_pool = false;
  l.network = network;
  Timing t;
  Stopwatch sw;
  const char* which = network ? (warm ? "warm pool (network)" : "fork pool (network)") : (warm ? "warm pool" : "fork pool");
  // Members wait frozen: an idle sentry still ticks (~40 ms of CPU a second).
  if (warm) {
    auto s = launcher_.launch(l, std::nullopt, t, sw);
    if (!s) {
      spdlog::warn("{}: {}", which, s.error().message);
      return false;
    }
    // Public is what most networked creates ask for: applied now, a claim of it costs nothing.
    if (network) {
      if (auto r = launcher_.apply_egress(**s, net::EgressPolicy{"public", {}}); !r) {
        spdlog::warn("{}: {}", which, r.error().message);
        launcher_.discard(**s);
        return false;
      }
    }
    rt_.set_frozen((*s)->id, true);
    registry_.pooled(+1);
    std::lock_guard lk(mu_);
    warm_[network ? 1 : 0].push_back(*s);
    return true;
  }
  auto pc = launcher_.precreate(l, t, sw);
  if (!pc) {
    spdlog::warn("{}: {}", which, pc.error().message);
    return false;
  }
  rt_.set_frozen(pc->sandbox->id, true);
  registry_.pooled(+1);
  std::lock_guard lk(mu_);
  precreated_[network ? 1 : 0].push_back(std::move(*pc));
  return true;
}

}  // namespace b3os::sandbox
