#pragma once
// A SandboxService over the fakes (runtime, shims, agent, store) in a temporary directory with
// one template, no pools: the fixture of the sandbox module's unit tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/ids.h"
#include "daemon/sandbox/service.h"
#include "tests/fakes/fake_runtime.h"
#include "tests/fakes/fake_store.h"

namespace b3os::sandbox {

class FakeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    tmp_ = fs::temp_directory_path() / ("b3os-svc-" + random_base32(8));
    cfg_.data_dir = (tmp_ / "data").string();
    cfg_.run_dir = (tmp_ / "run").string();
    cfg_.templates_dir_override = (tmp_ / "templates").string();
    cfg_.agent_path = "/bin/true";
    cfg_.warm_pool_size = 0;
    cfg_.fork_pool_size = 0;
    cfg_.fork_ahead = 0;  // spares are pool members the tests would count (fork_ahead_test.cc)
    cfg_.template_checkpoints = "off";
    fs::create_directories(tmp_ / "templates/base/rootfs");
    std::ofstream((tmp_ / "templates/base/.b3os-ready").string()) << "ok\n";
    fs::create_directories(cfg_.data_dir);
    p_ = {"prj_a", "key_a"};
  }
  void TearDown() override {
    svc_.reset();
    std::filesystem::remove_all(tmp_);
  }
  /// Builds the service from cfg_ (set it first) and recovers, as b3osd's start does.
  void start() {
    svc_ = std::make_unique<SandboxService>(cfg_, rt_, shims_, store_, ModelHooks{}, network_);
    ASSERT_TRUE(svc_->recover());
  }
  std::string create(SandboxSpec spec = {}) {
    Timing t;
    auto r = svc_->create(p_, spec, t);
    EXPECT_TRUE(r) << r.error().message;
    return r ? (*r)["id"].get<std::string>() : "";
  }
  std::string status(const std::string& id) {
    auto g = svc_->get(p_, id);
    return g ? (*g)["status"].get<std::string>() : "error: " + g.error().message;
  }

  std::filesystem::path tmp_;
  Config cfg_;
  fakes::FakeRuntime rt_;
  fakes::FakeShims shims_;
  fakes::FakeStore store_;
  std::unique_ptr<SandboxService> svc_;
  net::Network* network_ = nullptr;  // the node's sandbox networks (a fake), or none
  Principal p_;
};

}  // namespace b3os::sandbox
