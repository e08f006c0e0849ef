#include "daemon/sandbox/fork_ahead.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "daemon/sandbox/state.h"

namespace b3os::sandbox {

namespace {
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr int64_t kFailedWaitMs = 30'000;     // a source whose spare failed: not again before
constexpr int64_t kUnclaimedBaseMs = 500;     // then doubled for each spare in a row unclaimed
constexpr int64_t kUnclaimedMaxMs = 64'000;
constexpr int kRest = 4;  // the maker rests kRest times each spare's time: at most 1/5 of a core
}  // namespace

int64_t mem_available_mib() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    int64_t kib = -1;
    if (in >> kib) return kib / 1024;
  }
  return -1;
}

void ForkAhead::start() {
  if (cfg_.fork_ahead <= 0) return;
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!stopping_) {
      cv_.wait_for(lk, kTick);
      if (stopping_) break;
      lk.unlock();
      tick(steady_ms());
      lk.lock();
    }
  });
}

void ForkAhead::stop() {
  std::vector<std::shared_ptr<LiveSandbox>> all;
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lk(mu_);
    for (auto& sp : shelf_) all.push_back(sp.sandbox);
    shelf_.clear();
  }
  end(std::move(all));
}

void ForkAhead::end(std::vector<std::shared_ptr<LiveSandbox>> spares) {
  for (auto& s : spares) {
    launcher_.end(*s);
    registry_.pooled(-1);
  }
}

int ForkAhead::size() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(shelf_.size());
}

void ForkAhead::collect_stale(int64_t now_ms, std::vector<std::shared_ptr<LiveSandbox>>& out) {
  // Looked at outside mu_ (a source's own lock is never taken under it), then taken off the
  // shelf under it if still there (a fork may have claimed one meanwhile).
  std::vector<Spare> shelf;
  {
    std::lock_guard lk(mu_);
    shelf = shelf_;
  }
  std::vector<std::pair<const LiveSandbox*, std::shared_ptr<LiveSandbox>>> stale;  // spare, its source if changed
  for (auto& sp : shelf) {
    auto src = sp.source.lock();
    bool keep = src && !(sp.sandbox->channel && sp.sandbox->channel->closed()) && !src->moving.load();
    if (keep) {
      std::lock_guard lk(src->mu);
      keep = src->rec.state == State::kRunning || src->rec.state == State::kCheckpointing;
    }
    const bool changed = keep && src->changes.load() != sp.changes;
    if (keep && !changed) continue;
    stale.emplace_back(sp.sandbox.get(), changed ? src : nullptr);
  }
  std::lock_guard lk(mu_);
  for (auto& [spare, changed_source] : stale) {
    auto it = std::find_if(shelf_.begin(), shelf_.end(), [&](const Spare& sp) { return sp.sandbox.get() == spare; });
    if (it == shelf_.end()) continue;
    out.push_back(it->sandbox);
    shelf_.erase(it);
    if (!changed_source) continue;
    // Stale before anyone forked: the source is not one to make spares of often.
    back_off(sources_[changed_source->id], changed_source, now_ms);
  }
  for (auto it = sources_.begin(); it != sources_.end();) it = it->second.live.expired() ? sources_.erase(it) : std::next(it);
}

std::shared_ptr<LiveSandbox> ForkAhead::candidate(int64_t now_ms, int64_t avail) {
  std::map<const LiveSandbox*, int> spares;
  std::map<std::string, Source> sources;
  {
    std::lock_guard lk(mu_);
    if (static_cast<int>(shelf_.size()) >= cfg_.fork_ahead_node) return nullptr;
    for (auto& sp : shelf_)
      if (auto src = sp.source.lock()) ++spares[src.get()];
    sources = sources_;
  }
  const auto u = registry_.usage();
  // One slot of headroom: a spare being made cannot give way, so a request arriving meanwhile
  // still fits.
  if (u.live + u.starting + u.pooled + 2 > u.max) return nullptr;
  for (auto& s : registry_.all()) {
    // Cheap checks first: most sandboxes are busy, or have their spares.
    if (s->agent_idle.load() != 1 || s->active_ops.load() > 0 || s->moving.load()) continue;
    if (spares[s.get()] >= cfg_.fork_ahead) continue;
    if (auto it = sources.find(s->id); it != sources.end() && it->second.live.lock() == s &&
                                       it->second.not_before_ms > now_ms)
      continue;
    int memory_mib = 0;
    {
      std::lock_guard lk(s->mu);
      if (!s->rec.forkable || s->rec.state != State::kRunning) continue;
      memory_mib = s->rec.memory_mib;
    }
    if (avail < 0 || avail < min_free_mib_.load() + memory_mib) continue;
    {
      std::lock_guard lk(s->freeze_mu);
      if (s->awake > 0) continue;
      if (now_ms - std::max(s->agent_idle_since_ms.load(), s->quiet_since_ms) < kQuietMs) continue;
    }
    return s;
  }
  return nullptr;
}

