// Fork-ahead (daemon/sandbox/fork_ahead.h) against the fakes: a quiet forkable sandbox gets a
// spare, a fork while it is unchanged claims it, anything that reaches the source makes the
// fork take the usual path, spares count against the node but never a project, give way on a
// full node, and go with their source.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/unit/sandbox/service_fixture.h"

namespace b3os::sandbox {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class ForkAheadTest : public FakeServiceTest {
 protected:
  void SetUp() override {
    FakeServiceTest::SetUp();
    cfg_.fork_ahead = 1;
    cfg_.fork_ahead_min_free_mib = 0;
  }
  std::string forkable() {
    SandboxSpec spec;
    spec.forkable = true;
    return create(spec);
  }
  /// Waits (up to 10 s) until `n` spares wait.
  bool spares(int n) {
    for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(10ms))
      if (svc_->fork_ahead().size() == n) return true;
    return svc_->fork_ahead().size() == n;
  }
  /// Waits (up to 10 s) until the runtime holds exactly `n` containers. A spare taken off the
  /// shelf is ended a moment later, on the fork-ahead thread: settle() alone could look
  /// between the two (it failed so once in a full run on a busy machine).
  size_t containers(size_t n) {
    for (auto end = Clock::now() + 10s; Clock::now() < end; std::this_thread::sleep_for(10ms)) {
      svc_->settle();
      if (rt_.ids().size() == n) return n;
    }
    return rt_.ids().size();
  }
  static bool claimed(const Timing& t) {
    for (auto& [name, ms] : t.phases)
      if (name == "claim") return true;
    return false;
  }
};

TEST_F(ForkAheadTest, AQuietSourcesForkClaimsItsSpare) {
  // Room for the source and one spare only (a spare is started with a slot of headroom): once
  // the fork is live no new spare is begun, so the counts below cannot move however slowly
  // this thread runs after the fork.
  cfg_.max_sandboxes_per_node = 3;
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  EXPECT_EQ(svc_->stats().usage.pooled, 1) << "a spare is a pool member of the node";
  const int checkpoints = rt_.calls("checkpoint"), restores = rt_.calls("restore");
  Timing t;
  auto forks = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  EXPECT_TRUE(claimed(t));
  EXPECT_EQ(rt_.calls("checkpoint"), checkpoints) << "a claim writes nothing";
  EXPECT_EQ(rt_.calls("restore"), restores);
  const std::string f = (*forks)["data"][0]["id"];
  EXPECT_EQ(status(f), "running");
  EXPECT_EQ(store_.sandboxes().at(f).forked_from, src);
  EXPECT_FALSE(rt_.frozen(f)) << "a claimed spare is thawed";
  Timing e;
  ExecSpec x;
  x.argv = {"true"};
  auto r = svc_->exec(p_, f, x, e, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0);
  // The listing shows the source and its fork, never a spare.
  auto list = svc_->list(p_, {});
  ASSERT_TRUE(list);
  EXPECT_EQ((*list)["data"].size(), 2u);
  EXPECT_EQ(rt_.frozen_violations(), 0);
}

TEST_F(ForkAheadTest, TheNextSpareWaitsForTheCallersNextRequest) {
  // After a claim the caller's next request (an exec in its fork) has the CPU: no checkpoint
  // of a new spare begins within refill_settle_ms (here long enough for the source's 500 ms of
  // quiet and the maker's tick to have passed without it).
  cfg_.refill_settle_ms = 1500;
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  Timing t;
  auto forks = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_TRUE(claimed(t));
  const int checkpoints = rt_.calls("checkpoint");
  std::this_thread::sleep_for(900ms);
  EXPECT_EQ(rt_.calls("checkpoint"), checkpoints) << "a spare began within the settle time";
  EXPECT_TRUE(spares(1)) << "and one is made after it";
}

TEST_F(ForkAheadTest, AnythingThatReachesTheSourceMakesTheForkTakeTheUsualPath) {
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  // A new spare must not become ready between the exec and the fork (a stalled test thread).
  rt_.hang("restore", 3000ms);
  Timing e;
  ExecSpec x;
  x.argv = {"true"};
  ASSERT_TRUE(svc_->exec(p_, src, x, e, nullptr));
  const int checkpoints = rt_.calls("checkpoint");
  Timing t;
  auto forks = svc_->fork(p_, src, 1, std::nullopt, t);  // its own restore waits the hang out too
  rt_.clear_faults();
  ASSERT_TRUE(forks) << forks.error().message;
  EXPECT_FALSE(claimed(t)) << "the spare was of the source before the exec";
  EXPECT_GE(rt_.calls("checkpoint"), checkpoints + 1);
}

