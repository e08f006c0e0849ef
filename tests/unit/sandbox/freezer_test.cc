// Idle freezing (daemon/sandbox/freezer.h) against the fakes: the fake agent reports idleness
// as the real one does, answers nothing while frozen and counts every frame that reaches it
// frozen; the fake runtime fails (and counts) a checkpoint or pause of a frozen container, as
// a real one would hang. Every test ends with no such violation.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "tests/unit/sandbox/service_fixture.h"

namespace b3os::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class FreezerTest : public FakeServiceTest {
 protected:
  void SetUp() override {
    FakeServiceTest::SetUp();
    cfg_.idle_freeze_ms = 100;
  }
  void TearDown() override {
    svc_.reset();
    EXPECT_EQ(rt_.frozen_violations(), 0) << "frames or verbs reached a frozen sandbox";
    FakeServiceTest::TearDown();
  }
  bool wait_for(const std::function<bool()>& cond, std::chrono::milliseconds limit = 3s) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (cond()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return cond();
  }
  bool frozen_soon(const std::string& id) {
    return wait_for([&] { return rt_.frozen(id); });
  }
  Result<ExecResult> exec(const std::string& id, const std::string& cmd = "true") {
    Timing t;
    ExecSpec e;
    e.argv = {cmd};
    return svc_->exec(p_, id, e, t, nullptr);
  }
  uint64_t freezes(const std::string& id) { return svc_->freeze_counts(id).value_or(std::make_pair(0, 0)).first; }
  uint64_t thaws(const std::string& id) { return svc_->freeze_counts(id).value_or(std::make_pair(0, 0)).second; }
};

TEST_F(FreezerTest, AnIdleSandboxIsFrozenAfterTheGraceAndThawedForAnExec) {
  cfg_.idle_freeze_ms = 300;
  start();
  const std::string id = create();
  EXPECT_FALSE(rt_.frozen(id)) << "frozen before the grace";
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(rt_.frozen(id)) << "frozen before the grace";
  ASSERT_TRUE(frozen_soon(id));
  EXPECT_EQ(status(id), "running");  // not a state of its own
  EXPECT_EQ(freezes(id), 1u);

  auto r = exec(id);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stdout_data, "ok\n");
  EXPECT_EQ(thaws(id), 1u);
  EXPECT_FALSE(rt_.frozen(id));
  ASSERT_TRUE(frozen_soon(id)) << "idle again after the exec";
  EXPECT_EQ(freezes(id), 2u);
}

TEST_F(FreezerTest, ABurstOfExecsIsNotFrozenBetweenThem) {
  cfg_.idle_freeze_ms = 400;
  start();
  const std::string id = create();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(exec(id));
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(freezes(id), 0u);
  EXPECT_EQ(thaws(id), 0u);
}

TEST_F(FreezerTest, EverythingThatReachesTheSandboxThawsItFirst) {
  start();
  SandboxSpec spec;
  spec.forkable = true;
  const std::string id = create(spec);
  Timing t;
  const std::vector<std::pair<std::string, std::function<bool()>>> ops = {
      {"exec", [&] { return bool(exec(id)); }},
      {"write_file",
       [&] {
         bool sent = false;
         ChunkSource src = [&](char* buf, size_t) -> Result<size_t> {
           if (sent) return size_t{0};
           sent = true;
           buf[0] = 'x';
           return size_t{1};
         };
         return bool(svc_->write_file(p_, id, "/workspace/a", src, t));
       }},
      {"read_file",
       [&] {
         FileSink sink{[](uint64_t) -> Result<void> { return {}; }, [](std::string_view) -> Result<void> { return {}; }};
         return bool(svc_->read_file(p_, id, "/workspace/a", sink, t));
       }},
      {"list_dir", [&] { return bool(svc_->list_dir(p_, id, "/workspace", t)); }},
      {"remove_path", [&] { return bool(svc_->remove_path(p_, id, "/workspace/a", false, t)); }},
      {"ping", [&] { return bool(svc_->ping(p_, id)); }},
      {"fork", [&] { return bool(svc_->fork(p_, id, 1, std::nullopt, t)); }},
      {"snapshot", [&] { return bool(svc_->snapshot(p_, id, t)); }},
      {"pause", [&] { return bool(svc_->pause(p_, id, t)); }},
  };
  for (auto& [name, op] : ops) {
    ASSERT_TRUE(frozen_soon(id)) << "before " << name;
    const uint64_t before = thaws(id);
    EXPECT_TRUE(op()) << name;
    EXPECT_EQ(thaws(id), before + 1) << name;
    EXPECT_EQ(rt_.frozen_violations(), 0) << name;
  }
  // Paused: frozen by the pause, and the freezer leaves it alone (it is not idle-frozen).
  EXPECT_EQ(status(id), "paused");
  const uint64_t f = freezes(id);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(freezes(id), f);
  ASSERT_TRUE(svc_->resume(p_, id, t));
  EXPECT_FALSE(rt_.frozen(id)) << "resume leaves it thawed";
  ASSERT_TRUE(exec(id));
  ASSERT_TRUE(frozen_soon(id)) << "idle again after the resume";
  auto d = svc_->remove(p_, id, t);
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["status"], "stopped");
  svc_->settle();  // released just after the answer
  EXPECT_EQ(rt_.ids().count(id), 0u);
}

