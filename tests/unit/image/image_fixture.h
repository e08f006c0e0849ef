#pragma once
// The image importer's test bench: a temporary directory holding an empty root to import into
// and, beside it, a sentinel directory that no image may change; archives are made by
// tests/fixtures/make_image.py.

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/image/image.h"

extern char** environ;

namespace b3os::image {

namespace fs = std::filesystem;

/// What a tree looks like to lstat, file contents included: equal snapshots, unchanged tree.
inline std::map<std::string, std::string> snapshot(const std::string& root) {
  std::map<std::string, std::string> out;
  std::vector<std::string> todo{""};
  while (!todo.empty()) {
    const std::string rel = todo.back();
    todo.pop_back();
    const std::string p = root + (rel.empty() ? "" : "/" + rel);
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    std::ostringstream d;
    d << std::oct << st.st_mode << std::dec << " " << st.st_uid << ":" << st.st_gid << " " << st.st_size << " "
      << st.st_mtim.tv_sec << "." << st.st_mtim.tv_nsec << " " << st.st_nlink;
    if (S_ISLNK(st.st_mode)) d << " -> " << fs::read_symlink(p).string();
    if (S_ISREG(st.st_mode)) {
      std::ifstream f(p, std::ios::binary);
      d << " " << std::string(std::istreambuf_iterator<char>(f), {});
    }
    if (S_ISDIR(st.st_mode))
      for (const auto& e : fs::directory_iterator(p)) todo.push_back((rel.empty() ? "" : rel + "/") + e.path().filename().string());
    out[rel] = d.str();
  }
  return out;
}

class ImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/b3os-image-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/root";
    sentinel_ = dir_ + "/sentinel";
    fs::create_directories(root_);
    fs::create_directories(sentinel_ + "/sub");
    write(sentinel_ + "/file", "keep\n");
    write(sentinel_ + "/sub/x", "keep too\n");
    ::chmod((sentinel_ + "/file").c_str(), 0640);
    before_ = snapshot(sentinel_);
  }
  void TearDown() override {
    EXPECT_EQ(snapshot(sentinel_), before_) << "an image changed the sentinel directory beside the root";
    EXPECT_TRUE(remove_tree(dir_));
  }

  static void write(const std::string& path, const std::string& data) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << data;
  }
  static std::string read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  /// Runs make_image.py with `args` (after OUT) and returns the archive's path.
  std::string make(const std::vector<std::string>& args) {
    const std::string out = dir_ + "/image-" + std::to_string(++made_) + ".tar";
    std::vector<std::string> argv{B3OS_PYTHON3, B3OS_MAKE_IMAGE, out};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    pid_t pid = 0;
    EXPECT_EQ(::posix_spawn(&pid, c[0], nullptr, nullptr, c.data(), environ), 0);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "make_image.py failed for " << out;
    return out;
  }
  /// A layer spec file (a JSON list of entries) for --layer-spec.
  std::string spec(const nlohmann::json& entries) {
    const std::string p = dir_ + "/spec-" + std::to_string(++made_) + ".json";
    write(p, entries.dump());
    return p;
  }

  Result<Config> import(const std::string& archive, const Limits& limits = {}) {
    log_.clear();
    return image::import(archive, root_, limits, [this](std::string_view l) { log_.emplace_back(l); });
  }

  std::string dir_, root_, sentinel_;
  std::map<std::string, std::string> before_;
  std::vector<std::string> log_;
  int made_ = 0;
};

}  // namespace b3os::image
