#pragma once
// Membership: this node's place in a cluster (docs/cluster.md). With a shared store it
// registers the node, heartbeats every 2 s with its load, and marks down any node silent for
// 10 s (the store does it in one transaction: one caller wins, the node's sandboxes become
// failed, its budget holds and idempotency claims are released), once its own heartbeats have
// reached the store for 10 s without a gap (HeartbeatStreak). When the store says this
// node itself was marked down (it was cut off from the store for too long), its sandboxes are
// failed already: it calls `on_down`, and b3osd exits so that its restart sweeps them.
//
// On a single node (SQLite) none of it runs.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "daemon/store/store.h"

namespace b3os::cluster {

struct MembershipConfig {
  std::string url;  // where routers and other nodes reach this node
  int64_t heartbeat_ms = 2000;
  int64_t down_after_ms = 10000;
  /// How long this node's own heartbeats must have reached the store, without a gap, before
  /// it may judge others silent (HeartbeatStreak); -1: down_after_ms.
  int64_t judge_after_ms = -1;
};

/// Whether this node may judge others silent: only after its own heartbeats have reached the
/// store without a gap for as long as the silence limit. Else an outage of the store itself
/// (every node silent at once) would, when it ends, let the first node back mark down every
/// node that has not beaten again yet.
class HeartbeatStreak {
 public:
  HeartbeatStreak(int64_t heartbeat_ms, int64_t down_after_ms) : heartbeat_ms_(heartbeat_ms), down_after_ms_(down_after_ms) {}
  /// A heartbeat reached the store at `now_ms` (a steady clock). A gap of more than two beats
  /// and a second since the last one starts the streak again.
  void beat(int64_t now_ms) {
    if (last_ms_ < 0 || now_ms - last_ms_ > 2 * heartbeat_ms_ + 1000) start_ms_ = now_ms;
    last_ms_ = now_ms;
  }
  /// A heartbeat did not reach the store: a beat missed alone (a connection the store's
  /// restart broke) is no gap; the gap is counted from the last beat that got through.
  void missed() {}
  bool may_judge(int64_t now_ms) const { return start_ms_ >= 0 && last_ms_ == now_ms && now_ms - start_ms_ >= down_after_ms_; }

 private:
  const int64_t heartbeat_ms_, down_after_ms_;
  int64_t last_ms_ = -1, start_ms_ = -1;
};

class Membership {
 public:
  /// `load` returns what the node holds now (its id and url are filled in here).
  Membership(store::Store& store, MembershipConfig cfg, std::function<store::NodeRecord()> load,
             std::function<void()> on_down);
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  /// Registers the node (its previous process's holds and claims are released) and starts
  /// the heartbeat. Fails when the store cannot be reached.
  Result<void> start();
  void stop();

  /// One heartbeat and one sweep for silent nodes (the thread's step; tests call it).
  void tick();
  /// Called on the heartbeat thread with this node's state after each heartbeat that reached
  /// the store ("ready", "draining"): a draining node moves its sandboxes out. Set before start().
  void set_on_state(std::function<void(const std::string&)> f) { on_state_ = std::move(f); }

 private:
  store::NodeRecord record() const;

  store::Store& store_;
  const MembershipConfig cfg_;
  std::function<store::NodeRecord()> load_;
  std::function<void()> on_down_;
  std::function<void(const std::string&)> on_state_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::atomic<bool> down_reported_{false};
  HeartbeatStreak streak_;  // the heartbeat thread's alone
  std::thread thread_;
};

}  // namespace b3os::cluster
