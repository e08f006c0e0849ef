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

void SandboxService::pool_loop() {
  const std::string rootfs = cfg_.templates_dir() + "/base/rootfs";
  for (;;) {
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
    }
    const bool template_ready = fs::exists(cfg_.templates_dir() + "/base/.b3os-ready");
    // Pool members count against the node's capacity while they wait; each waits frozen,
    // since an idle sentry still ticks (~40 ms of CPU a second) and slows everything else.
    bool added = false;
    if (template_ready && reserve("", 1)) {
      Launch l;
      l.id = new_id("sbx");
      l.rootfs = rootfs;
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
