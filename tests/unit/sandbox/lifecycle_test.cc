// The sandbox module's lifecycle against fakes of the runtime, the shims, the agent and the
// store: every transition, every failure of every step, and what is left behind (nothing).
#include <gtest/gtest.h>

#include <algorithm>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "tests/unit/sandbox/service_fixture.h"

namespace b3os::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class LifecycleTest : public FakeServiceTest {
 protected:
  /// Nothing of any sandbox but `keep` is on the (fake) host: containers, shims, directories.
  void expect_only(const std::set<std::string>& keep) {
    if (svc_) svc_->settle();  // an ended sandbox is released just after the answer
    EXPECT_EQ(rt_.ids(), keep) << "containers";
    std::set<std::string> dirs;
    std::error_code ec;
    for (auto& e : fs::directory_iterator(cfg_.sandboxes_dir(), ec)) dirs.insert(e.path().filename().string());
    EXPECT_EQ(dirs, keep) << "sandbox directories";
    std::set<std::string> held;
    for (auto& d : shims_.held()) held.insert(fs::path(d).filename().string());
    EXPECT_EQ(held, keep) << "shims";
    std::set<std::string> disks;
    for (auto& [id, gib] : rt_.disks()) disks.insert(id);
    EXPECT_EQ(disks, keep) << "disks";
  }
  size_t records() { return store_.sandboxes().size(); }
};

TEST_F(LifecycleTest, EveryTransitionOfAHappyLife) {
  start();
  SandboxSpec spec;
  spec.forkable = true;
  spec.secrets = {{"TOKEN", "x"}};
  const std::string id = create(spec);
  EXPECT_EQ(status(id), "running");
  EXPECT_EQ(store_.sandboxes().at(id).state, State::kRunning);

  Timing t;
  ExecSpec e;
  e.argv = {"true"};
  auto r = svc_->exec(p_, id, e, t, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_data, "ok\n");

  auto forks = svc_->fork(p_, id, 2, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ((*forks)["data"].size(), 2u);
  const std::string f1 = (*forks)["data"][0]["id"], f2 = (*forks)["data"][1]["id"];
  EXPECT_EQ(store_.sandboxes().at(f1).forked_from, id);
  EXPECT_EQ(store_.sandboxes().at(f1).secrets.at("TOKEN"), "x");
  EXPECT_EQ(status(f2), "running");

  auto snap = svc_->snapshot(p_, id, t);
  ASSERT_TRUE(snap) << snap.error().message;
  SandboxSpec from;
  from.snapshot = (*snap)["id"].get<std::string>();
  const std::string restored = create(from);
  EXPECT_EQ(status(restored), "running");

  ASSERT_TRUE(svc_->pause(p_, id, t));
  EXPECT_EQ(status(id), "paused");
  EXPECT_EQ(store_.sandboxes().at(id).state, State::kPaused);
  auto refused = svc_->exec(p_, id, e, t, nullptr);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kSandboxNotRunning);
  ASSERT_TRUE(svc_->resume(p_, id, t));
  EXPECT_EQ(status(id), "running");

  for (auto& s : {id, f1, f2, restored}) {
    auto d = svc_->remove(p_, s, t);
    ASSERT_TRUE(d);
    EXPECT_EQ((*d)["status"], "stopped");
    EXPECT_EQ((*d)["stop_reason"], "deleted");
  }
  expect_only({});
  auto again = svc_->remove(p_, id, t);  // a second delete answers the record
  ASSERT_TRUE(again);
  EXPECT_EQ((*again)["status"], "stopped");
}

TEST_F(LifecycleTest, ACreateThatFailsAtAnyStepLeavesNothing) {
  start();
  for (const char* verb : {"make_disk", "create", "start", "limit_cpu"}) {
    rt_.fail(verb);
    Timing t;
    auto r = svc_->create(p_, {}, t);
    ASSERT_FALSE(r) << verb;
    EXPECT_EQ(r.error().code, ErrorCode::kInternal) << verb;
    EXPECT_NE(r.error().message.find(verb), std::string::npos) << r.error().message;
    expect_only({});
    EXPECT_EQ(records(), 0u) << verb;
  }
  shims_.fail_next_start();
  Timing t;
  EXPECT_FALSE(svc_->create(p_, {}, t));
  expect_only({});
  store_.fail_writes(1);
  auto r = svc_->create(p_, {}, t);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("fake store"), std::string::npos);
  expect_only({});
  EXPECT_EQ(records(), 0u);
  // The capacity taken by the failed creates was given back.
  cfg_.max_sandboxes_per_project = 1;
  svc_.reset();
  start();
  EXPECT_NE(create(), "");
}

