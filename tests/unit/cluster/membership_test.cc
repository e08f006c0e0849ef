// HeartbeatStreak: a node judges others silent only after its own heartbeats have reached the
// store for the whole silence limit (an outage of the store makes every node silent at once).

#include <gtest/gtest.h>

#include "daemon/cluster/membership.h"

using b3os::cluster::HeartbeatStreak;

TEST(HeartbeatStreak, JudgesOnlyAfterTenSecondsOfBeats) {
  HeartbeatStreak s(2000, 10000);
  EXPECT_FALSE(s.may_judge(0));
  for (int64_t t = 0; t < 10000; t += 2000) {
    s.beat(t);
    EXPECT_FALSE(s.may_judge(t)) << t;
  }
  s.beat(10000);
  EXPECT_TRUE(s.may_judge(10000));
}

TEST(HeartbeatStreak, AMissedBeatOrALongGapStartsAgain) {
  HeartbeatStreak s(2000, 10000);
  for (int64_t t = 0; t <= 10000; t += 2000) s.beat(t);
  EXPECT_TRUE(s.may_judge(10000));
  s.missed();  // one beat lost (a connection broken by a quick restart of the store): no gap
  s.beat(14000);
  EXPECT_TRUE(s.may_judge(14000));
  s.missed();  // the store went away for longer
  EXPECT_FALSE(s.may_judge(16000));
  s.beat(26000);  // back 14 s later: the others had no chance to beat yet
  EXPECT_FALSE(s.may_judge(26000));
  for (int64_t t = 28000; t < 36000; t += 2000) {
    s.beat(t);
    EXPECT_FALSE(s.may_judge(t));
  }
  s.beat(36000);
  EXPECT_TRUE(s.may_judge(36000));
  // A beat that took long (a store slow to answer) but got through: the gap breaks it too.
  s.beat(41500);
  EXPECT_FALSE(s.may_judge(41500));
}
