// Hostile image archives (tests/fixtures/make_image.py --hostile KIND): each is refused with a
// 400 that says what is wrong, or applied harmlessly, and none changes the sentinel directory
// beside the root (ImageTest::TearDown compares it with its state before).

#include <sys/stat.h>

#include "tests/unit/image/image_fixture.h"

namespace b3os::image {
namespace {

struct Hostile {
  const char* kind;
  const char* says;  // a part of the message
};
void PrintTo(const Hostile& h, std::ostream* os) { *os << h.kind; }

// Refused in either format.
const Hostile kRefused[] = {
    {"dotdot", "has a \"..\" component"},
    {"symlink-escape", "entry \"escape/pwned\" goes through the symlink \"escape\""},
    {"symlink-relative", "entry \"escape/pwned\" goes through the symlink \"escape\""},
    {"symlink-same-layer", "entry \"escape/pwned\" goes through the symlink \"escape\""},
    {"hardlink-escape", "is a hard link to \"../"},
    {"hardlink-symlink", "entry \"pwned\" is a hard link to \"escape/file\", which goes through the symlink \"escape\""},
    {"whiteout-symlink", "entry \"escape/.wh.file\" is a whiteout that goes through the symlink \"escape\""},
    {"opaque-symlink", "entry \"escape/.wh..wh..opq\" is a whiteout that goes through the symlink \"escape\""},
    {"whiteout-dotdot", "is a whiteout of \"..\", which names no entry"},
    {"device", "entry \"dev/null\" is a character device (1,3); device nodes are refused"},
    {"device-block", "entry \"dev/sda\" is a block device (8,0)"},
    {"not-image", "the archive is not a tar file"},
    {"plain-tar", "the archive is not an image: it has neither manifest.json"},
    {"multi-image", " lists 2 "},
    {"missing-blob", "which is not in the archive"},
};

class HostileTest : public ImageTest, public ::testing::WithParamInterface<std::tuple<Hostile, const char*>> {};

TEST_P(HostileTest, IsRefusedAndTouchesNothingOutside) {
  const auto& [h, format] = GetParam();
  auto cfg = import(make({"--format", format, "--hostile", h.kind, "--target", sentinel_}));
  ASSERT_FALSE(cfg) << h.kind << " was imported";
  EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest) << cfg.error().message;
  EXPECT_TRUE(cfg.error().message.starts_with("image: ")) << cfg.error().message;
  EXPECT_NE(cfg.error().message.find(h.says), std::string::npos) << cfg.error().message;
  EXPECT_FALSE(fs::exists(sentinel_ + "/pwned"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, HostileTest, ::testing::Combine(::testing::ValuesIn(kRefused), ::testing::Values("docker", "oci")),
                         [](const auto& info) {
                           std::string name = std::string(std::get<0>(info.param).kind) + "_" + std::get<1>(info.param);
                           for (auto& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST_F(ImageTest, AbsolutePathsLandInsideTheRoot) {
  auto cfg = import(make({"--hostile", "absolute", "--target", sentinel_}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  EXPECT_EQ(read(root_ + sentinel_ + "/pwned"), "inside\n");
}

TEST_F(ImageTest, ADirectoryOverASymlinkReplacesTheSymlink) {
  auto cfg = import(make({"--hostile", "dir-over-symlink", "--target", sentinel_}));
  ASSERT_TRUE(cfg) << cfg.error().message;
  struct stat st {};
  ASSERT_EQ(::lstat((root_ + "/escape").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0777u);  // its mode went to the new directory, not the old target
  EXPECT_EQ(read(root_ + "/escape/inside"), "x\n");
}

TEST_F(ImageTest, ADecompressionBombStopsWhileItIsRead) {
  Limits limits;
  limits.max_layer_bytes = 1 << 20;
  auto cfg = import(make({"--format", "oci", "--hostile", "bomb", "--bomb-mb", "64"}), limits);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(cfg.error().message.find("is larger than 1048576 bytes uncompressed (the limit of one layer)"),
            std::string::npos)
      << cfg.error().message;
  // At most the limit and one block of libarchive's reached the disk, not 64 MB.
  struct stat st {};
  if (::stat((root_ + "/zeros").c_str(), &st) == 0) {
    EXPECT_LT(st.st_size, 2 << 20);
  }
}

TEST_F(ImageTest, TheTotalOfAllLayersIsLimited) {
  write(dir_ + "/l1/a", std::string(300000, 'a'));
  write(dir_ + "/l2/b", std::string(300000, 'b'));
  Limits limits;
  limits.max_layer_bytes = 400000;
  limits.max_total_bytes = 500000;
  auto cfg = import(make({"--layer", dir_ + "/l1", "--layer", dir_ + "/l2"}), limits);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("the layers are larger than 500000 bytes uncompressed together"), std::string::npos)
      << cfg.error().message;
  EXPECT_NE(cfg.error().message.find("layer 2 of 2"), std::string::npos);
}

TEST_F(ImageTest, TheNumberOfEntriesIsLimited) {
  Limits limits;
  limits.max_entries = 100;
  auto cfg = import(make({"--hostile", "entries", "--entries", "1000"}), limits);
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("the layers have more than 100 entries together"), std::string::npos)
      << cfg.error().message;
}

TEST_F(ImageTest, MetadataThatIsNotJsonOrTooLargeIsRefused) {
  for (const char* format : {"docker", "oci"}) {
    const std::string file = format == std::string("docker") ? "manifest.json" : "index.json";
    auto cfg = import(make({"--format", format, "--hostile", "bad-json"}));
    ASSERT_FALSE(cfg);
    EXPECT_EQ(cfg.error().message, "image: " + file + " is not JSON");
    cfg = import(make({"--format", format, "--hostile", "big-json"}));
    ASSERT_FALSE(cfg);
    EXPECT_NE(cfg.error().message.find(file + " is 2"), std::string::npos) << cfg.error().message;
    EXPECT_NE(cfg.error().message.find("more than the 1048576 allowed"), std::string::npos);
  }
}

TEST_F(ImageTest, ADigestThatDoesNotMatchIsRefused) {
  auto cfg = import(make({"--format", "oci", "--hostile", "bad-digest"}));
  ASSERT_FALSE(cfg);
  EXPECT_NE(cfg.error().message.find("does not match its digest"), std::string::npos) << cfg.error().message;
  for (const char* format : {"docker", "docker-oci"}) {
    ASSERT_TRUE(remove_tree(root_));
    fs::create_directory(root_);
    cfg = import(make({"--format", format, "--hostile", "bad-digest"}));
    ASSERT_FALSE(cfg) << format;
    EXPECT_NE(cfg.error().message.find("the config's rootfs.diff_ids says sha256:ffff"), std::string::npos)
        << cfg.error().message;
  }
}

TEST_F(ImageTest, TheArchiveMustBeARegularFile) {
  auto cfg = import(sentinel_);
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(cfg.error().message.find("is not a regular file"), std::string::npos) << cfg.error().message;
  cfg = import(dir_ + "/absent.tar");
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace b3os::image
