#include "common/fair_share.h"

#include <gtest/gtest.h>

namespace b3os {
namespace {

using Share = FairShare<int>;

TEST(FairShare, TenantCapAndNodeCap) {
  Share s({.node = 10, .per_tenant = 4, .floor = 1, .reserve = 1});
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.try_take(1));
  EXPECT_FALSE(s.try_take(1)) << "a tenant at its cap";
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.try_take(2));
  EXPECT_TRUE(s.try_take(3));  // extra units: 3 + 3 = 6 of the 9 allowed
  EXPECT_TRUE(s.try_take(3));
  EXPECT_EQ(s.total(), 10u);
  EXPECT_FALSE(s.try_take(4)) << "the node is full";
  s.give(1);
  EXPECT_TRUE(s.try_take(4));
}

TEST(FairShare, HostileTenantsNeverTakeTheFloorsOfOthers) {
  // The proxy's shape, scaled down: 40 hostile tenants each take all they can, and every
  // quiet tenant that comes after them still gets its floor.
  Share s({.node = 512, .per_tenant = 64, .floor = 4, .reserve = 256});
  for (int t = 0; t < 40; ++t)
    while (s.try_take(t)) {
    }
  EXPECT_LE(s.extra(), 256u);
  EXPECT_LT(s.total(), 512u);
  // 256 / 4 = 64 tenants can hold their floors: 40 hostile ones hold theirs, 24 quiet ones more.
  for (int q = 100; q < 124; ++q)
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(s.try_take(q)) << "quiet tenant " << q << " unit " << i;
  EXPECT_FALSE(s.try_take(100)) << "a quiet tenant above its floor while extras are taken";
  EXPECT_EQ(s.total(), 512u);
}

TEST(FairShare, GivingBackExtrasReopensThem) {
  Share s({.node = 8, .per_tenant = 8, .floor = 2, .reserve = 4});
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(s.try_take(1));
  EXPECT_EQ(s.extra(), 4u);
  EXPECT_FALSE(s.try_take(1));
  EXPECT_TRUE(s.try_take(2));
  EXPECT_TRUE(s.try_take(2));
  EXPECT_FALSE(s.try_take(2));
  s.give(1);  // an extra unit back
  EXPECT_EQ(s.extra(), 3u);
  EXPECT_TRUE(s.try_take(2)) << "tenant 2 above its floor takes the freed extra";
  EXPECT_EQ(s.extra(), 4u);
  for (int i = 0; i < 5; ++i) s.give(1);
  EXPECT_EQ(s.of(1), 0u);
  EXPECT_EQ(s.tenants(), 1u);
  EXPECT_EQ(s.extra(), 1u);
  s.give(1);  // holds nothing: ignored
  EXPECT_EQ(s.total(), 3u);
}

TEST(FairShare, LimitsAreMadeConsistent) {
  Share s({.node = 4, .per_tenant = 2, .floor = 5, .reserve = 9});
  EXPECT_EQ(s.limits().floor, 2u);
  EXPECT_EQ(s.limits().reserve, 4u);
  EXPECT_TRUE(s.try_take(1));
  EXPECT_TRUE(s.try_take(1));
  EXPECT_FALSE(s.try_take(1));
}

}  // namespace
}  // namespace b3os

namespace b3os {
namespace {

TEST(FairShare, ForNodeKeepsHalfForFloorsAndSixtyFourOfThem) {
  auto l = FairShare<int>::for_node(8192, 256, 16);  // the proxy's defaults
  EXPECT_EQ(l.node, 8192u);
  EXPECT_EQ(l.reserve, 4096u);
  EXPECT_EQ(l.floor, 16u);
  EXPECT_EQ(l.per_tenant, 256u);
  l = FairShare<int>::for_node(512, 64, 8);  // a small node: the floor shrinks so 64 fit
  EXPECT_EQ(l.reserve, 256u);
  EXPECT_EQ(l.floor, 4u);
  l = FairShare<int>::for_node(64, 256, 16);
  EXPECT_EQ(l.per_tenant, 64u);
  EXPECT_EQ(l.floor, 1u);
}

}  // namespace
}  // namespace b3os