void ForkAhead::back_off(Source& so, const std::shared_ptr<LiveSandbox>& src, int64_t now_ms) {
  so.live = src;
  so.unclaimed = std::min(so.unclaimed + 1, 8);
  so.not_before_ms = now_ms + std::min(kUnclaimedBaseMs << so.unclaimed, kUnclaimedMaxMs);
}

int64_t ForkAhead::tick(int64_t now_ms) {
  std::vector<std::shared_ptr<LiveSandbox>> gone;
  const int64_t avail = mem_available_mib();
  collect_stale(now_ms, gone);
  {
    std::lock_guard lk(mu_);
    // Memory running short: every spare goes (they are the first thing the node can give back).
    if (avail >= 0 && avail < min_free_mib_.load()) {
      for (auto& sp : shelf_) gone.push_back(sp.sandbox);
      shelf_.clear();
    }
  }
  if (!gone.empty()) spdlog::debug("fork-ahead: {} spares dropped", gone.size());
  end(std::move(gone));
  // Resting after the last spare (kRest times its time): stale spares and the memory floor
  // are still looked at every pass above; only making waits.
  if (cfg_.fork_ahead <= 0 || pools_.launching() || now_ms < rest_until_ms_) return 0;
  auto src = candidate(now_ms, avail);
  if (!src) return 0;
  const int64_t t0 = steady_ms();
  registry_.pooled(1);  // counted against the node from the start, like any pool member
  auto made = make_(src);
  const int64_t took = std::max<int64_t>(1, steady_ms() - t0);
  rest_until_ms_ = steady_ms() + kRest * took;
  if (!made) {
    registry_.pooled(-1);
    {
      std::lock_guard lk(mu_);
      auto& so = sources_[src->id];
      // Reached meanwhile: it backs off as a spare gone stale would (something that reaches a
      // sandbox every half second must not have it checkpointed every half second); any
      // other failure waits longer.
      if (made.error().code == ErrorCode::kConflict) {
        back_off(so, src, steady_ms());
      } else {
        so.live = src;
        so.not_before_ms = steady_ms() + kFailedWaitMs;
      }
    }
    if (made.error().code == ErrorCode::kConflict)
      spdlog::debug("sandbox {}: fork-ahead: {}", src->id, made.error().message);
    else
      spdlog::warn("sandbox {}: fork-ahead: {}", src->id, made.error().message);
    return took;
  }
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      spdlog::debug("sandbox {}: fork-ahead: spare {} ready in {} ms", src->id, made->sandbox->id, took);
      shelf_.push_back(std::move(*made));
      return took;
    }
  }
  end({made->sandbox});
  return took;
}

std::vector<std::shared_ptr<LiveSandbox>> ForkAhead::take(const std::shared_ptr<LiveSandbox>& source, int count) {
  std::vector<std::shared_ptr<LiveSandbox>> out;
  {
    std::lock_guard lk(mu_);
    const uint64_t now = source->changes.load();
    std::vector<size_t> fit;
    for (size_t i = 0; i < shelf_.size(); ++i)
      if (shelf_[i].changes == now && shelf_[i].source.lock() == source) fit.push_back(i);
    if (static_cast<int>(fit.size()) < count) return {};
    fit.resize(count);
    for (auto it = fit.rbegin(); it != fit.rend(); ++it) {
      out.push_back(shelf_[*it].sandbox);
      shelf_.erase(shelf_.begin() + static_cast<long>(*it));
    }
    if (auto so = sources_.find(source->id); so != sources_.end()) so->second.unclaimed = 0;
  }
  registry_.pooled(-count);
  return out;
}

int ForkAhead::give_way(int n) {
  std::vector<std::shared_ptr<LiveSandbox>> gone;
  {
    std::lock_guard lk(mu_);
    // All or nothing: ending fewer than the request needs would only lose them.
    if (static_cast<int>(shelf_.size()) < n) return 0;
    while (n-- > 0 && !shelf_.empty()) {
      gone.push_back(shelf_.front().sandbox);
      shelf_.erase(shelf_.begin());
    }
  }
  const int freed = static_cast<int>(gone.size());
  end(std::move(gone));
  return freed;
}

}  // namespace b3os::sandbox
