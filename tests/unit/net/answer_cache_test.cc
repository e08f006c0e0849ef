#include "daemon/net/answer_cache.h"

#include <gtest/gtest.h>

namespace b3os::net {
namespace {

using namespace std::chrono_literals;
using Clock = AnswerCache::Clock;

TEST(AnswerCache, KeepsAnswersUntilTheyExpire) {
  AnswerCache c(4);
  const auto t0 = Clock::now();
  c.put("a.example", {1, 2}, t0 + 60s);
  auto hit = c.get("a.example", t0 + 10s);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->addrs, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(hit->left, 50s);
  EXPECT_FALSE(c.get("a.example", t0 + 60s)) << "expired";
  EXPECT_FALSE(c.get("b.example", t0));
  c.put("a.example", {3}, t0 + 120s);  // a newer answer replaces the old one
  EXPECT_EQ(c.get("a.example", t0 + 61s)->addrs, (std::vector<uint32_t>{3}));
  EXPECT_EQ(c.size(), 1u);
}

TEST(AnswerCache, AFullCacheLosesOnlyWhatExpiresFirst) {
  AnswerCache c(3);
  const auto t0 = Clock::now();
  c.put("long.example", {1}, t0 + 300s);
  c.put("short.example", {2}, t0 + 5s);
  c.put("mid.example", {3}, t0 + 60s);
  // A flood of new names: each takes the place of the entry that expires first, and the
  // long-lived answer another sandbox relies on stays.
  for (int i = 0; i < 100; ++i) c.put("flood" + std::to_string(i) + ".example", {9}, t0 + 30s);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_TRUE(c.get("long.example", t0 + 1s));
  EXPECT_TRUE(c.get("mid.example", t0 + 1s));
  EXPECT_FALSE(c.get("short.example", t0 + 1s));
  EXPECT_TRUE(c.get("flood99.example", t0 + 1s));
  EXPECT_FALSE(c.get("flood0.example", t0 + 1s));
}

TEST(AnswerCache, ZeroCapacityKeepsNothing) {
  AnswerCache c(0);
  c.put("a.example", {1}, Clock::now() + 60s);
  EXPECT_EQ(c.size(), 0u);
}

}  // namespace
}  // namespace b3os::net
