// The object store's dir: backend and the sets and trees on it (daemon/objstore). The s3:
// backend runs against a real S3 test server in tests/cluster/cluster.sh.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "daemon/objstore/objstore.h"
#include "daemon/objstore/transfer.h"

namespace fs = std::filesystem;
using namespace b3os;
using namespace b3os::objstore;

namespace {

class ObjstoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("b3os-objstore-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "local");
    fs::create_directories(root_ / "scratch");
    auto os = open_object_store("dir:" + (root_ / "store").string());
    ASSERT_TRUE(os) << os.error().message;
    os_ = std::move(*os);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  fs::path root_;
  std::unique_ptr<ObjectStore> os_;
};

TEST(ObjstoreOpen, SaysWhatIsWrongWithASpec) {
  EXPECT_FALSE(open_object_store("ftp://x"));
  EXPECT_FALSE(open_object_store("dir:relative/path"));
  EXPECT_FALSE(open_object_store("s3://"));
  EXPECT_FALSE(open_object_store("s3://Bad_Bucket/x"));
  EXPECT_FALSE(open_object_store("s3://b/../x"));
  ::unsetenv("AWS_ACCESS_KEY_ID");
  auto r = open_object_store("s3://bucket/prefix?endpoint=http://127.0.0.1:1");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("AWS_ACCESS_KEY_ID"), std::string::npos);
  ::setenv("AWS_ACCESS_KEY_ID", "a", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  EXPECT_FALSE(open_object_store("s3://bucket?endpoint=file:///etc"));
  auto ok = open_object_store("s3://bucket/pre/fix/?endpoint=http://127.0.0.1:1/&region=eu-west-1");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ((*ok)->describe(), "s3://bucket/pre/fix at http://127.0.0.1:1");
}

TEST(ObjstoreOpen, AnS3StoreThatCannotBeReachedIsUnavailableNotMissing) {
  ::setenv("AWS_ACCESS_KEY_ID", "a", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "b", 1);
  auto os = open_object_store("s3://bucket?endpoint=http://127.0.0.1:1");
  ASSERT_TRUE(os);
  auto r = (*os)->exists("x/manifest.json");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNodeUnavailable);
}

TEST_F(ObjstoreTest, KeysThatCouldLeaveTheStoreAreRefused) {
  write(root_ / "local/f", "x");
  for (std::string key : {"../x", "a/../../x", "/abs", "a//b", "a/./b", "a\\b", "", "a/"})
    EXPECT_FALSE(os_->put_file(key, (root_ / "local/f").string(), "")) << key;
  EXPECT_FALSE(fs::exists(root_ / "x"));
}

TEST_F(ObjstoreTest, ASetComesBackWholeAndCheckedAndGoesManifestFirst) {
  write(root_ / "local/checkpoint.img", std::string(3 << 20, 'm'));
  write(root_ / "local/pages.img", "pages");
  auto m = push_set(*os_, "snapshots/snp_1", (root_ / "local").string(), {{"rootfs", "abc"}});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ((*m)["files"].size(), 2u);
  auto got = read_manifest(*os_, "snapshots/snp_1", (root_ / "scratch").string());
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ((*got)["rootfs"], "abc");
  fs::create_directories(root_ / "fetched");
  ASSERT_TRUE(pull_set(*os_, "snapshots/snp_1", *got, (root_ / "fetched").string()));
  EXPECT_EQ(read(root_ / "fetched/pages.img"), "pages");
  EXPECT_EQ(fs::file_size(root_ / "fetched/checkpoint.img"), 3u << 20);

  // A file changed in the store after its manifest: caught, named.
  write(root_ / "store/snapshots/snp_1/pages.img", "PAGES");
  auto bad = pull_set(*os_, "snapshots/snp_1", *got, (root_ / "fetched").string());
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("pages.img does not match"), std::string::npos) << bad.error().message;

  ASSERT_TRUE(remove_set(*os_, "snapshots/snp_1", (root_ / "scratch").string()));
  EXPECT_FALSE(fs::exists(root_ / "store/snapshots/snp_1/manifest.json"));
  EXPECT_FALSE(fs::exists(root_ / "store/snapshots/snp_1/checkpoint.img"));
  auto none = read_manifest(*os_, "snapshots/snp_1", (root_ / "scratch").string());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(remove_set(*os_, "snapshots/snp_1", (root_ / "scratch").string()));  // again: nothing to do
  EXPECT_TRUE(fs::is_empty(root_ / "scratch"));  // no scratch file left
}

TEST_F(ObjstoreTest, AManifestThatNamesAPathOutsideItsSetIsRefused) {
  write(root_ / "store/s/manifest.json",
        R"({"version":1,"files":[{"name":"../../etc/passwd","size":1,"sha256":")" + std::string(64, 'a') + R"("}]})");
  auto m = read_manifest(*os_, "s", (root_ / "scratch").string());
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, ErrorCode::kInternal);
}

TEST_F(ObjstoreTest, ATreeComesBackWithItsModesLinksAndTimes) {
  const fs::path t = root_ / "local/rootfs";
  write(t / "etc/hostname", "box\n");
  write(t / "etc/ssl/Fo\xcc\x81t\xc3\xa1n\xc3\xbas\xc3\xadtv\xc3\xa1ny.crt", "cert");  // not ASCII, in the C locale
  write(t / "usr/bin/tool", "#!/bin/sh\n");
  fs::permissions(t / "usr/bin/tool", fs::perms(0755));
  fs::create_symlink("../usr/bin/tool", t / "etc/link");
  fs::create_directories(t / "empty");
  struct timespec times[2] = {{1600000000, 123456789}, {1600000000, 123456789}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (t / "etc/hostname").c_str(), times, 0), 0);
  auto pushed = push_tree(*os_, "rootfs/fp", t.string(), (root_ / "scratch").string());
  ASSERT_TRUE(pushed) << pushed.error().message;
  const fs::path back = root_ / "back/rootfs";
  fs::create_directories(back.parent_path());
  auto r = pull_tree(*os_, "rootfs/fp", back.string(), (root_ / "scratch").string());
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(read(back / "etc/hostname"), "box\n");
  EXPECT_EQ(read(back / "etc/ssl/Fo\xcc\x81t\xc3\xa1n\xc3\xbas\xc3\xadtv\xc3\xa1ny.crt"), "cert");
  EXPECT_EQ(fs::status(back / "usr/bin/tool").permissions() & fs::perms::all, fs::perms(0755));
  EXPECT_EQ(fs::read_symlink(back / "etc/link"), "../usr/bin/tool");
  EXPECT_TRUE(fs::is_directory(back / "empty"));
  struct stat st {};
  ASSERT_EQ(::stat((back / "etc/hostname").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1600000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 123456789);
  // Nothing staged is left beside the tree or in the scratch directory.
  EXPECT_EQ(std::distance(fs::directory_iterator(back.parent_path()), fs::directory_iterator()), 1);
  EXPECT_TRUE(fs::is_empty(root_ / "scratch"));
}

}  // namespace
