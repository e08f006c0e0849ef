// Importing image archives made by tests/fixtures/make_image.py: both formats, the layers'
// entry types, replacement and whiteouts, setuid policy, and the config's defaults.

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "tests/unit/image/image_fixture.h"

namespace b3os::image {
namespace {

using Json = nlohmann::json;

struct stat lstat_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

TEST_F(ImageTest, DockerSaveAppliesLayersInOrderAndReturnsTheConfig) {
  write(dir_ + "/l1/etc/os-release", "ID=one\n");
  write(dir_ + "/l1/keep", "lower\n");
  write(dir_ + "/l2/etc/os-release", "ID=two\n");
  write(dir_ + "/l2/app/run.sh", "#!/bin/sh\n");
  // The same directory twice: docker save writes the second as a symlink to the first.
  auto archive = make({"--layer", dir_ + "/l1", "--layer", dir_ + "/l2", "--layer", dir_ + "/l1", "--entrypoint",
                       R"(["/app/run.sh"])", "--cmd", R"(["--port", "8080"])", "--env", "PATH=/usr/bin", "--env",
                       "LANG=C.UTF-8", "--workdir", "/app", "--user", "1000:1000", "--expose", "8080/tcp", "--expose",
                       "53/udp"});
  auto cfg = import(archive);
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->format, "docker-save");
  EXPECT_EQ(cfg->layers, 3);
  EXPECT_EQ(cfg->entrypoint, std::vector<std::string>{"/app/run.sh"});
  EXPECT_EQ(cfg->cmd, (std::vector<std::string>{"--port", "8080"}));
  EXPECT_EQ(cfg->env, (std::vector<std::string>{"PATH=/usr/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(cfg->workdir, "/app");
  EXPECT_EQ(cfg->user, "1000:1000");
  EXPECT_EQ(cfg->exposed_ports, (std::vector<std::string>{"53/udp", "8080/tcp"}));
  EXPECT_EQ(cfg->bytes, 3u * 10240u);  // python's tarfile pads each layer to 10240 bytes
  EXPECT_GE(cfg->entries, 10u);
  EXPECT_EQ(read(root_ + "/etc/os-release"), "ID=one\n");  // layer 3 (= layer 1) is on top
  EXPECT_EQ(read(root_ + "/keep"), "lower\n");
  EXPECT_EQ(read(root_ + "/app/run.sh"), "#!/bin/sh\n");
  ASSERT_EQ(log_.size(), 4u);
  EXPECT_NE(log_[3].find("layer 3 of 3"), std::string::npos);
}

TEST_F(ImageTest, ACompressedArchiveIsReadAgainForLayersOutOfOrder) {
  write(dir_ + "/l1/f", "one");
  write(dir_ + "/l2/f", "two");
  // Layer 3 is layer 1's member again: behind layer 2's, whichever way the ids sort.
  const std::string archive =
      make({"--layer", dir_ + "/l1", "--layer", dir_ + "/l2", "--layer", dir_ + "/l1", "--gzip-archive"});
  auto cfg = import(archive);
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(read(root_ + "/f"), "one");

  // Its layers take 30720 bytes, but reading it twice decompresses its ~40 kB twice.
  ASSERT_TRUE(remove_tree(root_));
  fs::create_directory(root_);
  Limits limits;
  limits.max_total_bytes = 50000;
  cfg = import(archive, limits);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(cfg.error().message.find("the archive is compressed and its layers are not stored in their order"),
            std::string::npos)
      << cfg.error().message;
}

TEST_F(ImageTest, OciLayoutWithGzipLayers) {
  write(dir_ + "/l1/etc/hostname", "box\n");
  write(dir_ + "/l2/srv/data", std::string(100000, 'x'));
  auto cfg = import(make({"--format", "oci", "--gzip", "--layer", dir_ + "/l1", "--layer", dir_ + "/l2", "--cmd",
                          R"(["python3"])"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->format, "oci-layout");
  EXPECT_EQ(cfg->layers, 2);
  EXPECT_EQ(cfg->cmd, std::vector<std::string>{"python3"});
  EXPECT_EQ(read(root_ + "/etc/hostname"), "box\n");
  EXPECT_EQ(read(root_ + "/srv/data"), std::string(100000, 'x'));
  EXPECT_GT(cfg->bytes, 100000u);
}

TEST_F(ImageTest, NewerDockerSaveWithBlobsAndZstd) {
  if (::access("/usr/bin/zstd", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/zstd to make a zstd layer with";
  write(dir_ + "/l1/bin/tool", "tool\n");
  auto cfg = import(make({"--format", "docker-oci", "--compress", "zstd", "--layer", dir_ + "/l1"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->format, "docker-save");
  EXPECT_EQ(read(root_ + "/bin/tool"), "tool\n");
}

TEST_F(ImageTest, NewerDockerSaveUncompressed) {
  write(dir_ + "/l1/a", "1");
  write(dir_ + "/l2/b", "2");
  auto cfg = import(make({"--format", "docker-oci", "--layer", dir_ + "/l1", "--layer", dir_ + "/l2"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->format, "docker-save");
  EXPECT_EQ(read(root_ + "/a") + read(root_ + "/b"), "12");
}

TEST_F(ImageTest, OciIndexPicksLinuxAmd64InANestedIndex) {
  write(dir_ + "/l1/f", "x");
  auto cfg = import(make({"--format", "oci", "--layer", dir_ + "/l1", "--platforms", "linux/arm64,linux/amd64",
                          "--nested", "--cmd", R"(["right"])"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->cmd, std::vector<std::string>{"right"});
}

TEST_F(ImageTest, OciIndexWithoutAmd64IsRefused) {
  auto cfg = import(make({"--format", "oci", "--platforms", "linux/arm64,linux/s390x"}));
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(cfg.error().message.find("index.json lists 2 manifests and 0 of them for linux/amd64"), std::string::npos)
      << cfg.error().message;
}

TEST_F(ImageTest, SeveralImagesAreRefused) {
  for (const char* format : {"docker", "oci"}) {
    auto cfg = import(make({"--format", format, "--hostile", "multi-image"}));
    ASSERT_FALSE(cfg) << format;
    EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(cfg.error().message.find(format == std::string("docker") ? "manifest.json lists 2 images" : "index.json lists 2"),
              std::string::npos)
        << cfg.error().message;
  }
}

TEST_F(ImageTest, EntryTypesOwnersModesAndTimes) {
  auto layer = spec(Json::array({
      {{"path", "etc"}, {"type", "dir"}, {"mode", "0750"}, {"uid", 0}, {"gid", 0}, {"mtime", 1600000000}},
      {{"path", "etc/conf"}, {"data", "c=1\n"}, {"mode", "0640"}, {"uid", 1000}, {"gid", 1001}, {"mtime", 1500000000}},
      {{"path", "etc/link"}, {"type", "symlink"}, {"target", "/etc/passwd"}, {"uid", 7}, {"gid", 8}},
      {{"path", "etc/rel"}, {"type", "symlink"}, {"target", "../../../../outside"}},
      {{"path", "etc/hard"}, {"type", "hardlink"}, {"target", "etc/conf"}},
      {{"path", "run/pipe"}, {"type", "fifo"}, {"mode", "0620"}, {"uid", 5}},
      {{"path", "./dot/slash"}, {"data", "ok"}},
      {{"path", "/abs/olute"}, {"data", "ok"}},
      {{"path", "caf\u00e9"}, {"data", "utf-8 name"}},
  }));
  auto cfg = import(make({"--format", "oci", "--layer-spec", layer}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->entries, 9u);
  auto etc = lstat_of(root_ + "/etc");
  EXPECT_TRUE(S_ISDIR(etc.st_mode));
  EXPECT_EQ(etc.st_mode & 07777, 0750u);
  EXPECT_EQ(etc.st_mtim.tv_sec, 1600000000);  // set after its entries were made
  auto conf = lstat_of(root_ + "/etc/conf");
  EXPECT_EQ(conf.st_mode & 07777, 0640u);
  EXPECT_EQ(conf.st_mtim.tv_sec, 1500000000);
  if (::geteuid() == 0) {
    EXPECT_EQ(conf.st_uid, 1000u);
    EXPECT_EQ(conf.st_gid, 1001u);
    EXPECT_EQ(lstat_of(root_ + "/etc/link").st_uid, 7u);
    EXPECT_EQ(lstat_of(root_ + "/run/pipe").st_uid, 5u);
  }
  EXPECT_EQ(read(root_ + "/etc/conf"), "c=1\n");
  EXPECT_EQ(fs::read_symlink(root_ + "/etc/link"), "/etc/passwd");  // stored as is, never followed
  EXPECT_EQ(fs::read_symlink(root_ + "/etc/rel"), "../../../../outside");
  auto hard = lstat_of(root_ + "/etc/hard");
  EXPECT_EQ(hard.st_ino, conf.st_ino);
  EXPECT_EQ(conf.st_nlink, 2u);
  auto pipe = lstat_of(root_ + "/run/pipe");
  EXPECT_TRUE(S_ISFIFO(pipe.st_mode));
  EXPECT_EQ(pipe.st_mode & 07777, 0620u);
  EXPECT_EQ(lstat_of(root_ + "/run").st_mode & 07777, 0755u);  // made as a parent
  EXPECT_EQ(read(root_ + "/dot/slash"), "ok");
  EXPECT_EQ(read(root_ + "/abs/olute"), "ok");
  EXPECT_EQ(read(root_ + "/caf\u00e9"), "utf-8 name");
}

TEST_F(ImageTest, LaterEntriesReplaceEarlierOnes) {
  auto lower = spec(Json::array({
      {{"path", "a"}, {"data", "file"}},
      {{"path", "d/x"}, {"data", "in d"}},
      {{"path", "s"}, {"type", "symlink"}, {"target", "/"}},
      {{"path", "h"}, {"data", "shared"}},
      {{"path", "h2"}, {"type", "hardlink"}, {"target", "h"}},
      {{"path", "f"}, {"data", "old"}},
  }));
  auto upper = spec(Json::array({
      {{"path", "a"}, {"type", "dir"}},
      {{"path", "a/y"}, {"data", "in a"}},
      {{"path", "d"}, {"data", "now a file"}},
      {{"path", "s"}, {"type", "dir"}},
      {{"path", "s/z"}, {"data", "in s"}},
      {{"path", "h2"}, {"data", "replaced, not written through"}},
      {{"path", "f"}, {"type", "symlink"}, {"target", "a/y"}},
  }));
  auto cfg = import(make({"--layer-spec", lower, "--layer-spec", upper}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_TRUE(S_ISDIR(lstat_of(root_ + "/a").st_mode));
  EXPECT_EQ(read(root_ + "/a/y"), "in a");
  EXPECT_EQ(read(root_ + "/d"), "now a file");
  EXPECT_TRUE(S_ISDIR(lstat_of(root_ + "/s").st_mode));
  EXPECT_EQ(read(root_ + "/s/z"), "in s");
  EXPECT_EQ(read(root_ + "/h"), "shared");  // the old inode is left alone
  EXPECT_EQ(read(root_ + "/h2"), "replaced, not written through");
  EXPECT_TRUE(S_ISLNK(lstat_of(root_ + "/f").st_mode));
}

TEST_F(ImageTest, HardLinksReachLowerLayersAndLinkSymlinksThemselves) {
  auto lower = spec(Json::array({{{"path", "bin/busybox"}, {"data", "bb"}},
                                 {{"path", "s"}, {"type", "symlink"}, {"target", sentinel_ + "/file"}}}));
  auto upper = spec(Json::array({{{"path", "bin/sh"}, {"type", "hardlink"}, {"target", "bin/busybox"}},
                                 {{"path", "t"}, {"type", "hardlink"}, {"target", "s"}}}));
  auto cfg = import(make({"--layer-spec", lower, "--layer-spec", upper}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(lstat_of(root_ + "/bin/sh").st_ino, lstat_of(root_ + "/bin/busybox").st_ino);
  EXPECT_TRUE(S_ISLNK(lstat_of(root_ + "/t").st_mode));
  EXPECT_EQ(lstat_of(root_ + "/t").st_ino, lstat_of(root_ + "/s").st_ino);
}

TEST_F(ImageTest, HardLinkToAMissingEntryIsRefused) {
  auto layer = spec(Json::array({{{"path", "x"}, {"type", "hardlink"}, {"target", "nowhere"}}}));
  auto cfg = import(make({"--layer-spec", layer}));
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("entry \"x\" is a hard link to \"nowhere\", which is not in the image before it"),
            std::string::npos)
      << cfg.error().message;
}

TEST_F(ImageTest, WhiteoutsDeleteLowerEntries) {
  auto lower = spec(Json::array({
      {{"path", "etc/a"}, {"data", "a"}},
      {{"path", "etc/b"}, {"data", "b"}},
      {{"path", "dir/sub/x"}, {"data", "x"}},
      {{"path", "dir/link"}, {"type", "symlink"}, {"target", sentinel_}},
      {{"path", "ln"}, {"type", "symlink"}, {"target", sentinel_}},
  }));
  auto upper = spec(Json::array({
      {{"path", "etc/.wh.a"}, {"data", ""}},
      {{"path", ".wh.dir"}, {"data", ""}},
      {{"path", ".wh.ln"}, {"data", ""}},  // deletes the link, not what it points at
      {{"path", "etc/.wh.absent"}, {"data", ""}},
      {{"path", "nowhere/.wh.x"}, {"data", ""}},
      {{"path", ".wh..wh.plnk"}, {"data", ""}},
  }));
  auto cfg = import(make({"--layer-spec", lower, "--layer-spec", upper}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_FALSE(exists(root_ + "/etc/a"));
  EXPECT_EQ(read(root_ + "/etc/b"), "b");
  EXPECT_FALSE(exists(root_ + "/dir"));
  EXPECT_FALSE(exists(root_ + "/ln"));
  EXPECT_FALSE(exists(root_ + "/nowhere"));  // a whiteout makes no directories
  EXPECT_FALSE(exists(root_ + "/etc/.wh.absent"));
  EXPECT_FALSE(exists(root_ + "/.wh..wh.plnk"));
}

TEST_F(ImageTest, WhiteoutOptionsOfTheFixtureScript) {
  write(dir_ + "/l1/etc/gone", "x");
  write(dir_ + "/l1/var/cache/old", "x");
  write(dir_ + "/l2/var/cache/new", "y");
  auto cfg = import(make({"--layer", dir_ + "/l1", "--layer", dir_ + "/l2", "--whiteout", "2:etc/gone", "--opaque",
                          "2:var/cache"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_FALSE(exists(root_ + "/etc/gone"));
  EXPECT_FALSE(exists(root_ + "/var/cache/old"));
  EXPECT_EQ(read(root_ + "/var/cache/new"), "y");
}

TEST_F(ImageTest, OpaqueDirectoryHidesLowerContentButKeepsThisLayers) {
  auto lower = spec(Json::array({
      {{"path", "d/old"}, {"data", "old"}},
      {{"path", "d/sub/old2"}, {"data", "old"}},
      {{"path", "d/other/deep/old3"}, {"data", "old"}},
      {{"path", "e/keep"}, {"data", "untouched"}},
  }));
  auto upper = spec(Json::array({
      {{"path", "d"}, {"type", "dir"}},
      {{"path", "d/new"}, {"data", "new"}},            // before the marker
      {{"path", "d/sub/new2"}, {"data", "new"}},       // its parent was lower
      {{"path", "d/.wh..wh..opq"}, {"data", ""}},
      {{"path", "d/after"}, {"data", "after"}},        // after the marker
  }));
  auto cfg = import(make({"--format", "oci", "--layer-spec", lower, "--layer-spec", upper}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_FALSE(exists(root_ + "/d/old"));
  EXPECT_FALSE(exists(root_ + "/d/sub/old2"));
  EXPECT_FALSE(exists(root_ + "/d/other"));
  EXPECT_FALSE(exists(root_ + "/d/.wh..wh..opq"));
  EXPECT_EQ(read(root_ + "/d/new"), "new");
  EXPECT_EQ(read(root_ + "/d/sub/new2"), "new");
  EXPECT_EQ(read(root_ + "/d/after"), "after");
  EXPECT_EQ(read(root_ + "/e/keep"), "untouched");
}

TEST_F(ImageTest, SetuidPolicy) {
  const std::string archive = make({"--hostile", "setuid"});
  auto allowed = import(archive);
  ASSERT_TRUE(allowed) << allowed.error().message;
  EXPECT_EQ(lstat_of(root_ + "/usr/bin/su").st_mode & 07777, 04755u);
  if (::geteuid() == 0) {
    EXPECT_EQ(lstat_of(root_ + "/usr/bin/wall").st_mode & 07777, 02755u);
  }
  ASSERT_TRUE(remove_tree(root_));
  fs::create_directory(root_);

  Limits strip;
  strip.setuid = Setuid::kStrip;
  auto stripped = import(archive, strip);
  ASSERT_TRUE(stripped) << stripped.error().message;
  EXPECT_EQ(lstat_of(root_ + "/usr/bin/su").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(root_ + "/usr/bin/wall").st_mode & 07777, 0755u);
  ASSERT_TRUE(remove_tree(root_));
  fs::create_directory(root_);

  Limits refuse;
  refuse.setuid = Setuid::kRefuse;
  auto refused = import(archive, refuse);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(refused.error().message.find("entry \"usr/bin/su\" is setuid (mode 4755)"), std::string::npos)
      << refused.error().message;
}

TEST_F(ImageTest, SetgidDirectoriesAreKeptEvenWhenRefusingSetuidFiles) {
  auto layer = spec(Json::array({{{"path", "var/mail"}, {"type", "dir"}, {"mode", "02775"}}}));
  Limits refuse;
  refuse.setuid = Setuid::kRefuse;
  auto cfg = import(make({"--layer-spec", layer}), refuse);
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(lstat_of(root_ + "/var/mail").st_mode & 07777, 02775u);
}

TEST_F(ImageTest, AnEmptyLayerApplies) {
  auto cfg = import(make({"--layer-spec", spec(Json::array()), "--format", "oci", "--gzip"}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(cfg->entries, 0u);
  EXPECT_EQ(cfg->layers, 1);
}

TEST_F(ImageTest, TheRootMustBeAnEmptyDirectory) {
  write(root_ + "/already", "x");
  auto cfg = import(make({}));
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInternal);
  EXPECT_NE(cfg.error().message.find("is not empty"), std::string::npos);
}

TEST_F(ImageTest, RemoveTreeNeverFollowsSymlinks) {
  write(root_ + "/a/b/c", "x");
  fs::create_directory_symlink(sentinel_, root_ + "/a/to-sentinel");
  fs::create_symlink(sentinel_ + "/file", root_ + "/a/b/to-file");
  fs::create_directories(root_ + "/locked/inner");
  if (::geteuid() == 0) ::chmod((root_ + "/locked").c_str(), 0);  // root reads it all the same
  ASSERT_TRUE(remove_tree(root_ + "/"));
  EXPECT_FALSE(exists(root_));
  EXPECT_TRUE(remove_tree(root_));  // absent is success
  // A symlink as the path itself is removed, not its target.
  fs::create_directory_symlink(sentinel_, dir_ + "/link");
  ASSERT_TRUE(remove_tree(dir_ + "/link"));
  EXPECT_FALSE(exists(dir_ + "/link"));
  fs::create_directory(root_);
}

}  // namespace
}  // namespace b3os::image
