#include "cli/context_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace b3os::cli {
namespace {

namespace fs = std::filesystem;

// One entry of a tarball as the test reads it back.
struct Entry {
  std::string name;
  mode_t type = 0;
  int64_t uid = -1;
  std::string data;
  std::string symlink;
};

std::vector<Entry> read_tar(const std::string& path) {
  std::vector<Entry> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 10240), ARCHIVE_OK);
  archive_entry* e = nullptr;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    Entry x;
    x.name = archive_entry_pathname(e);
    x.type = archive_entry_filetype(e);
    x.uid = archive_entry_uid(e);
    if (const char* l = archive_entry_symlink(e)) x.symlink = l;
    char buf[4096];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;) x.data.append(buf, static_cast<size_t>(n));
    out.push_back(std::move(x));
  }
  archive_read_free(a);
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class PackDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("b3os-pack-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "src" / "lib");
    std::ofstream(dir_ / "src" / "main.py") << "print(42)\n";
    std::ofstream(dir_ / "src" / "lib" / "big.bin") << std::string(300 << 10, 'x');
    std::ofstream(dir_ / "README") << "hi";
    fs::create_symlink("src/main.py", dir_ / "link");
    fs::create_directory_symlink("/etc", dir_ / "etc-link");  // stored as a link, never entered
    ASSERT_EQ(::mkfifo((dir_ / "pipe").c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(PackDirectory, RelativeSortedNamesContentsAndLinks) {
  auto packed = pack_directory(dir_.string());
  ASSERT_TRUE(packed) << packed.error().message;
  EXPECT_EQ(packed->skipped, 1u);  // the FIFO
  auto entries = read_tar(packed->file.path());
  std::vector<std::string> names;
  for (auto& e : entries) names.push_back(e.name);
  // (tar marks directories with a trailing '/')
  EXPECT_EQ(names, (std::vector<std::string>{"README", "etc-link", "link", "src/", "src/lib/", "src/lib/big.bin",
                                             "src/main.py"}));
  EXPECT_EQ(packed->entries, names.size());
  for (auto& e : entries) {
    EXPECT_EQ(e.uid, 0) << e.name;
    if (e.name == "src/main.py") {
      EXPECT_EQ(e.data, "print(42)\n");
    }
    if (e.name == "src/lib/big.bin") {
      EXPECT_EQ(e.data.size(), 300u << 10);
    }
    if (e.name == "link") {
      EXPECT_EQ(e.type, AE_IFLNK);
      EXPECT_EQ(e.symlink, "src/main.py");
    }
    if (e.name == "etc-link") {
      EXPECT_EQ(e.symlink, "/etc");
    }
    if (e.name == "src/") {
      EXPECT_EQ(e.type, AE_IFDIR);
    }
  }
}

TEST_F(PackDirectory, SameTreeSameBytesAndTheFileGoesAway) {
  std::string path;
  std::string first;
  {
    auto a = pack_directory(dir_.string());
    ASSERT_TRUE(a);
    path = a->file.path();
    first = slurp(path);
    // A later read of the tree (new atimes) packs to the same bytes.
    auto b = pack_directory(dir_.string());
    ASSERT_TRUE(b);
    EXPECT_EQ(slurp(b->file.path()), first);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(first.empty());
}

TEST_F(PackDirectory, RefusesAFileAndAMissingPath) {
  auto file = pack_directory((dir_ / "README").string());
  ASSERT_FALSE(file);
  EXPECT_NE(file.error().message.find("not a directory"), std::string::npos);
  EXPECT_FALSE(pack_directory((dir_ / "nope").string()));
}

}  // namespace
}  // namespace b3os::cli
