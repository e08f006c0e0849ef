// SandboxService: the warm pool and the fork pool of pre-created containers.
#include "daemon/sandbox/service_internal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <set>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "shim/fd_passing.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace detail;
namespace fs = std::filesystem;

std::shared_ptr<SandboxService::Sandbox> SandboxService::claim_warm(const SandboxSpec& spec, const std::string& tname) {
  // Forkable sandboxes are restored for themselves, never claimed; the pool holds `base`.
  if (spec.forkable || tname != "base" || cfg_.warm_pool_size <= 0) return nullptr;
  std::shared_ptr<Sandbox> s;
  {
    std::lock_guard lk(pool_mu_);
    while (!warm_.empty() && !s) {
      s = warm_.front();
      warm_.pop_front();
      runsc_.set_frozen(s->id, false);
      if (s->channel->closed()) {
        discard(*s);  // died while waiting; take the next
        s.reset();
      }
    }
  }
  pool_cv_.notify_all();  // refill
  return s;
}

namespace {
/// The sum of the named phases of a launch.
double phase_sum(const Timing& t, std::initializer_list<std::string_view> names) {
  double ms = 0;
  for (auto& [name, v] : t.phases)
    for (auto n : names) ms += name == n ? v : 0;
  return ms;
}
}  // namespace

std::string SandboxService::template_image_for(const Launch& l) {
  if (cfg_.template_checkpoints == "off") return "";
  std::lock_guard lk(pool_mu_);
  for (auto& [name, img] : images_)
    if (img.use && !img.dir.empty() && img.memory_mib == l.memory_mib &&
        l.rootfs == cfg_.templates_dir() + "/" + name + "/rootfs")
      return img.dir;
  return "";
}

void SandboxService::build_template_image(const std::string& tname) {
  TemplateImage img;
  const std::string dir = cfg_.data_dir + "/template-images/" + tname;
  const std::string building = dir + ".building";
  std::error_code ec;
  auto give_up = [&](const std::string& why) {
    spdlog::warn("template {}: no checkpoint ({}); creates boot", tname, why);
    fs::remove_all(building, ec);
    img.error = why;
    std::lock_guard lk(pool_mu_);
    images_[tname] = img;
  };
  // Rebuilt at every start: an image from another runsc, agent or rootfs would not restore.
  fs::remove_all(dir, ec);
  fs::remove_all(building, ec);
  fs::create_directories(building, ec);
  if (ec) return give_up("creating " + building + ": " + ec.message());
  if (!reserve("", 2)) return give_up("the node is full");
  ScopeExit unreserve_later([&] { unreserve("", 2); });

  Launch l;
  l.id = new_id("sbx");
  l.rootfs = cfg_.templates_dir() + "/" + tname + "/rootfs";
  l.from_pool = false;
  Timing boot_t;
  Stopwatch sw;
  auto booted = launch(l, boot_t, sw);
  if (!booted) return give_up(booted.error().message);
  img.boot_ms = phase_sum(boot_t, {"start", "agent"});
  img.memory_mib = l.memory_mib;
  Timing ck_t;
  auto saved = checkpoint_into(**booted, building, ck_t, sw);
  discard(**booted);
  if (!saved) return give_up(saved.error().message);
  fs::rename(building, dir, ec);
  if (ec) return give_up("renaming " + building + ": " + ec.message());
  img.dir = dir;

  // Time one restore of it, like for like with the boot (both after `runsc create`).
  Launch r = l;
  r.id = new_id("sbx");
  r.image = dir;
  Timing restore_t;
  auto restored = launch(r, restore_t, sw);
  if (!restored) {
    fs::remove_all(dir, ec);
    return give_up("a trial restore failed: " + restored.error().message);
  }
  img.restore_ms = phase_sum(restore_t, {"restore", "agent"});
  discard(**restored);
  img.use = cfg_.template_checkpoints == "on" || img.restore_ms < img.boot_ms;
  spdlog::info("template {}: checkpoint saved; boot {:.1f} ms, restore {:.1f} ms: creates {}", tname, img.boot_ms,
               img.restore_ms, img.use ? "restore it" : "boot");
  std::lock_guard lk(pool_mu_);
  images_[tname] = img;
}

void SandboxService::pool_loop() {
  const std::string rootfs = cfg_.templates_dir() + "/base/rootfs";
  bool image_tried = false;
  for (;;) {
    if (!image_tried && cfg_.template_checkpoints != "off" && fs::exists(cfg_.templates_dir() + "/base/.b3os-ready")) {
      image_tried = true;
      build_template_image("base");
    }
    if (cfg_.warm_pool_size <= 0 && cfg_.fork_pool_size <= 0) {
      if (image_tried || cfg_.template_checkpoints == "off") return;
      std::unique_lock lk(pool_mu_);
      pool_cv_.wait_for(lk, 5s, [&] { return stopping_pool_; });
      if (stopping_pool_) return;
      continue;
    }
    bool want_warm = false, want_precreated = false;
    {
      std::unique_lock lk(pool_mu_);
      auto short_of = [&] {
        want_warm = static_cast<int>(warm_.size()) < cfg_.warm_pool_size;
        want_precreated = static_cast<int>(precreated_.size()) < cfg_.fork_pool_size;
        return want_warm || want_precreated;
      };
      pool_cv_.wait_for(lk, 2s, [&] { return stopping_pool_ || short_of(); });
      if (stopping_pool_) return;
      if (!want_warm && !want_precreated) continue;
      // Refill once no request is launching: a request never waits on the pool's CPU use.
      pool_cv_.wait_for(lk, 10s, [&] { return stopping_pool_ || busy_ == 0; });
      if (stopping_pool_) return;
    }
    const bool template_ready = fs::exists(cfg_.templates_dir() + "/base/.b3os-ready");
    // Pool members count against the node's capacity while they wait; each waits frozen,
    // since an idle sentry still ticks (~40 ms of CPU a second) and slows everything else.
    bool added = false;
    if (template_ready && reserve("", 1)) {
      Launch l;
      l.id = new_id("sbx");
      l.rootfs = rootfs;
      l.from_pool = false;
      Timing t;
      Stopwatch sw;
      if (want_warm) {
        // Booted, agent ready: a non-forkable create claims it.
        if (auto s = launch(l, t, sw)) {
          runsc_.set_frozen((*s)->id, true);
          std::lock_guard lk(pool_mu_);
          warm_.push_back(*s);
          added = true;
        } else {
          spdlog::warn("warm pool: {}", s.error().message);
        }
      } else {
        // Created, not started: a fork or snapshot restore skips `runsc create`.
        if (auto pc = precreate(l, t, sw)) {
          runsc_.set_frozen(pc->sandbox->id, true);
          std::lock_guard lk(pool_mu_);
          precreated_.push_back(std::move(*pc));
          added = true;
        } else {
          spdlog::warn("fork pool: {}", pc.error().message);
        }
      }
      unreserve("", 1);
    }
    if (!added) {
      // No template yet, a full node or a broken runtime: wait rather than spin.
      std::unique_lock lk(pool_mu_);
      pool_cv_.wait_for(lk, 5s, [&] { return stopping_pool_; });
    }
  }
}

}  // namespace b3os::sandbox
