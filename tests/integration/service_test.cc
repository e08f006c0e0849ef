// SandboxService against real runsc, SQLite and the real agent and shim (needs root and the
// cached base template; skips with the reason otherwise).

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/ids.h"
#include "daemon/runtime/runsc.h"
#include "daemon/runtime/shims.h"
#include "daemon/sandbox/service.h"
#include "daemon/store/store.h"
#include "daemon/sys/process.h"

namespace b3os::sandbox {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const char* templates_dir() {
  const char* t = std::getenv("B3OS_TEMPLATES_DIR");
  return t ? t : "/var/lib/b3os/templates";
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (runsc)";
    if (!fs::exists(std::string(templates_dir()) + "/base/.b3os-ready"))
      GTEST_SKIP() << "base template not built at " << templates_dir() << "/base (scripts/test.sh builds it)";
    tmp_ = fs::temp_directory_path() / ("b3os-svc-" + random_base32(8));
    cfg_.data_dir = (tmp_ / "data").string();
    cfg_.run_dir = (tmp_ / "run").string();
    cfg_.runtime.root_dir = (tmp_ / "run/runsc").string();
    cfg_.templates_dir_override = templates_dir();
    cfg_.agent_path = std::string(B3OS_BUILD_DIR) + "/bin/b3os-agent";
    shim_path_ = std::string(B3OS_BUILD_DIR) + "/bin/b3os-shim";
    cfg_.warm_pool_size = 0;  // tests below count containers; the pools have their own e2e section
    cfg_.fork_pool_size = 0;
    cfg_.template_checkpoints = "off";
    fs::create_directories(cfg_.data_dir);
    auto s = store::Store::open(cfg_.data_dir + "/b3os.db");
    runsc_ = std::make_unique<runtime::Runsc>(cfg_.runtime);
    shims_ = std::make_unique<runtime::ShimProcesses>(shim_path_);
    ASSERT_TRUE(s) << s.error().message;
    store_ = std::move(*s);
    principal_ = {"prj_test", "key_test"};
  }
  void TearDown() override {
    store_.reset();
    if (!tmp_.empty()) {
      runtime::Runsc r(cfg_.runtime);
      if (auto ids = r.list())
        for (auto& id : *ids) (void)r.destroy(id);
      fs::remove_all(tmp_);
    }
  }

  /// Nothing of sandbox `id` is left on the host.
  void expect_no_leftovers(const std::string& id) {
    runtime::Runsc r(cfg_.runtime);
    auto ids = r.list();
    ASSERT_TRUE(ids);
    EXPECT_EQ(std::count(ids->begin(), ids->end(), id), 0) << "runsc container left";
    EXPECT_FALSE(fs::exists(cfg_.sandboxes_dir() + "/" + id)) << "sandbox directory left";
    for (const char* ctl : {"memory", "cpu", "pids"})
      EXPECT_FALSE(fs::exists(std::string("/sys/fs/cgroup/") + ctl + "/b3os/" + id)) << ctl << " cgroup left";
    auto ps = sys::run({"pgrep", "-f", id}, 5s);
    ASSERT_TRUE(ps);
    EXPECT_NE(ps->exit_code, 0) << "process left: " << ps->output;
    std::ifstream mounts("/proc/mounts");
    std::string all((std::istreambuf_iterator<char>(mounts)), std::istreambuf_iterator<char>());
    EXPECT_EQ(all.find(id), std::string::npos) << "mount left";
  }

  fs::path tmp_;
  Config cfg_;
  std::string shim_path_;
  std::unique_ptr<runtime::Runsc> runsc_;
  std::unique_ptr<runtime::ShimProcesses> shims_;
  std::unique_ptr<store::Store> store_;
  Principal principal_;
};