TEST_F(FreezerTest, ASandboxWithABackgroundProcessIsNeverFrozen) {
  start();
  const std::string id = create();
  ASSERT_TRUE(frozen_soon(id));
  ASSERT_TRUE(exec(id, "background"));  // e.g. nohup sleep 1000 & from a command that returned
  std::this_thread::sleep_for(600ms);
  EXPECT_FALSE(rt_.frozen(id));
  EXPECT_EQ(freezes(id), 1u);
  ASSERT_TRUE(exec(id, "kill-background"));
  ASSERT_TRUE(frozen_soon(id)) << "idle again once the process is gone";
}

TEST_F(FreezerTest, AnAgentThatNeverReportsIdleIsNeverFrozen) {
  rt_.set_agents_report_idle(false);  // an old agent, as in an older checkpoint image
  start();
  const std::string id = create();
  ASSERT_TRUE(exec(id));
  std::this_thread::sleep_for(600ms);
  svc_->freeze_idle_now();
  EXPECT_FALSE(rt_.frozen(id));
  EXPECT_EQ(freezes(id), 0u);
  ASSERT_TRUE(exec(id));
}

TEST_F(FreezerTest, ZeroGraceNeverFreezes) {
  cfg_.idle_freeze_ms = 0;
  start();
  const std::string id = create();
  std::this_thread::sleep_for(300ms);
  svc_->freeze_idle_now();
  EXPECT_FALSE(rt_.frozen(id));
  ASSERT_TRUE(exec(id));
}

TEST_F(FreezerTest, ARestartThawsASandboxLeftFrozenAndFreezesItAgain) {
  start();
  const std::string id = create();
  ASSERT_TRUE(frozen_soon(id));
  svc_.reset();  // b3osd stops; the sandbox stays frozen
  ASSERT_TRUE(rt_.frozen(id));
  start();
  EXPECT_EQ(status(id), "running");
  ASSERT_TRUE(exec(id));
  ASSERT_TRUE(frozen_soon(id)) << "frozen again once idle";
}

TEST_F(FreezerTest, TheReaperPausesOrStopsAFrozenSandbox) {
  start();
  SandboxSpec pausing;
  pausing.timeout_s = 1;
  pausing.on_idle = "pause";
  SandboxSpec stopping;
  stopping.timeout_s = 1;
  const std::string a = create(pausing), b = create(stopping);
  ASSERT_TRUE(frozen_soon(a));
  ASSERT_TRUE(frozen_soon(b));
  ASSERT_TRUE(wait_for([&] { return status(a) == "paused" && status(b) == "stopped"; }, 5s))
      << status(a) << " " << status(b);
  Timing t;
  ASSERT_TRUE(svc_->resume(p_, a, t));
  ASSERT_TRUE(exec(a));
}

}  // namespace
}  // namespace b3os::sandbox