TEST_F(LifecycleTest, AForkThatFailsAtAnyStepLeavesTheSourceAloneAndNoFork) {
  start();
  SandboxSpec spec;
  spec.forkable = true;
  const std::string src = create(spec);
  for (const char* verb : {"checkpoint", "make_disk", "create", "restore", "limit_cpu"}) {
    rt_.fail(verb);
    Timing t;
    auto r = svc_->fork(p_, src, 3, std::nullopt, t);
    ASSERT_FALSE(r) << verb;
    EXPECT_EQ(r.error().code, ErrorCode::kInternal);
    EXPECT_NE(r.error().message.find("forking " + src), std::string::npos) << r.error().message;
    expect_only({src});
    EXPECT_EQ(records(), 1u) << verb;
    EXPECT_EQ(status(src), "running") << verb;
    EXPECT_TRUE(fs::is_empty(cfg_.fork_images_dir())) << verb;
  }
  store_.fail_writes(1);
  Timing t;
  EXPECT_FALSE(svc_->fork(p_, src, 2, std::nullopt, t));
  expect_only({src});
  EXPECT_EQ(records(), 1u);
  // Not forkable, paused: refused with the spec's codes, nothing done.
  const std::string plain = create();
  const int checkpoints = rt_.calls("checkpoint");
  auto nf = svc_->fork(p_, plain, 1, std::nullopt, t);
  ASSERT_FALSE(nf);
  EXPECT_EQ(nf.error().code, ErrorCode::kForkUnavailable);
  ASSERT_TRUE(svc_->pause(p_, src, t));
  auto paused = svc_->fork(p_, src, 1, std::nullopt, t);
  ASSERT_FALSE(paused);
  EXPECT_EQ(paused.error().code, ErrorCode::kSandboxNotRunning);
  EXPECT_EQ(rt_.calls("checkpoint"), checkpoints);  // refused before reaching the runtime
}

TEST_F(LifecycleTest, ASnapshotThatFailsLeavesNoSnapshot) {
  start();
  const std::string id = create();
  Timing t;
  rt_.fail("checkpoint");
  EXPECT_FALSE(svc_->snapshot(p_, id, t));
  store_.fail_writes(1);
  EXPECT_FALSE(svc_->snapshot(p_, id, t));
  EXPECT_TRUE(store_.snapshots().empty());
  EXPECT_TRUE(fs::is_empty(cfg_.snapshots_dir()));
  EXPECT_EQ(status(id), "running");
  // A restore from a snapshot that fails leaves no sandbox.
  auto snap = svc_->snapshot(p_, id, t);
  ASSERT_TRUE(snap);
  rt_.fail("restore");
  SandboxSpec from;
  from.snapshot = (*snap)["id"].get<std::string>();
  EXPECT_FALSE(svc_->create(p_, from, t));
  expect_only({id});
  EXPECT_EQ(records(), 1u);
}