TEST_F(ServiceTest, CreateExecFilesDelete) {
  SandboxService svc(cfg_, *runsc_, *shims_, *store_);
  ASSERT_TRUE(svc.recover());
  Timing t;
  auto sbx = svc.create(principal_, SandboxSpec{}, t);
  ASSERT_TRUE(sbx) << sbx.error().message;
  const std::string id = (*sbx)["id"];
  EXPECT_EQ((*sbx)["status"], "running");

  ExecSpec e;
  e.argv = {"python3", "-c", "print(6*7)"};
  auto r = svc.exec(principal_, id, e, t, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->stdout_data, "42\n");

  std::string content = random_bytes(300000);
  size_t off = 0;
  ChunkSource src = [&](char* buf, size_t cap) -> Result<size_t> {
    size_t n = std::min(cap, content.size() - off);
    std::memcpy(buf, content.data() + off, n);
    off += n;
    return n;
  };
  auto w = svc.write_file(principal_, id, "/workspace/f.bin", src, t);
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)["size"], content.size());
  std::string back;
  uint64_t declared = 0;
  FileSink sink{[&](uint64_t n) -> Result<void> { declared = n; return {}; },
                [&](std::string_view c) -> Result<void> { back.append(c); return {}; }};
  ASSERT_TRUE(svc.read_file(principal_, id, "/workspace/f.bin", sink, t));
  EXPECT_EQ(declared, content.size());
  EXPECT_EQ(back, content);
  auto missing = svc.read_file(principal_, id, "/workspace/none", sink, t);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kFileNotFound);

  // Another project cannot see it.
  EXPECT_EQ(svc.get({"prj_other", "k"}, id).error().code, ErrorCode::kSandboxNotFound);
  EXPECT_EQ(svc.exec({"prj_other", "k"}, id, e, t, nullptr).error().code, ErrorCode::kSandboxNotFound);

  auto d = svc.remove(principal_, id, t);
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["status"], "stopped");
  EXPECT_EQ((*d)["stop_reason"], "deleted");
  EXPECT_EQ(svc.exec(principal_, id, e, t, nullptr).error().code, ErrorCode::kSandboxNotRunning);
  svc.settle();
  expect_no_leftovers(id);
}

TEST_F(ServiceTest, FailedCreateLeavesNothing) {
  cfg_.agent_path = "/bin/false";  // the "agent" exits at once: no HELLO
  SandboxService svc(cfg_, *runsc_, *shims_, *store_);
  ASSERT_TRUE(svc.recover());
  Timing t;
  auto sbx = svc.create(principal_, SandboxSpec{}, t);
  ASSERT_FALSE(sbx);
  EXPECT_NE(sbx.error().message.find("agent"), std::string::npos) << sbx.error().message;
  runtime::Runsc r(cfg_.runtime);
  EXPECT_TRUE(r.list()->empty());
  EXPECT_TRUE(fs::is_empty(cfg_.sandboxes_dir()));
  auto page = svc.list(principal_, store::SandboxQuery{});
  ASSERT_TRUE(page);
  EXPECT_TRUE((*page)["data"].empty());
  auto ps = sys::run({"pgrep", "-f", cfg_.run_dir}, 5s);
  EXPECT_NE(ps->exit_code, 0) << "process left: " << ps->output;
}

TEST_F(ServiceTest, MissingShimFailsCleanly) {
  runtime::ShimProcesses missing("/nonexistent/b3os-shim");
  SandboxService svc(cfg_, *runsc_, missing, *store_);
  ASSERT_TRUE(svc.recover());
  Timing t;
  auto sbx = svc.create(principal_, SandboxSpec{}, t);
  ASSERT_FALSE(sbx);
  EXPECT_TRUE(fs::is_empty(cfg_.sandboxes_dir()));
}

TEST_F(ServiceTest, RestartReattachesRunningSandboxes) {
  std::string id;
  {
    SandboxService first(cfg_, *runsc_, *shims_, *store_);
    ASSERT_TRUE(first.recover());
    Timing t;
    auto sbx = first.create(principal_, SandboxSpec{}, t);
    ASSERT_TRUE(sbx) << sbx.error().message;
    id = (*sbx)["id"];
    ExecSpec e;
    e.argv = {"sh", "-c", "echo kept > /workspace/mark"};
    ASSERT_TRUE(first.exec(principal_, id, e, t, nullptr));
    first.stop();
    // `first` goes away like a killed daemon: its channel closes, the shim keeps the fd.
  }
  SandboxService second(cfg_, *runsc_, *shims_, *store_);
  ASSERT_TRUE(second.recover());
  auto got = second.get(principal_, id);
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)["status"], "running");
  ExecSpec e;
  e.argv = {"cat", "/workspace/mark"};
  Timing t;
  auto r = second.exec(principal_, id, e, t, nullptr);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stdout_data, "kept\n");
  ASSERT_TRUE(second.remove(principal_, id, t));
  second.settle();
  expect_no_leftovers(id);
}

