#include "daemon/api/rate_limit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

namespace b3os::api {
namespace {

using Slot = InFlightLimiter::Slot;

/// Takes `n` places for `key` in `project`, expecting each to be granted.
std::vector<Slot> take(InFlightLimiter& l, const std::string& key, const std::string& project, int n) {
  std::vector<Slot> out;
  for (int i = 0; i < n; ++i) {
    auto s = l.enter(key, project);
    EXPECT_TRUE(s.has_value()) << key << " #" << i;
    if (s) out.push_back(std::move(*s));
  }
  return out;
}

TEST(InFlightLimiter, RefusesAKeyPastItsCapWithConcurrencyLimited) {
  InFlightLimiter l(3, 100);
  auto held = take(l, "key_a", "p", 3);
  auto refused = l.enter("key_a", "p");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConcurrencyLimited);
  EXPECT_NE(refused.error().message.find("API key"), std::string::npos) << refused.error().message;
}

TEST(InFlightLimiter, OneKeyAtItsCapLeavesOtherKeysAndProjectsAlone) {
  InFlightLimiter l(2, 100);
  auto a = take(l, "key_a", "p", 2);
  EXPECT_FALSE(l.enter("key_a", "p"));
  auto b = take(l, "key_b", "p", 2);
  auto c = take(l, "key_c", "q", 2);
}

TEST(InFlightLimiter, TheProjectCapCountsEveryKeyOfTheProject) {
  InFlightLimiter l(10, 4);
  auto a = take(l, "key_a", "p", 3);
  auto b = take(l, "key_b", "p", 1);
  auto refused = l.enter("key_c", "p");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kConcurrencyLimited);
  EXPECT_NE(refused.error().message.find("project"), std::string::npos) << refused.error().message;
  auto other = take(l, "key_d", "q", 1);  // another project is not affected
}

TEST(InFlightLimiter, ARefusalTakesNoPlace) {
  InFlightLimiter l(1, 1);
  {
    auto held = take(l, "key_a", "p", 1);
    for (int i = 0; i < 5; ++i) EXPECT_FALSE(l.enter("key_b", "p"));  // project full
  }
  auto again = take(l, "key_b", "p", 1);
}

TEST(InFlightLimiter, DestroyingASlotGivesItsPlaceBack) {
  InFlightLimiter l(2, 2);
  {
    auto held = take(l, "key_a", "p", 2);
    EXPECT_FALSE(l.enter("key_a", "p"));
  }
  auto again = take(l, "key_a", "p", 2);
  EXPECT_FALSE(l.enter("key_a", "p"));
}

TEST(InFlightLimiter, AMovedSlotIsGivenBackOnceByItsLastOwner) {
  InFlightLimiter l(1, 1);
  std::optional<Slot> outer;
  {
    auto s = l.enter("key_a", "p");
    ASSERT_TRUE(s);
    outer.emplace(std::move(*s));
  }  // the moved-from slot ends here and must not give the place back
  EXPECT_FALSE(l.enter("key_a", "p"));
  outer.reset();
  auto again = take(l, "key_a", "p", 1);
}

TEST(InFlightLimiter, ManyThreadsNeverPassTheCap) {
  InFlightLimiter l(8, 100);
  std::atomic<int> inside{0}, most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto s = l.enter("key_a", "p");
        if (!s) continue;
        const int now = ++inside;
        int m = most.load();
        while (now > m && !most.compare_exchange_weak(m, now)) {
        }
        --inside;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 8);
  EXPECT_GE(most.load(), 1);
  auto all = take(l, "key_a", "p", 8);  // every place came back
}

}  // namespace
}  // namespace b3os::api
