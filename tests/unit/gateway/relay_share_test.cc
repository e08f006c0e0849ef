// The model relay's calls in flight are shared out between sandboxes: one sandbox (or many
// hostile ones) holding every call it may cannot leave a quiet sandbox without its floor.
// Before, 512 calls were node-wide with no share: one sandbox could take them all.
#include "daemon/gateway/relay.h"

#include <gtest/gtest.h>

#include <string>

namespace b3os::gateway {
namespace {

TEST(RelayShare, OneSandboxStopsAtItsMaximum) {
  Relay relay(nullptr, [](const std::string&) { return std::nullopt; });
  for (int i = 0; i < Relay::kMaxCallsPerSandbox; ++i) ASSERT_FALSE(relay.take("sbx_a")) << i;
  auto why = relay.take("sbx_a");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("its maximum"), std::string::npos) << *why;
  EXPECT_EQ(relay.calls_of("sbx_a"), static_cast<size_t>(Relay::kMaxCallsPerSandbox));
  relay.give("sbx_a");
  EXPECT_FALSE(relay.take("sbx_a"));  // one given back, one taken again
}

TEST(RelayShare, HostileSandboxesLeaveQuietOnesTheirFloor) {
  Relay relay(nullptr, [](const std::string&) { return std::nullopt; });
  // Forty sandboxes take all they can: 64 each at most, and their calls beyond the floor
  // together only up to half the node.
  size_t hostile = 0;
  for (int s = 0; s < 40; ++s)
    for (int i = 0; i < Relay::kMaxCallsPerSandbox; ++i)
      if (!relay.take("sbx_hostile_" + std::to_string(s))) ++hostile;
  EXPECT_LT(hostile, static_cast<size_t>(Relay::kMaxCalls));
  // A quiet sandbox still has its floor.
  for (int i = 0; i < Relay::kFloorPerSandbox; ++i) EXPECT_FALSE(relay.take("sbx_quiet")) << i;
  auto why = relay.take("sbx_quiet");
  ASSERT_TRUE(why);  // and no more, while the others hold theirs
  EXPECT_NE(why->find("on this node"), std::string::npos) << *why;
}

}  // namespace
}  // namespace b3os::gateway
