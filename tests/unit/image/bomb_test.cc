// A compressed archive is decompressed to its end when it is inspected (docker save puts the
// manifest last): the bytes it may decompress to are bounded before each member is passed over,
// by what the layers may hold, so a small file of compressed zeros is refused quickly instead
// of holding a request's thread and a core for hours (issue 41, point 5).
#include "tests/unit/image/image_fixture.h"

namespace b3os::image {
namespace {

class ArchiveBombTest : public ImageTest {};

TEST_F(ArchiveBombTest, ACompressedArchivePastTheLayersBoundIsRefusedAtInspection) {
  const std::string big(3 << 20, '\0');  // 3 MiB of zeros: a few kB once gzipped
  const auto layer = spec(nlohmann::json::array({{{"path", "zeros"}, {"data", big}}}));
  const std::string gz = make({"--layer-spec", layer, "--gzip-archive"});
  Limits small;
  small.max_total_bytes = 1 << 20;
  small.max_layer_bytes = 1 << 20;
  small.max_metadata_bytes = 16 << 10;
  auto seen = inspect(gz, small);
  ASSERT_FALSE(seen);
  EXPECT_EQ(seen.error().code, ErrorCode::kInvalidRequest);
  EXPECT_NE(seen.error().message.find("decompresses to more than"), std::string::npos) << seen.error().message;
  // The same archive within the bound, and the bound's own archive uncompressed, are read.
  EXPECT_TRUE(inspect(gz, Limits{})) << "a 3 MiB layer is well within the defaults";
  const std::string plain = make({"--layer-spec", layer});
  auto p = inspect(plain, small);
  EXPECT_TRUE(p || p.error().message.find("decompresses") == std::string::npos);
}

// A request leaves a compressed archive's inspection to the build (its metadata lies behind
// all of its bytes); it tells one from the first header alone.
TEST_F(ArchiveBombTest, IsCompressedTellsAnArchiveCompressedWholeFromItsFirstHeader) {
  const auto layer = spec(nlohmann::json::array({{{"path", "hello"}, {"data", "hi"}}}));
  EXPECT_TRUE(is_compressed(make({"--layer-spec", layer, "--gzip-archive"})));
  EXPECT_FALSE(is_compressed(make({"--layer-spec", layer})));
  EXPECT_FALSE(is_compressed(dir_ + "/no-such-file"));
  EXPECT_FALSE(is_compressed("/dev/null"));
}

}  // namespace
}  // namespace b3os::image
