// A launch's identity and its request for idle reports go out back to back (one round trip,
// the agent taking frames in turn): an agent that answers only once it has both still gets
// through, and each answer lands where it belongs.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"
#include "protocol/frame.h"
#include "tests/unit/agentlink/fake_agent.h"

namespace b3os::agentlink {
namespace {

using namespace std::chrono_literals;
using protocol::FrameType;

// The agent's side: reads until it holds an IDENTITY and an OPEN, then answers both, in order:
// IDENTITY_ACK `ack`, then END `end` on the OPEN's stream. Returns whether it saw both.
bool agent_answers_both(int fd, const std::string& ack, const std::string& end, std::chrono::milliseconds limit) {
  protocol::FrameParser parser(FrameType::kResync);
  bool identity = false;
  uint32_t open_stream = 0;
  const bool both = fake_agent::read_frames(fd, parser, limit, [&](const protocol::Frame& f) {
    if (f.type == FrameType::kIdentity) identity = true;
    if (f.type == FrameType::kOpen && nlohmann::json::parse(f.payload).value("op", "") == "idle_reports")
      open_stream = f.stream;
    return identity && open_stream != 0;
  });
  if (!both) return false;
  const std::string out = protocol::encode_frame(FrameType::kIdentityAck, 0, ack) +
                          protocol::encode_frame(FrameType::kEnd, open_stream, end);
  return ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size());
}

struct Pair {
  UniqueFd agent;
  std::shared_ptr<AgentChannel> ch;
};

Pair channel_pair() {
  int sp[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  Pair p{UniqueFd(sp[1]), nullptr};
  p.ch = AgentChannel::start(UniqueFd(sp[0]), "test", [](const std::string&) {});
  return p;
}

TEST(IdentityTest, TheIdleRequestGoesOutBeforeTheIdentityIsAnswered) {
  auto p = channel_pair();
  bool both = false;
  std::thread t([&] { both = agent_answers_both(p.agent.get(), R"({"ok":true})", R"({"ok":true})", 3s); });
  Result<bool> idle = false;
  auto r = p.ch->send_identity({{"sandbox_id", "sbx_x"}}, 2s, &idle);
  t.join();
  EXPECT_TRUE(both) << "the agent never held both frames: the request waited for the identity's answer";
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(idle) << idle.error().message;
  EXPECT_TRUE(*idle);
  p.ch->shutdown();
}

TEST(IdentityTest, AnOlderAgentsRefusalOfTheRequestIsNotTheIdentitys) {
  auto p = channel_pair();
  std::thread t([&] { agent_answers_both(p.agent.get(), R"({"ok":true})", R"({"ok":false,"error":"unknown op"})", 3s); });
  Result<bool> idle = true;
  auto r = p.ch->send_identity({{"sandbox_id", "sbx_x"}}, 2s, &idle);
  t.join();
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_TRUE(idle) << idle.error().message;
  EXPECT_FALSE(*idle) << "an agent that does not know idle reports is never reported idle";
  p.ch->shutdown();
}

TEST(IdentityTest, ARefusedIdentityFailsWhateverTheRequestGot) {
  auto p = channel_pair();
  std::thread t([&] { agent_answers_both(p.agent.get(), R"({"ok":false})", R"({"ok":true})", 3s); });
  Result<bool> idle = false;
  auto r = p.ch->send_identity({{"sandbox_id", "sbx_x"}}, 2s, &idle);
  t.join();
  EXPECT_FALSE(r);
  p.ch->shutdown();
}

}  // namespace
}  // namespace b3os::agentlink
