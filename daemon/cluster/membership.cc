#include "daemon/cluster/membership.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "common/clock.h"

namespace b3os::cluster {

Membership::Membership(store::Store& store, MembershipConfig cfg, std::function<store::NodeRecord()> load,
                       std::function<void()> on_down)
    : store_(store),
      cfg_(std::move(cfg)),
      load_(std::move(load)),
      on_down_(std::move(on_down)),
      streak_(cfg_.heartbeat_ms, cfg_.judge_after_ms < 0 ? cfg_.down_after_ms : cfg_.judge_after_ms) {}

Membership::~Membership() { stop(); }

store::NodeRecord Membership::record() const {
  store::NodeRecord n = load_ ? load_() : store::NodeRecord{};
  n.id = store_.node();
  n.url = cfg_.url;
  return n;
}

Result<void> Membership::start() {
  if (!store_.shared()) return {};
  if (auto r = store_.register_node(record()); !r) return r;
  spdlog::info("cluster: node {} registered ({})", store_.node(), cfg_.url.empty() ? "no internal URL" : cfg_.url);
  thread_ = std::thread([this] {
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(cfg_.heartbeat_ms), [&] { return stopping_; })) {
      lk.unlock();
      tick();
      lk.lock();
    }
  });
  return {};
}

void Membership::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Membership::tick() {
  auto state = store_.heartbeat(record());
  if (!state) {
    // The store is away (restarting, cut off): the next beat tries again. Past the silence
    // limit the others mark this node down, and the beat after the store returns says so.
    spdlog::warn("cluster: heartbeat: {}", state.error().message);
    streak_.missed();
    return;
  }
  const int64_t now = steady_ms();
  streak_.beat(now);
  if ((*state == "down" || *state == "missing") && !down_reported_.exchange(true)) {
    spdlog::critical("cluster: the store has node {} {} (silent past {} s): its sandboxes were failed by the cluster; "
                     "b3osd stops so that its restart removes them and registers again",
                     store_.node(), *state == "down" ? "marked down" : "unregistered", cfg_.down_after_ms / 1000);
    if (on_down_) on_down_();
    return;
  }
  if (on_state_) on_state_(*state);
  // After an outage of the store, every node has been silent: wait until each had its chance
  // to beat again before judging any.
  if (!streak_.may_judge(now)) return;
  auto marked = store_.mark_silent_nodes_down(cfg_.down_after_ms);
  if (!marked) {
    spdlog::warn("cluster: looking for silent nodes: {}", marked.error().message);
    return;
  }
  for (const auto& id : *marked)
    spdlog::warn("cluster: node {} marked down (no heartbeat for {} s): its sandboxes are failed", id,
                 cfg_.down_after_ms / 1000);
}

}  // namespace b3os::cluster
