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
  bool agent_mount = false;
  for (auto& m : j["mounts"])
    if (m["destination"] == "/.b3os/agent") agent_mount = m["source"] == "/bin/b3os-agent";
  EXPECT_TRUE(agent_mount);
}

}  // namespace
}  // namespace b3os
