// prepare_root on a root a tenant wrote: every directory, mode and file it sets up is made
// beneath the root's fd, and no symlink in the root (to a host file, a host directory, the
// data directory, `/`) leads a change onto the host. Before image::TenantRoot, a root whose
// `workspace` was a symlink to a host file made that file mode 1777 (issue 41, point 1).

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "daemon/image/root_ops.h"
#include "daemon/template/service.h"

namespace b3os::tpl {
namespace {

namespace fs = std::filesystem;

class PrepareRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/b3os-prepare-root.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/rootfs";
    host_ = dir_ + "/host";  // stands for the host's own files, outside the root
    fs::create_directories(root_);
    fs::create_directories(host_ + "/dir");
    fs::create_directories(host_ + "/etc");
    std::ofstream(host_ + "/file") << "host";
    ::chmod((host_ + "/dir").c_str(), 0700);
    ::chmod((host_ + "/etc").c_str(), 0755);
    ::chmod((host_ + "/file").c_str(), 0600);
    ::chmod(host_.c_str(), 0711);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Every path under host_ with its mode and size: what must not change.
  std::map<std::string, std::pair<mode_t, uintmax_t>> host_state() const {
    std::map<std::string, std::pair<mode_t, uintmax_t>> out;
    struct stat st {};
    ::lstat(host_.c_str(), &st);
    out[host_] = {st.st_mode, 0};
    for (auto& e : fs::recursive_directory_iterator(host_)) {
      ::lstat(e.path().c_str(), &st);
      out[e.path().string()] = {st.st_mode, S_ISREG(st.st_mode) ? static_cast<uintmax_t>(st.st_size) : 0};
    }
    return out;
  }
  mode_t mode_of(const std::string& p) const {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode;
  }

  std::string dir_, root_, host_;
};

TEST_F(PrepareRootTest, APlainRootGetsItsDirectoriesModesAndResolvConf) {
  ASSERT_TRUE(TemplateService::prepare_root(root_));
  for (const char* d : {"proc", "dev", "sys", "tmp", ".b3os", "workspace", "etc", "root"})
    EXPECT_TRUE(S_ISDIR(mode_of(root_ + "/" + d))) << d;
  EXPECT_EQ(mode_of(root_ + "/workspace") & 07777, 01777u);
  EXPECT_EQ(mode_of(root_ + "/tmp") & 07777, 01777u);
  EXPECT_EQ(mode_of(root_ + "/proc") & 07777, 0755u);
  EXPECT_TRUE(S_ISREG(mode_of(root_ + "/etc/resolv.conf")));
  // A second time changes nothing and fails nothing.
  ASSERT_TRUE(TemplateService::prepare_root(root_));
}

TEST_F(PrepareRootTest, SymlinksInTheRootNeverLeadAChangeOntoTheHost) {
  // Every trick at once: workspace to a host file, tmp to a host directory, etc to the host's
  // etc (resolv.conf would be created there), .b3os and root to `/`-like places, dangling ones.
  fs::create_symlink(host_ + "/file", root_ + "/workspace");
  fs::create_symlink(host_ + "/dir", root_ + "/tmp");
  fs::create_symlink(host_ + "/etc", root_ + "/etc");
  fs::create_symlink(host_, root_ + "/.b3os");
  fs::create_symlink("/", root_ + "/root");
  fs::create_symlink(host_ + "/made-by-b3osd", root_ + "/proc");
  const auto before = host_state();
  ASSERT_TRUE(TemplateService::prepare_root(root_));
  EXPECT_EQ(host_state(), before);
  EXPECT_FALSE(fs::exists(host_ + "/made-by-b3osd"));
  EXPECT_FALSE(fs::exists(host_ + "/etc/resolv.conf"));
  // The symlinks themselves stay: the sandbox resolves them inside, where they reach nothing.
  EXPECT_TRUE(S_ISLNK(mode_of(root_ + "/workspace")));
  EXPECT_TRUE(S_ISLNK(mode_of(root_ + "/etc")));
  EXPECT_TRUE(S_ISDIR(mode_of(root_ + "/dev")));
}

TEST_F(PrepareRootTest, AResolvConfSymlinkIsLeftAndNotWrittenThrough) {
  fs::create_directories(root_ + "/etc");
  fs::create_symlink(host_ + "/file", root_ + "/etc/resolv.conf");
  const auto before = host_state();
  ASSERT_TRUE(TemplateService::prepare_root(root_));
  EXPECT_EQ(host_state(), before);
  EXPECT_TRUE(S_ISLNK(mode_of(root_ + "/etc/resolv.conf")));
}

TEST_F(PrepareRootTest, CopyInReplacesASymlinkAndNeverWritesThroughIt) {
  fs::create_symlink(host_ + "/file", root_ + "/.b3os-context.tar");
  std::ofstream(dir_ + "/context.tar") << "context bytes";
  const auto before = host_state();
  auto t = image::TenantRoot::open(root_);
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->copy_in(dir_ + "/context.tar", ".b3os-context.tar", 0600));
  EXPECT_EQ(host_state(), before);
  EXPECT_TRUE(S_ISREG(mode_of(root_ + "/.b3os-context.tar")));
  std::ifstream in(root_ + "/.b3os-context.tar");
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "context bytes");
  // Through a symlinked parent: refused, nothing written.
  fs::create_symlink(host_ + "/dir", root_ + "/sub");
  EXPECT_FALSE(t->copy_in(dir_ + "/context.tar", "sub/x.tar"));
  EXPECT_FALSE(fs::exists(host_ + "/dir/x.tar"));
  // A path that is not normalized is the caller's error, not a walk.
  EXPECT_FALSE(t->ensure_dir("../host/dir2"));
  EXPECT_FALSE(fs::exists(host_ + "/dir2"));
}

}  // namespace
}  // namespace b3os::tpl