TEST_F(LifecycleTest, EachSandboxHasADiskOfItsOwnSizeAndForksAndRestoresGetTheirOwn) {
  start();
  SandboxSpec spec;
  spec.forkable = true;
  spec.disk_gib = 4;
  const std::string src = create(spec);
  EXPECT_EQ(rt_.disks().at(src), 4);
  EXPECT_EQ(rt_.disk_dir_of(src), "/fake/disks/" + src + "/mnt");
  Timing t;
  auto forks = svc_->fork(p_, src, 2, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  auto snap = svc_->snapshot(p_, src, t);
  ASSERT_TRUE(snap);
  SandboxSpec from;
  from.snapshot = (*snap)["id"].get<std::string>();
  const std::string restored = create(from);
  std::set<std::string> all = {src, restored};
  for (auto& f : (*forks)["data"]) all.insert(f["id"].get<std::string>());
  ASSERT_EQ(all.size(), 4u);
  for (auto& id : all) {
    EXPECT_EQ(rt_.disks().at(id), 4) << id;
    EXPECT_EQ(rt_.disk_dir_of(id), "/fake/disks/" + id + "/mnt") << id;
  }
  // A disk that cannot be removed does not hold up the delete; the next start sweeps it.
  rt_.fail("remove_disk", 1, restored);
  for (auto& id : all) ASSERT_TRUE(svc_->remove(p_, id, t));
  svc_->settle();
  EXPECT_EQ(rt_.disks().size(), 1u);
  svc_.reset();
  start();
  expect_only({});
}

TEST_F(LifecycleTest, WithTheOverlayInMemoryThereAreNoDisks) {
  cfg_.runtime.root_overlay = "memory";
  start();
  SandboxSpec spec;
  spec.disk_gib = 4;
  const std::string id = create(spec);
  EXPECT_TRUE(rt_.disks().empty());
  EXPECT_EQ(rt_.disk_dir_of(id), "");
  EXPECT_EQ(rt_.calls("make_disk"), 0);
}

TEST_F(LifecycleTest, ARestartSweepsADiskNoRecordOwns) {
  start();
  const std::string id = create();
  svc_.reset();
  rt_.leave_disk("sbx_orphan", 2);  // a create cut short between its disk and its container
  start();
  EXPECT_EQ(status(id), "running");
  expect_only({id});
}

TEST_F(LifecycleTest, ARestartSweepsASnapshotImageNoRecordOwns) {
  start();
  const std::string id = create();
  Timing t;
  auto kept = svc_->snapshot(p_, id, t);
  ASSERT_TRUE(kept) << kept.error().message;
  const std::string snp = (*kept)["id"];
  svc_.reset();
  // A b3osd killed between writing an image and recording it.
  const std::string cut = cfg_.snapshots_dir() + "/snp_cutshort";
  fs::create_directories(cut);
  std::ofstream(cut + "/checkpoint.img") << "partial";
  start();
  EXPECT_FALSE(fs::exists(cut));
  EXPECT_TRUE(fs::exists(cfg_.snapshots_dir() + "/" + snp));
  EXPECT_TRUE(svc_->get_snapshot(p_, snp));
}

TEST_F(LifecycleTest, PoolMembersServeOnlyLaunchesOfTheirDiskSize) {
  cfg_.warm_pool_size = 1;
  cfg_.fork_pool_size = 1;
  start();
  auto pooled = [&] {
    return rt_.ids().size();
  };
  for (int i = 0; i < 300 && pooled() < 2; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(pooled(), 2u);
  std::this_thread::sleep_for(100ms);  // both members are up and sit in their pools
  const std::set<std::string> members = rt_.ids();
  for (auto& id : members) EXPECT_EQ(rt_.disks().at(id), 1);
  SandboxSpec big;
  big.disk_gib = 3;
  const std::string a = create(big);  // not the warm member: it has 1 GiB
  EXPECT_FALSE(members.count(a));
  EXPECT_EQ(rt_.disks().at(a), 3);
  big.forkable = true;
  const std::string b = create(big);  // not the fork pool's either
  EXPECT_FALSE(members.count(b));
  EXPECT_EQ(rt_.disks().at(b), 3);
  const std::string c = create();  // the default size takes the warm member
  EXPECT_TRUE(members.count(c));
}

TEST_F(LifecycleTest, PauseAndResumeFailuresLeaveTheStateTheyFound) {
  start();
  const std::string id = create();
  Timing t;
  rt_.fail("pause");
  auto p = svc_->pause(p_, id, t);
  ASSERT_FALSE(p);
  EXPECT_EQ(status(id), "running");
  ASSERT_TRUE(svc_->pause(p_, id, t));
  rt_.fail("resume");
  EXPECT_FALSE(svc_->resume(p_, id, t));
  EXPECT_EQ(status(id), "paused");
  EXPECT_EQ(store_.sandboxes().at(id).state, State::kPaused);
  ASSERT_TRUE(svc_->resume(p_, id, t));
  EXPECT_EQ(status(id), "running");
  EXPECT_EQ(store_.sandboxes().at(id).state, State::kRunning);
}

TEST_F(LifecycleTest, ADeleteWhoseRuntimeFailsIsStillADeleteAndTheNextStartSweeps) {
  start();
  const std::string id = create();
  // The start's own sweep runs in the background: let it pass first, or under load it can
  // come after the delete below and take the container this test means the restart to take.
  svc_->settle();
  Timing t;
  rt_.fail("destroy");
  auto d = svc_->remove(p_, id, t);
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["status"], "stopped");
  EXPECT_EQ(store_.sandboxes().at(id).state, State::kStopped);
  svc_->settle();
  EXPECT_EQ(rt_.ids(), std::set<std::string>{id});  // the runtime kept it
  svc_.reset();
  start();  // a restart removes what no record owns
  svc_->settle();
  EXPECT_TRUE(rt_.ids().empty());
}

TEST_F(LifecycleTest, AnAgentThatDiesFailsItsSandboxAndFreesItsHost) {
  start();
  const std::string id = create();
  rt_.crash(id);
  for (int i = 0; i < 200 && status(id) != "failed"; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(status(id), "failed");
  EXPECT_EQ(store_.sandboxes().at(id).stop_reason, store::StopReason::kFailed);
  EXPECT_FALSE(store_.sandboxes().at(id).stop_message.empty());
  expect_only({});
}

TEST_F(LifecycleTest, AnAgentThatStopsAnsweringFailsItsSandboxButAPausedOneIsLeftAlone) {
  cfg_.liveness_quiet_ms = 100;
  cfg_.liveness_timeout_ms = 500;
  start();
  const std::string hung = create();
  const std::string paused = create();
  const std::string fine = create();
  Timing t;
  ASSERT_TRUE(svc_->pause(p_, paused, t));
  rt_.stall(hung);
  for (int i = 0; i < 300 && status(hung) != "failed"; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(status(hung), "failed");
  EXPECT_NE(store_.sandboxes().at(hung).stop_message.find("stopped answering"), std::string::npos)
      << store_.sandboxes().at(hung).stop_message;
  std::this_thread::sleep_for(800ms);  // long past the timeout for the others too
  EXPECT_EQ(status(paused), "paused");
  EXPECT_EQ(status(fine), "running");
  ASSERT_TRUE(svc_->resume(p_, paused, t));
  std::this_thread::sleep_for(800ms);
  EXPECT_EQ(status(paused), "running");
  expect_only({paused, fine});
}

TEST_F(LifecycleTest, ARestartReattachesPausedAndRunningSandboxes) {
  start();
  const std::string a = create(), b = create();
  Timing t;
  ASSERT_TRUE(svc_->pause(p_, b, t));
  svc_.reset();  // b3osd stops; the sandboxes keep running, the shims hold the channels
  start();
  EXPECT_EQ(status(a), "running");
  EXPECT_EQ(status(b), "paused");
  ExecSpec e;
  e.argv = {"true"};
  EXPECT_TRUE(svc_->exec(p_, a, e, t, nullptr));
  rt_.crash(a);  // gone while b3osd was down
  svc_.reset();
  start();
  EXPECT_EQ(status(a), "failed");
  EXPECT_EQ(status(b), "paused");
}

TEST_F(LifecycleTest, AKilledShimIsStartedAgainSoTheSandboxOutlivesTheNextRestart) {
  start();
  const std::string id = create();
  const std::string dir = cfg_.sandboxes_dir() + "/" + id;
  auto replaced = [&](pid_t old) {  // within 10 s (about 1 s: the sweep, and a start a second)
    for (int i = 0; i < 1000; ++i) {
      const pid_t now = shims_.recorded_pid(dir);
      if (now > 0 && now != old) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  const pid_t first = shims_.recorded_pid(dir);
  ASSERT_GT(first, 0);
  const int started = shims_.started(), with_log = shims_.started_with_log();
  shims_.kill(dir);  // while b3osd runs: the reaper's sweep (every 500 ms) starts another
  ASSERT_TRUE(replaced(first));
  EXPECT_EQ(shims_.started(), started + 1);
  EXPECT_EQ(shims_.started_with_log(), with_log + 1);  // b3osd's copy of the pipe
  std::this_thread::sleep_for(700ms);  // one is enough: a live shim is left alone
  EXPECT_EQ(shims_.started(), started + 1);
  svc_.reset();
  start();  // the new shim hands the channel and the pipe over
  EXPECT_EQ(status(id), "running");
  ExecSpec e;
  e.argv = {"true"};
  Timing t;
  EXPECT_TRUE(svc_->exec(p_, id, e, t, nullptr));
  // Killed again after the restart: replaced again, with the pipe it handed over.
  const pid_t second = shims_.recorded_pid(dir);
  shims_.kill(dir);
  ASSERT_TRUE(replaced(second));
  EXPECT_EQ(shims_.started_with_log(), with_log + 2);
  // Killed, then deleted before the sweep came: no shim of it is started.
  const int before = shims_.started();
  shims_.kill(dir);
  ASSERT_TRUE(svc_->remove(p_, id, t));
  svc_->settle();
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(shims_.held().count(dir));
  EXPECT_LE(shims_.started(), before + 1);  // the sweep may have come between the two
  expect_only({});
}

TEST_F(LifecycleTest, ACheckpointHoldsOffAPauseWithAClearConflict) {
  start();
  SandboxSpec spec;
  spec.forkable = true;
  const std::string id = create(spec);
  rt_.hang("checkpoint", 800ms);
  auto fork = std::async(std::launch::async, [&] {
    Timing t;
    return svc_->fork(p_, id, 1, std::nullopt, t);
  });
  std::this_thread::sleep_for(200ms);
  Timing t;
  auto p = svc_->pause(p_, id, t);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, ErrorCode::kSandboxNotRunning);
  EXPECT_NE(p.error().message.find("forked or snapshotted"), std::string::npos) << p.error().message;
  EXPECT_EQ(status(id), "running");  // checkpointing shows as running
  auto r = svc_->resume(p_, id, t);    // resuming a running sandbox changes nothing, saved or not
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["status"], "running");
  EXPECT_EQ(rt_.calls("resume"), 0);
  ASSERT_TRUE(fork.get());
  rt_.clear_faults();
  EXPECT_TRUE(svc_->pause(p_, id, t));
}

TEST_F(LifecycleTest, AHungPoolDeleteAndAHungPauseDelayNothingElse) {
  cfg_.warm_pool_size = 1;
  start();
  auto wait_for = [&](size_t n) {
    for (int i = 0; i < 500 && rt_.ids().size() < n; ++i) std::this_thread::sleep_for(10ms);
    ASSERT_EQ(rt_.ids().size(), n);
    std::this_thread::sleep_for(50ms);  // the member's agent is up and it sits in the pool
  };
  wait_for(1);
  const std::string a = create();  // claims the warm member; the pool boots another
  wait_for(2);
  std::string member;
  for (auto& id : rt_.ids())
    if (id != a) member = id;
  rt_.crash(member);                  // the waiting member dies...
  rt_.hang("destroy", 10s, member);   // ...and removing it hangs for 10 s
  rt_.hang("pause", 10s, a);          // and so does pausing a
  auto hung_pause = std::async(std::launch::async, [&] {
    Timing t;
    return svc_->pause(p_, a, t);
  });
  std::this_thread::sleep_for(100ms);

  auto timed = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  };
  std::string c;
  EXPECT_LT(timed([&] { c = create(); }), 2000);  // finds the dead member and goes on
  ASSERT_NE(c, "");
  EXPECT_LT(timed([&] { EXPECT_EQ(status(a), "running"); }), 1000);  // pausing shows as running
  EXPECT_LT(timed([&] { EXPECT_EQ(status(c), "running"); }), 1000);
  EXPECT_LT(timed([&] {
              auto l = svc_->list(p_, store::SandboxQuery{});
              ASSERT_TRUE(l);
              EXPECT_EQ((*l)["data"].size(), 2u);
            }),
            1000);
  EXPECT_LT(timed([&] {
              Timing t;
              ExecSpec e;
              e.argv = {"true"};
              EXPECT_TRUE(svc_->exec(p_, c, e, t, nullptr));
            }),
            1000);
  EXPECT_LT(timed([&] { EXPECT_NE(create(), ""); }), 2000);
  ASSERT_TRUE(hung_pause.get());
  EXPECT_EQ(status(a), "paused");
  rt_.clear_faults();
}


// A `runsc create` the dead b3osd started can outlive it and make the container's cgroups
// after a pass removed that orphan: the next pass removes it once more (nothing lists it by
// then), and the pass after that forgets it.
TEST_F(LifecycleTest, AnOrphanIsRemovedByTwoPassesThenForgotten) {
  start();
  svc_->settle();  // the sweep at start is done: these passes are the test's own
  auto& life = svc_->lifecycle();
  life.release_orphans({"sbx_late"});
  auto second = life.orphans();
  EXPECT_NE(std::find(second.begin(), second.end(), "sbx_late"), second.end());
  life.release_orphans(second);
  auto third = life.orphans();
  EXPECT_EQ(std::find(third.begin(), third.end(), "sbx_late"), third.end());
}

}  // namespace
}  // namespace b3os::sandbox
