#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/runtime/runsc.h"
#include "daemon/sandbox/service.h"

namespace b3os {
namespace {

TEST(OciConfig, LimitsAgentAndWritableOverlay) {
  runtime::ContainerSpec spec;
  spec.id = "sbx_x";
  spec.rootfs = "/t/rootfs";
  spec.agent_path = "/bin/b3os-agent";
  spec.hostname = "h";
  spec.vcpu = 2;
  spec.memory_mib = 1024;
  runtime::RuntimeConfig cfg;
  cfg.memory_overhead_mib = 256;
  auto j = nlohmann::json::parse(runtime::oci_config(spec, cfg));
  EXPECT_EQ(j["process"]["args"][0], "/.b3os/agent");
  EXPECT_EQ(j["root"]["readonly"], false);  // the overlay needs it; the template dir is never written
  EXPECT_EQ(j["root"]["path"], "/t/rootfs");
  // The CPU quota is applied after boot (Runsc::limit_cpu), not in the bundle.
  EXPECT_FALSE(j["linux"]["resources"].contains("cpu"));
  EXPECT_EQ(j["linux"]["resources"]["memory"]["limit"], int64_t(1280) << 20);
  EXPECT_EQ(j["linux"]["cgroupsPath"], "/b3os/sbx_x");
  // Host processes and threads: sized by memory (256 + 2 per MiB), an eighth of pid_max at most.
  EXPECT_EQ(j["linux"]["resources"]["pids"]["limit"], runtime::pids_limit(1024, runtime::host_pid_max()));
  bool agent_mount = false;
  for (auto& m : j["mounts"])
    if (m["destination"] == "/.b3os/agent") agent_mount = m["source"] == "/bin/b3os-agent";
  EXPECT_TRUE(agent_mount);
}

TEST(OciConfig, PidsLimitFollowsMemoryAndLeavesTheHostRoom) {
  EXPECT_EQ(runtime::pids_limit(512, 32768), 1280);
  EXPECT_EQ(runtime::pids_limit(1024, 4194304), 2304);
  // 64 GiB would be 131,328: an eighth of the host's pid_max instead, whatever the memory.
  EXPECT_EQ(runtime::pids_limit(65536, 32768), 4096);
  EXPECT_EQ(runtime::pids_limit(65536, 4194304), 131328);
  EXPECT_EQ(runtime::pids_limit(0, 100), 64);
}

}  // namespace
}  // namespace b3os