TEST_F(ForkAheadTest, ACountLargerThanTheSparesTakesTheUsualPath) {
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  Timing t;
  auto forks = svc_->fork(p_, src, 2, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  EXPECT_FALSE(claimed(t));
  EXPECT_EQ((*forks)["data"].size(), 2u);
}

TEST_F(ForkAheadTest, SparesNeverCountAgainstTheProject) {
  cfg_.max_sandboxes_per_project = 2;
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  EXPECT_FALSE(create().empty()) << "the source and one more fit the project's 2, spare or not";
  Timing t;
  auto over = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kConcurrencyLimited);
}

TEST_F(ForkAheadTest, ASpareOnAFullNodeGivesWayToARequest) {
  cfg_.max_sandboxes_per_node = 3;
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1)) << "made with a slot of headroom (1 live + 1 spare + 1 free)";
  EXPECT_FALSE(create().empty()) << "fits beside the spare";
  EXPECT_FALSE(create().empty()) << "the spare gave way";
  EXPECT_EQ(svc_->fork_ahead().size(), 0);
  EXPECT_EQ(containers(3), 3u) << "the spare's container went";
  Timing t;
  auto full = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_FALSE(full) << "no spare made on a node without headroom";
  EXPECT_EQ(full.error().code, ErrorCode::kCapacityUnavailable);
}

TEST_F(ForkAheadTest, APausedOrDeletedSourceLosesItsSpares) {
  start();
  const std::string a = forkable(), b = forkable();
  ASSERT_TRUE(spares(2));
  Timing t;
  ASSERT_TRUE(svc_->pause(p_, a, t));
  ASSERT_TRUE(svc_->remove(p_, b, t));
  ASSERT_TRUE(spares(0));
  EXPECT_EQ(containers(1), 1u);
  EXPECT_EQ(rt_.ids(), std::set<std::string>{a}) << "only the paused source is left";
  rt_.hang("restore", 3000ms);  // no new spare between the resume and the fork, however slow
  ASSERT_TRUE(svc_->resume(p_, a, t));
  // Resumed, it is quiet again after a while and gets a new spare; a fork after resume and
  // before then takes the usual path.
  Timing f;
  auto forks = svc_->fork(p_, a, 1, std::nullopt, f);
  ASSERT_TRUE(forks) << forks.error().message;
  EXPECT_FALSE(claimed(f));
}

TEST_F(ForkAheadTest, MemoryRunningShortDropsSparesAndMakesNone) {
  start();
  const std::string src = forkable();
  ASSERT_TRUE(spares(1));
  // A floor above any host's memory: every spare goes, and none is made.
  svc_->fork_ahead().set_min_free_mib(1 << 30);
  ASSERT_TRUE(spares(0));
  std::this_thread::sleep_for(1000ms);
  EXPECT_EQ(svc_->fork_ahead().size(), 0);
  svc_->settle();
  EXPECT_EQ(rt_.ids(), std::set<std::string>{src});
  EXPECT_EQ(svc_->stats().usage.pooled, 0) << "every spare gave its node slot back";
  svc_->fork_ahead().set_min_free_mib(0);
  EXPECT_TRUE(spares(1)) << "made again once there is room";
}

TEST_F(ForkAheadTest, APauseThatMeetsASparesCheckpointWaitsItOut) {
  start();
  rt_.hang("checkpoint", 800ms);
  const std::string src = forkable();
  for (auto end = Clock::now() + 10s; Clock::now() < end && rt_.calls("checkpoint") == 0;) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(rt_.calls("checkpoint"), 1) << "the maker's checkpoint is in flight";
  Timing t;
  auto r = svc_->pause(p_, src, t);
  ASSERT_TRUE(r) << "not a 409 for a checkpoint the user cannot see: " << r.error().message;
  EXPECT_EQ(status(src), "paused");
  rt_.clear_faults();
  ASSERT_TRUE(spares(0)) << "a paused source has no spares";
  svc_->stop();
  EXPECT_EQ(svc_->stats().usage.pooled, 0);
}

TEST_F(ForkAheadTest, OffMakesNoSpares) {
  cfg_.fork_ahead = 0;
  start();
  const std::string src = forkable();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(svc_->fork_ahead().size(), 0);
  Timing t;
  auto forks = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_TRUE(forks);
  EXPECT_FALSE(claimed(t));
}

TEST_F(ForkAheadTest, NotForkableGetsNoSpare) {
  start();
  create();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(svc_->fork_ahead().size(), 0);
}

}  // namespace
}  // namespace b3os::sandbox