// Start, checkpoint and restore go to the sandbox's control socket ("direct") or through the
// runsc CLI ("cli"); both make the same sandboxes, and runsc's own view of them agrees.
class ControlPathTest : public ServiceTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(ControlPathTest, ForksRunAndAreFullCitizens) {
  runtime::RuntimeConfig probe = cfg_.runtime;
  probe.control = "auto";
  if (GetParam() == std::string("direct") && !runtime::Runsc(probe).direct_control())
    GTEST_SKIP() << "this runsc version's control messages are not known to b3osd (it uses the CLI)";
  cfg_.runtime.control = GetParam();
  runtime::Runsc runsc(cfg_.runtime);
  SandboxService svc(cfg_, *runsc_, *shims_, *store_);
  ASSERT_TRUE(svc.recover());
  Timing t;
  SandboxSpec spec;
  spec.forkable = true;
  auto src = svc.create(principal_, spec, t);
  ASSERT_TRUE(src) << src.error().message;
  const std::string id = (*src)["id"];
  EXPECT_EQ(runsc.state(id).value_or(runtime::ContainerState::kMissing), runtime::ContainerState::kRunning);
  ExecSpec e;
  e.argv = {"sh", "-c", "echo before > /workspace/mark"};
  ASSERT_TRUE(svc.exec(principal_, id, e, t, nullptr));

  auto forks = svc.fork(principal_, id, 2, std::nullopt, t);
  ASSERT_TRUE(forks) << forks.error().message;
  ASSERT_EQ((*forks)["data"].size(), 2u);
  for (auto& f : (*forks)["data"]) {
    const std::string fid = f["id"];
    // runsc sees the restored container as running (its state file was updated).
    EXPECT_EQ(runsc.state(fid).value_or(runtime::ContainerState::kMissing), runtime::ContainerState::kRunning);
    e.argv = {"cat", "/workspace/mark"};
    auto r = svc.exec(principal_, fid, e, t, nullptr);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->stdout_data, "before\n");
    // A fork is a full citizen: runsc can pause and resume it, and the fork can fork.
    ASSERT_TRUE(svc.pause(principal_, fid, t));
    ASSERT_TRUE(svc.resume(principal_, fid, t));
  }
  const std::string f0 = (*forks)["data"][0]["id"];
  auto grand = svc.fork(principal_, f0, 1, std::nullopt, t);
  ASSERT_TRUE(grand) << grand.error().message;
  std::vector<std::string> all = {id, f0, (*forks)["data"][1]["id"], (*grand)["data"][0]["id"]};
  for (auto& x : all) ASSERT_TRUE(svc.remove(principal_, x, t));
  svc.settle();
  for (auto& x : all) expect_no_leftovers(x);
}

INSTANTIATE_TEST_SUITE_P(Paths, ControlPathTest, ::testing::Values("direct", "cli"));

TEST_F(ServiceTest, DirectRestoreRefusesAContainerThatIsNotCreated) {
  if (!runtime::Runsc(cfg_.runtime).direct_control())
    GTEST_SKIP() << "this runsc version's control messages are not known to b3osd (it uses the CLI)";
  SandboxService svc(cfg_, *runsc_, *shims_, *store_);
  ASSERT_TRUE(svc.recover());
  Timing t;
  auto sbx = svc.create(principal_, SandboxSpec{}, t);
  ASSERT_TRUE(sbx) << sbx.error().message;
  const std::string id = (*sbx)["id"];
  runtime::Runsc runsc(cfg_.runtime);
  // A running container is not restored into, and is left running.
  const std::string image = tmp_.string() + "/image";
  fs::create_directories(image);
  for (const char* f : {"checkpoint.img", "pages_meta.img", "pages.img"}) std::ofstream(image + "/" + f) << "x";
  auto r = runsc.restore(id, cfg_.sandboxes_dir() + "/" + id, image);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("running, not created"), std::string::npos) << r.error().message;
  // No image: a clear error naming the file.
  auto no_image = runsc.restore(id, cfg_.sandboxes_dir() + "/" + id, tmp_.string() + "/no-image");
  ASSERT_FALSE(no_image);
  EXPECT_NE(no_image.error().message.find("checkpoint.img"), std::string::npos) << no_image.error().message;
  auto started = runsc.start(id);
  ASSERT_FALSE(started);
  EXPECT_NE(started.error().message.find("not created"), std::string::npos) << started.error().message;
  EXPECT_EQ(runsc.state(id).value_or(runtime::ContainerState::kMissing), runtime::ContainerState::kRunning);
  ExecSpec e;
  e.argv = {"true"};
  EXPECT_TRUE(svc.exec(principal_, id, e, t, nullptr));
  // No container: a clear error, nothing made.
  auto none = runsc.start("sbx_nonexistent");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no container"), std::string::npos) << none.error().message;
  ASSERT_TRUE(svc.remove(principal_, id, t));
  svc.settle();
  expect_no_leftovers(id);
}

}  // namespace
}  // namespace b3os::sandbox
