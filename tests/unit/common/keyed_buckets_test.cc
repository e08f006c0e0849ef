#include "common/keyed_buckets.h"

#include <gtest/gtest.h>

#include <string>

namespace b3os {
namespace {

using Take = KeyedBuckets::Take;

TEST(KeyedBuckets, EachKeyHasItsOwnBucketThatRefillsWithTime) {
  KeyedBuckets b(3, 16);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.take("a", 0), Take::kTaken);
  EXPECT_EQ(b.take("a", 0), Take::kEmpty);
  EXPECT_EQ(b.take("b", 0), Take::kTaken);  // another client is not held by the first
  EXPECT_EQ(b.take("a", 200), Take::kEmpty);  // 0.6 of a token back
  EXPECT_EQ(b.take("a", 400), Take::kTaken);  // 1.2
}

TEST(KeyedBuckets, AGivenBackTokenCanBeTakenAgainButNeverPastFull) {
  KeyedBuckets b(1, 16);
  EXPECT_EQ(b.take("a", 0), Take::kTaken);
  b.give_back("a");
  b.give_back("a");
  EXPECT_EQ(b.take("a", 0), Take::kTaken);
  EXPECT_EQ(b.take("a", 0), Take::kEmpty);
}

TEST(KeyedBuckets, WhenFullOnlyRefilledBucketsMakeRoom) {
  KeyedBuckets b(2, 2);
  EXPECT_EQ(b.take("a", 0), Take::kTaken);
  EXPECT_EQ(b.take("b", 0), Take::kTaken);
  EXPECT_EQ(b.take("c", 0), Take::kNoRoom);  // a and b are both still drawing
  EXPECT_EQ(b.size(), 2u);
  EXPECT_EQ(b.take("c", 1000), Take::kTaken);  // both refilled: dropped, c fits
  EXPECT_EQ(b.size(), 1u);
}

}  // namespace
}  // namespace b3os
