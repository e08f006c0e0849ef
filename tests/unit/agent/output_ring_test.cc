#include "agent/output_ring.h"

#include <gtest/gtest.h>

#include <string>

namespace b3os::agent {
namespace {

std::string read_all(const OutputRing& r, uint64_t from, std::string* streams = nullptr) {
  std::string out;
  for (;;) {
    auto p = r.read(from, 7);  // small pieces: every boundary is crossed
    if (!p) return out;
    EXPECT_EQ(p->offset, std::max(from, r.start()));
    out.append(p->bytes);
    if (streams) streams->append(p->bytes.size(), p->is_stderr ? 'e' : 'o');
    from = p->offset + p->bytes.size();
  }
}

TEST(OutputRing, KeepsEverythingUnderItsCap) {
  OutputRing r(100);
  r.append(false, "hello ");
  r.append(true, "err ");
  r.append(false, "world");
  EXPECT_EQ(r.start(), 0u);
  EXPECT_EQ(r.end(), 15u);
  std::string streams;
  EXPECT_EQ(read_all(r, 0, &streams), "hello err world");
  EXPECT_EQ(streams, "ooooooeeeeooooo");
  EXPECT_EQ(read_all(r, 8), "r world");
  EXPECT_FALSE(r.read(15, 10));
}

TEST(OutputRing, DropsTheOldestAndCountsEveryByte) {
  OutputRing r(10);
  for (int i = 0; i < 10; ++i) r.append(i % 2 == 1, std::string(3, static_cast<char>('a' + i)));
  EXPECT_EQ(r.end(), 30u);
  EXPECT_EQ(r.start(), 20u);
  EXPECT_EQ(read_all(r, 0), "ghhhiiijjj");  // from below start: clamped to what is held
  EXPECT_EQ(read_all(r, 25), "iijjj");
}

TEST(OutputRing, OneWriteLargerThanTheRing) {
  OutputRing r(4);
  r.append(false, "ab");
  r.append(true, "0123456789");
  EXPECT_EQ(r.start(), 8u);
  EXPECT_EQ(r.end(), 12u);
  std::string streams;
  EXPECT_EQ(read_all(r, 0, &streams), "6789");
  EXPECT_EQ(streams, "eeee");
}

TEST(OutputRing, JoinsSmallWritesOfOneStreamOnly) {
  OutputRing r(1 << 20);
  for (int i = 0; i < 1000; ++i) r.append(false, "x");
  r.append(true, "y");
  auto p = r.read(0, 1 << 20);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->bytes.size(), 1000u);  // one piece, not a thousand
  auto q = r.read(1000, 10);
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->is_stderr);
  EXPECT_EQ(q->bytes, "y");
}

}  // namespace
}  // namespace b3os::agent
