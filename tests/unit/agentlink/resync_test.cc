// A b3osd killed mid-frame leaves the agent waiting for the rest of that frame's payload (up to
// 1 MiB); the next b3osd's resync after a restart must still reach it.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"
#include "protocol/frame.h"
#include "tests/unit/agentlink/fake_agent.h"

namespace b3os::agentlink {
namespace {

using namespace std::chrono_literals;
using protocol::FrameType;

// The agent's side: a parser that already holds the start of a cut frame; answers the first
// RESYNC it finds, within `limit`. Returns whether it did.
bool agent_answers(int fd, std::string cut, std::chrono::milliseconds limit) {
  protocol::FrameParser parser(FrameType::kResync);
  parser.feed(cut);
  std::string payload;
  const bool got = fake_agent::read_frames(fd, parser, limit, [&](const protocol::Frame& f) {
    if (f.type != FrameType::kResync) return false;
    payload = f.payload;
    return true;
  });
  if (!got) return false;
  const std::string ack = protocol::encode_frame(FrameType::kResyncAck, 0, payload);
  return ::write(fd, ack.data(), ack.size()) == static_cast<ssize_t>(ack.size());
}

class ResyncTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ResyncTest, AFrameCutByADeadDaemonDoesNotSwallowTheResync) {
  int sp[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  UniqueFd agent(sp[1]);
  // The dead daemon's last bytes: a 1 MiB DATA frame cut after GetParam() bytes.
  const std::string whole = protocol::encode_frame(FrameType::kData, 1, std::string(protocol::kMaxPayload, 'x'));
  const std::string cut = whole.substr(0, GetParam());
  bool answered = false;
  std::thread t([&] { answered = agent_answers(agent.get(), cut, 5s); });
  auto ch = AgentChannel::start(UniqueFd(sp[0]), "test", [](const std::string&) {});
  auto r = ch->resync(3s, /*cut_frame=*/true);
  t.join();
  EXPECT_TRUE(answered);
  EXPECT_TRUE(r) << r.error().message;
  ch->shutdown();
}

INSTANTIATE_TEST_SUITE_P(CutAt, ResyncTest,
                         ::testing::Values(size_t{0}, size_t{5}, protocol::kHeaderSize, protocol::kHeaderSize + 100,
                                           protocol::kHeaderSize + protocol::kMaxPayload - 1));

TEST(ResyncTest, WithoutTheFillerACutFrameSwallowsIt) {
  // What the filler is for: the plain resync (a restored checkpoint, never cut) does not reach
  // an agent in the middle of a large frame.
  int sp[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  UniqueFd agent(sp[1]);
  const std::string whole = protocol::encode_frame(FrameType::kData, 1, std::string(protocol::kMaxPayload, 'x'));
  bool answered = true;
  std::thread t([&] { answered = agent_answers(agent.get(), whole.substr(0, protocol::kHeaderSize + 100), 1500ms); });
  auto ch = AgentChannel::start(UniqueFd(sp[0]), "test", [](const std::string&) {});
  auto r = ch->resync(1s);
  t.join();
  EXPECT_FALSE(answered);
  EXPECT_FALSE(r);
  ch->shutdown();
}

}  // namespace
}  // namespace b3os::agentlink
