// The cache of roots fetched from a cluster's object store (daemon/sandbox/remote_images.h):
// what the collector removes and what it must leave.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "daemon/sandbox/config.h"
#include "daemon/sandbox/remote_images.h"

namespace b3os::sandbox {
namespace {

namespace fs = std::filesystem;

class RootfsCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("b3os-rootfs-cache-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    cfg_.data_dir = dir_.string();
    fs::create_directories(cfg_.rootfs_cache_dir());
  }
  void TearDown() override { fs::remove_all(dir_); }
  /// A cached root; `age`: how long ago a restore last took it (none: a fetch in progress).
  std::string root(const std::string& fp, std::optional<std::chrono::minutes> age) {
    const fs::path d = fs::path(cfg_.rootfs_cache_dir()) / fp;
    fs::create_directories(d / "rootfs" / "etc");
    std::ofstream(d / "rootfs" / "etc" / "hostname") << "x\n";
    if (age) {
      std::ofstream(d / ".b3os-fingerprint") << fp << "\n";
      fs::last_write_time(d / ".b3os-fingerprint", fs::file_time_type::clock::now() - *age);
    }
    return (d / "rootfs").string();
  }
  bool there(const std::string& fp) { return fs::exists(fs::path(cfg_.rootfs_cache_dir()) / fp); }

  fs::path dir_;
  Config cfg_;
};

TEST_F(RootfsCacheTest, RemovesOnlyRootsNothingUsesAndNoRestoreTookLately) {
  root("old_unused", std::chrono::minutes(120));
  const std::string running = root("old_but_running", std::chrono::minutes(120));
  const std::string snapped = root("old_but_snapshotted", std::chrono::minutes(120));
  root("taken_lately", std::chrono::minutes(5));
  root("being_fetched", std::nullopt);
  EXPECT_EQ(collect_rootfs_cache(cfg_, {running, snapped}, 3600 * 1000), 1);
  EXPECT_FALSE(there("old_unused"));
  EXPECT_TRUE(there("old_but_running"));
  EXPECT_TRUE(there("old_but_snapshotted"));
  EXPECT_TRUE(there("taken_lately"));
  EXPECT_TRUE(there("being_fetched"));
  // Once its sandbox ended, the running one goes too; a second pass finds nothing more.
  EXPECT_EQ(collect_rootfs_cache(cfg_, {snapped}, 3600 * 1000), 1);
  EXPECT_FALSE(there("old_but_running"));
  EXPECT_EQ(collect_rootfs_cache(cfg_, {snapped}, 3600 * 1000), 0);
}

TEST_F(RootfsCacheTest, NoCacheDirectoryIsNothingToDo) {
  fs::remove_all(cfg_.rootfs_cache_dir());
  EXPECT_EQ(collect_rootfs_cache(cfg_, {}, 0), 0);
}

}  // namespace
}  // namespace b3os::sandbox
