#include "daemon/sandbox/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "daemon/sandbox/freezer.h"
#include "daemon/sys/process.h"

namespace b3os::sandbox {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {
constexpr auto kHelloTimeout = 15s;
constexpr auto kControlTimeout = 5s;
constexpr int kChannelSendBuffer = 1 << 20;  // the agent's end of the channel (SO_SNDBUF; the kernel doubles it)
}  // namespace

std::shared_ptr<agentlink::AgentChannel> Launcher::attach(UniqueFd fd, const std::shared_ptr<LiveSandbox>& s) {
  const std::string id = s->id;
  // The handlers are in place before the reader starts, so no early stream is turned away.
  return agentlink::AgentChannel::start(
      std::move(fd), id,
      [this, id](const std::string& why) {
        if (closed_) closed_(id, why);
      },
      [this, id](std::shared_ptr<agentlink::Stream> st) {
        if (incoming_) {
          incoming_(id, std::move(st));
        } else {
          (void)st->send_end({{"ok", false},
                              {"error", {{"code", "product_unavailable"}, {"message", "this b3osd has no model gateway"}}}});
        }
      },
      [weak = std::weak_ptr<LiveSandbox>(s)](bool idle, bool held) {
        if (auto live = weak.lock()) Freezer::on_report(*live, idle, held);
      });
}

Result<void> Launcher::identify(LiveSandbox& s) {
  json identity = {{"sandbox_id", s.id},
                   {"hostname", s.hostname},
                   {"machine_id", to_hex(random_bytes(16))},
                   {"seed", to_hex(random_bytes(32))},
                   {"time_ns", now_unix_ms() * 1000000}};
  // Before the answer, anything the agent said of its idleness belongs to a channel now gone.
  s.agent_idle = -1;
  if (cfg_.idle_freeze_ms <= 0) return s.channel->send_identity(identity, kControlTimeout);  // never frozen
  // The idle reports are asked for right behind the identity: one round trip for both.
  Result<bool> idle = false;
  if (auto r = s.channel->send_identity(identity, kControlTimeout, &idle); !r) return r;
  note_idle_reports(s, idle);
  return {};
}

void Launcher::request_idle_reports(LiveSandbox& s) {
  // Before the answer, anything the agent said of its idleness belongs to a channel now gone.
  s.agent_idle = -1;
  if (cfg_.idle_freeze_ms <= 0) return;  // never frozen: no reports wanted
  note_idle_reports(s, s.channel->request_idle_reports(kControlTimeout));
}

void Launcher::note_idle_reports(LiveSandbox& s, const Result<bool>& r) {
  if (!r)
    spdlog::warn("sandbox {}: asking for idle reports: {}; it is never frozen", s.id, r.error().message);
  else if (!*r)
    spdlog::info("sandbox {}: its agent does not report idleness (older than this b3osd); it is never frozen", s.id);
}

void Launcher::release(const std::string& id, pid_t shim_pid, int shim_watch) {
  if (auto r = rt_.destroy(id); !r) spdlog::warn("sandbox {}: {}", id, r.error().message);
  // After the container: its sentry holds the overlay's file on the disk until it is gone. A
  // disk whose container could not be destroyed is detached and freed when that one ends.
  if (auto r = rt_.remove_disk(id); !r) spdlog::warn("sandbox {}: {}", id, r.error().message);
  // After the container too: its sandbox process holds the namespace until it is gone.
  if (network_) network_->release(id);
  const std::string dir = dir_of(id);
  shims_.stop(dir, shim_pid, shim_watch);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("sandbox {}: removing {}: {}", id, dir, ec.message());
  std::lock_guard lk(owned_mu_);
  owned_.erase(id);
}

Result<void> Launcher::apply_egress(LiveSandbox& s, const net::EgressPolicy& policy) {
  if (!s.networked || !network_) return {};
  std::lock_guard lk(s.egress_mu);
  if (s.egress_applied && s.egress_applied->mode == policy.mode && s.egress_applied->allow == policy.allow) return {};
  if (auto r = network_->apply(s.id, policy); !r) return r;
  s.egress_applied = policy;
  return {};
}

void Launcher::adopt(const std::string& id) {
  std::lock_guard lk(owned_mu_);
  owned_.insert(id);
}

bool Launcher::owns(const std::string& id) {
  std::lock_guard lk(owned_mu_);
  return owned_.count(id) > 0;
}

Launcher::Launcher(const Config& cfg, runtime::Runtime& rt, runtime::Shims& shims, net::Network* network)
    : cfg_(cfg), rt_(rt), shims_(shims), network_(network) {
  for (size_t i = 0; i < kCleaners; ++i) cleaners_.emplace_back([this] { clean(); });
}

Launcher::~Launcher() {
  {
    std::lock_guard lk(clean_mu_);
    stopping_ = true;
  }
  clean_cv_.notify_all();
  for (auto& t : cleaners_) t.join();  // what is queued is released first
}

Launcher::ShimRef Launcher::take_shim(LiveSandbox& s) {
  std::lock_guard lk(s.shim_mu);
  s.shim_released = true;
  s.log_rd.reset();
  return {s.shim_pid, std::move(s.shim_watch)};
}

std::optional<bool> Launcher::keep_shim(LiveSandbox& s) {
  std::lock_guard lk(s.shim_mu);
  if (s.shim_released || !s.shim_watch || !s.channel || s.channel->closed()) return std::nullopt;
  const int64_t now = steady_ms();
  if (now < s.shim_retry_ms) return std::nullopt;
  pollfd pfd{s.shim_watch.get(), POLLIN, 0};
  if (::poll(&pfd, 1, 0) != 1) return std::nullopt;  // it lives
  const std::string dir = dir_of(s.id);
  if (s.shim_pid > 0) {
    shims_.reap(s.shim_watch.get(), s.shim_pid);  // when it was this b3osd's child
    spdlog::warn("sandbox {}: its shim (pid {}) is gone; starting another", s.id, s.shim_pid);
    s.shim_pid = -1;  // the number may be another process's from now on
    ::unlink((dir + "/shim.pid").c_str());
  }
  // At most one start a second: a shim killed over and over is not restarted in a loop.
  if (now < s.shim_started_ms + 1000) {
    s.shim_retry_ms = s.shim_started_ms + 1000;
    return std::nullopt;
  }
  auto pid = shims_.start(dir, s.channel->socket_fd(), s.log_rd ? s.log_rd.get() : -1);
  if (!pid) {
    if (++s.shim_failures >= kShimTries) {
      // Given up: nothing holds the channel for the next b3osd, and the pipe is let go (a
      // writer then finds it broken rather than waiting for ever).
      spdlog::error("sandbox {}: no new shim started in {} tries ({}); it runs on, but will not survive a restart "
                    "of b3osd and its stderr is no longer logged", s.id, kShimTries, pid.error().message);
      s.shim_watch.reset();
      s.log_rd.reset();
    } else {
      s.shim_retry_ms = now + 5000;
      spdlog::warn("sandbox {}: a new shim did not start: {}; trying again in 5 s", s.id, pid.error().message);
    }
    return false;
  }
  s.shim_failures = 0;
  s.shim_pid = *pid;
  s.shim_started_ms = steady_ms();
  s.shim_watch = shims_.watch(dir, *pid).fd;
  if (!s.shim_watch) s.log_rd.reset();  // not replaced again: the pipe is the shim's alone
  spdlog::info("sandbox {}: a new shim holds its channel (pid {}){}", s.id, *pid,
               s.log_rd ? "" : ", without its log (b3osd had no copy of the pipe)");
  return true;
}

void Launcher::discard(LiveSandbox& s) {
  auto shim = take_shim(s);
  if (s.channel) s.channel->shutdown();
  release(s.id, shim.pid, shim.watch.get());
}

void Launcher::end(LiveSandbox& s) {
  auto shim = take_shim(s);
  if (s.channel) s.channel->shutdown();
  rt_.set_frozen(s.id, true);
  {
    std::lock_guard lk(clean_mu_);
    if (to_release_.size() < kHardBacklog) {
      to_release_.push_back({s.id, std::move(shim)});
      clean_cv_.notify_one();
      return;
    }
  }
  release(s.id, shim.pid, shim.watch.get());  // only when launches did not wait (see wait_for_room)
}

void Launcher::wait_for_room() {
  std::unique_lock lk(clean_mu_);
  clean_cv_.wait_for(lk, kRoomWait, [&] { return to_release_.size() < kMaxBacklog; });
}

void Launcher::settle() {
  std::unique_lock lk(clean_mu_);
  clean_cv_.wait(lk, [&] { return to_release_.empty() && releasing_ == 0; });
}

void Launcher::clean() {
  std::unique_lock lk(clean_mu_);
  for (;;) {
    clean_cv_.wait(lk, [&] { return stopping_ || !to_release_.empty(); });
    if (to_release_.empty()) return;  // stopping, and nothing left
    Pending p = std::move(to_release_.front());
    to_release_.pop_front();
    ++releasing_;
    lk.unlock();
    release(p.id, p.shim.pid, p.shim.watch.get());
    lk.lock();
    --releasing_;
    clean_cv_.notify_all();
  }
}

Result<Precreated> Launcher::precreate(const LaunchRequest& l, Timing& t, Stopwatch& sw) {
  // Deletes answer before their release; new containers wait for the releases to keep up,
  // so ended sandboxes never pile up on the host.
  wait_for_room();
  t.lap("release_wait", sw);
  {
    std::lock_guard lk(owned_mu_);
    owned_.insert(l.id);  // before anything of it exists, so no sweep takes it for an orphan
  }
  Precreated pc;
  pc.sandbox = std::make_shared<LiveSandbox>();
  auto& s = pc.sandbox;
  s->id = l.id;
  s->rec.id = l.id;
  s->rec.project_id = l.project_id;
  const std::string dir = dir_of(s->id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);

  // From here every failure must undo what was done: no container, shim or file may stay.
  auto undo = [&](Error e) -> Result<Precreated> {
    discard(*s);
    return fail(std::move(e));
  };
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return undo(errno_error(ErrorCode::kInternal, "socketpair", errno));
  UniqueFd agent_end(sp[1]);
  pc.daemon_end.reset(sp[0]);
  // What the agent may have in flight towards b3osd: the default (~200 KiB) made a command that
  // writes fast wait on the socket between b3osd's reads. The window (4 MiB per stream) still
  // bounds what b3osd holds; this bounds the kernel's memory per sandbox (twice this, at most).
  const int sndbuf = kChannelSendBuffer;
  (void)::setsockopt(sp[1], SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);
  // The sandbox's stderr goes to a pipe the shim drains into a capped log, never to a file
  // that code inside could grow through /proc/1/fd/2.
  int lp[2];
  if (::pipe2(lp, O_CLOEXEC) != 0) return undo(errno_error(ErrorCode::kInternal, "pipe", errno));
  s->log_rd.reset(lp[0]);  // b3osd keeps a copy, for a new shim should this one be killed
  UniqueFd log_wr(lp[1]);
  auto shim = shims_.start(dir, pc.daemon_end.get(), s->log_rd.get());
  if (!shim) return undo(shim.error());
  s->shim_pid = *shim;
  s->shim_started_ms = steady_ms();
  s->shim_watch = shims_.watch(dir, *shim).fd;
  t.lap("prepare", sw);

  runtime::ContainerSpec cs;
  cs.id = s->id;
  cs.bundle_dir = dir;
  cs.rootfs = l.rootfs;
  cs.agent_path = cfg_.agent_path;
  cs.hostname = "sbx-" + s->id.substr(4, 12);
  cs.vcpu = l.vcpu;
  cs.memory_mib = l.memory_mib;
  cs.log_path = dir + "/sandbox.log";
  cs.log_fd = log_wr.get();
  cs.log_drain_fd = s->log_rd.get();
  s->hostname = cs.hostname;
  s->rec.hostname = cs.hostname;
  // The root overlay's writable layer goes on a disk of the sandbox's own: made before the
  // container, whose create opens the overlay's file on it.
  if (const int gib = disk_for(l); gib > 0) {
    auto disk = rt_.make_disk(s->id, gib);
    if (!disk) return undo(disk.error());
    cs.disk_dir = *disk;
    s->disk_gib = gib;
    t.lap("disk", sw);
  }
  if (l.root_on_disk) {
    if (cs.disk_dir.empty())
      return undo(Error{ErrorCode::kProductUnavailable, "template builds need sandbox disks (--root-overlay disk)"});
    auto root = l.root_on_disk(cs.disk_dir);
    if (!root) return undo(root.error());
    cs.rootfs = *root;
    cs.root_overlay = false;
    t.lap("root", sw);
  }
  // A network of its own: the namespace exists before the container, which joins it.
  if (l.network) {
    if (!network_)
      return undo(Error{ErrorCode::kProductUnavailable, "this b3osd runs without sandbox networks (--network off)"});
    auto slot = network_->prepare(s->id);
    if (!slot) return undo(slot.error());
    cs.netns_path = slot->netns_path;
    cs.resolv_conf = network_->resolv_conf();
    s->networked = true;
    t.lap("network", sw);
  }
  if (auto r = rt_.create(cs, agent_end.get()); !r) return undo(r.error());
  t.lap("create", sw);
  if (!s->shim_watch) s->log_rd.reset();  // a shim that cannot be watched is never replaced
  return pc;
}

Result<std::shared_ptr<LiveSandbox>> Launcher::launch(const LaunchRequest& l, std::optional<Precreated> pooled,
                                                      Timing& t, Stopwatch& sw) {
  Precreated pc;
  if (pooled) {
    pc = std::move(*pooled);
    rt_.set_frozen(pc.sandbox->id, false);
    {
      std::lock_guard lk(pc.sandbox->mu);
      pc.sandbox->rec.project_id = l.project_id;
    }
    // The pool created it with the default memory limit; a restore fills the cgroup with the
    // image's memory at once, so the sandbox's own limit is set before, not after.
    if (auto r = rt_.limit_memory(pc.sandbox->id, l.memory_mib); !r) {
      discard(*pc.sandbox);
      return fail(r.error());
    }
    t.lap("pooled_container", sw);
  } else {
    auto made = precreate(l, t, sw);
    if (!made) return fail(made.error());
    pc = std::move(*made);
  }
  auto s = pc.sandbox;
  auto undo = [&](Error e) -> Result<std::shared_ptr<LiveSandbox>> {
    discard(*s);
    return fail(std::move(e));
  };
  if (l.image.empty()) {
    if (auto r = rt_.start(s->id); !r) return undo(r.error());
    t.lap("start", sw);
  } else {
    if (auto r = rt_.restore(s->id, dir_of(s->id), l.image); !r) return undo(r.error());
    t.lap("restore", sw);
  }
  // runsc took eth0 at the start or restore; the namespace's own links come up now.
  if (s->networked) {
    if (auto r = network_->activate(s->id); !r) return undo(r.error());
    t.lap("network_up", sw);
  }
  s->channel = attach(std::move(pc.daemon_end), s);
  if (l.image.empty()) {
    if (auto h = s->channel->wait_hello(kHelloTimeout); !h) return undo(h.error().wrap("starting the agent"));
  } else {
    // A restored agent is mid-conversation with the source's daemon; start afresh.
    if (auto r = s->channel->resync(kControlTimeout); !r) return undo(r.error().wrap("reaching the restored agent"));
  }
  if (!l.defer_identity)
    if (auto r = identify(*s); !r) return undo(r.error());
  t.lap("agent", sw);
  if (auto r = rt_.limit_cpu(s->id, l.vcpu); !r) return undo(r.error());
  t.lap("limits", sw);
  return s;
}

}  // namespace b3os::sandbox
