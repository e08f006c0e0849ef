#include "cli/events.h"

#include <gtest/gtest.h>

#include <vector>

namespace b3os::cli {
namespace {

TEST(SseParser, EventsAcrossChunksAndFields) {
  SseParser p;
  std::vector<std::string> got;
  auto h = [&](const std::string& e, const std::string& d, const std::string& id) { got.push_back(e + "|" + d + "|" + id); };
  p.feed("event: start\ndata: {\"pid\":3}\n\nid: 4\nevent: std", h);
  ASSERT_EQ(got.size(), 1u);
  p.feed("out\ndata: {\"data\":\"a\"}\n", h);
  EXPECT_EQ(got.size(), 1u);  // not ended yet
  p.feed("\ndata: x\ndata: y\n\n", h);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "start|{\"pid\":3}|");
  EXPECT_EQ(got[1], "stdout|{\"data\":\"a\"}|4");
  EXPECT_EQ(got[2], "message|x\ny|");
}

TEST(ChunkBytes, Base64WithAndWithoutPadding) {
  EXPECT_EQ(*chunk_bytes("hi", false), "hi");
  EXPECT_EQ(*chunk_bytes("/w8K", true), std::string("\xff\x0f\n"));
  EXPECT_EQ(*chunk_bytes("YQ==", true), "a");
  EXPECT_EQ(*chunk_bytes("YWI=", true), "ab");
  EXPECT_FALSE(chunk_bytes("abc", true));
}

}  // namespace
}  // namespace b3os::cli
