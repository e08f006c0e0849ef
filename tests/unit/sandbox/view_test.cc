// The API objects built from typed records.
#include "daemon/sandbox/view.h"

#include <gtest/gtest.h>

#include "daemon/sandbox/state.h"

namespace b3os::sandbox {
namespace {

store::SandboxRecord record() {
  store::SandboxRecord r;
  r.id = "sbx_01m5t68q1b590rj801nbzsqzkk";
  r.project_id = "prj_a";
  r.state = State::kRunning;
  r.started_ms = r.created_ms = r.last_activity_ms = 1000;
  r.secrets = {{"TOKEN", "s3cret"}};
  r.api_scopes = {"infer:run"};
  r.spend_cap_micros = 2500000;
  r.budget_id = "grt_x";
  return r;
}

TEST(Usage, FromLifetimeAndLimits) {
  auto r = record();
  r.vcpu = 2;
  r.memory_mib = 2048;
  r.stopped_ms = 3000;
  auto u = usage_of(r, 99999);
  EXPECT_EQ(u.vcpu_ms, 4000);
  EXPECT_EQ(u.gib_ms, 4000);
  auto live = record();
  live.memory_mib = 512;
  u = usage_of(live, 2000);
  EXPECT_EQ(u.vcpu_ms, 1000);
  EXPECT_EQ(u.gib_ms, 500);
}

TEST(Usage, PausedTimeHoldsMemoryButNoCpu) {
  // 10 s alive, 4 s of it paused earlier and 2 s paused now.
  auto r = record();
  r.started_ms = 0;
  r.vcpu = 2;
  r.memory_mib = 1024;
  r.paused_total_ms = 4000;
  r.paused_since_ms = 8000;
  r.state = State::kPaused;
  auto u = usage_of(r, 10000);
  EXPECT_EQ(u.vcpu_ms, 2 * 4000);
  EXPECT_EQ(u.gib_ms, 10000);
}

TEST(SandboxObject, ShowsTheApiStatusAndNeverASecret) {
  auto r = record();
  r.state = State::kCheckpointing;
  auto j = sandbox_object(r, 2000, 0.25);
  EXPECT_EQ(j["status"], "running");
  EXPECT_EQ(j["secret_names"], nlohmann::json::array({"TOKEN"}));
  EXPECT_EQ(j.dump().find("s3cret"), std::string::npos);
  EXPECT_DOUBLE_EQ(j["api"]["spend_cap_usd"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["api"]["spent_usd"].get<double>(), 0.25);
  EXPECT_EQ(j["expires_at"], "1970-01-01T00:05:01.000Z");  // last activity + timeout_s
  EXPECT_TRUE(j["paused_at"].is_null());
  EXPECT_TRUE(j["stop_reason"].is_null());
  r.state = State::kResuming;
  EXPECT_EQ(sandbox_object(r, 2000, std::nullopt)["status"], "paused");
}

TEST(SandboxObject, AStoppedSandboxExpiredWhenItStopped) {
  auto r = record();
  r.state = State::kStopped;
  r.stopped_ms = 5000;
  r.stop_reason = store::StopReason::kTimeout;
  r.stop_message = "idle";
  auto j = sandbox_object(r, 9000, std::nullopt);
  EXPECT_EQ(j["status"], "stopped");
  EXPECT_EQ(j["stop_reason"], "timeout");
  EXPECT_EQ(j["stop_message"], "idle");
  EXPECT_EQ(j["expires_at"], j["stopped_at"]);
  EXPECT_EQ(j["usage"]["vcpu_ms"], 4000);
}

}  // namespace
}  // namespace b3os::sandbox
