// The agent is untrusted input: root inside a sandbox may replace it and write any frames.
// b3osd's side of the channel then closes the channel (the sandbox's own loss) rather than
// queue without bound or recurse on deep JSON (every tenant's loss): data past the credit it
// granted, control frames it does not read, JSON nested past 64 levels. An honest agent's
// many tiny frames are held as few queue entries and read back as the same bytes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
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

struct HostileClosed {
  std::mutex mu;
  std::condition_variable cv;
  std::string reason;
  bool wait(std::chrono::milliseconds limit) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, limit, [&] { return !reason.empty(); });
  }
};

struct HostilePair {
  UniqueFd agent;
  std::shared_ptr<AgentChannel> ch;
  std::shared_ptr<HostileClosed> closed = std::make_shared<HostileClosed>();
};

HostilePair hostile_pair() {
  int sp[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  HostilePair p{UniqueFd(sp[1]), nullptr};
  auto closed = p.closed;
  p.ch = AgentChannel::start(UniqueFd(sp[0]), "hostile", [closed](const std::string& why) {
    std::lock_guard lk(closed->mu);
    closed->reason = why.empty() ? "closed" : why;
    closed->cv.notify_all();
  });
  return p;
}

void hostile_send(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (w <= 0) return;  // the channel closed its end: the rest is not read
    off += static_cast<size_t>(w);
  }
}

// Opens a stream from the daemon's side and returns it with the id the agent sees.
std::shared_ptr<Stream> hostile_open(HostilePair& p, uint32_t* id) {
  auto s = p.ch->open({{"op", "exec"}});
  EXPECT_TRUE(s);
  protocol::FrameParser parser(FrameType::kResync);
  *id = 0;
  fake_agent::read_frames(p.agent.get(), parser, 2s, [&](const protocol::Frame& f) {
    if (f.type == FrameType::kOpen) *id = f.stream;
    return *id != 0;
  });
  EXPECT_NE(*id, 0u);
  return s ? *s : nullptr;
}

std::string hostile_deep(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(HostileAgentTest, JsonNestedPast64LevelsClosesTheChannel) {
  auto p = hostile_pair();
  uint32_t id = 0;
  auto s = hostile_open(p, &id);
  // 500,000 levels: parsed, copied or freed, this would overflow b3osd's stack.
  hostile_send(p.agent.get(), protocol::encode_frame(FrameType::kEnd, id, hostile_deep(500000)));
  ASSERT_TRUE(p.closed->wait(5s));
  EXPECT_NE(p.closed->reason.find("deeper than 64"), std::string::npos) << p.closed->reason;
  auto f = s->next(std::chrono::steady_clock::now() + 1s);
  EXPECT_FALSE(f);  // the stream hears the channel's end, not the frame
}

TEST(HostileAgentTest, ADeepHelloOnStreamZeroClosesTheChannelToo) {
  auto p = hostile_pair();
  hostile_send(p.agent.get(), protocol::encode_frame(FrameType::kHello, 0, "{\"a\":" + hostile_deep(100) + "}"));
  ASSERT_TRUE(p.closed->wait(5s));
  EXPECT_NE(p.closed->reason.find("deeper than 64"), std::string::npos) << p.closed->reason;
}

TEST(HostileAgentTest, DataPastTheGrantedCreditClosesTheChannel) {
  auto p = hostile_pair();
  uint32_t id = 0;
  auto s = hostile_open(p, &id);
  const std::string chunk(protocol::kMaxData, 'x');
  std::string out;
  for (uint32_t sent = 0; sent <= protocol::kInitialWindow; sent += protocol::kMaxData)
    out += protocol::encode_frame(FrameType::kStdout, id, chunk);
  hostile_send(p.agent.get(), out);
  ASSERT_TRUE(p.closed->wait(5s));
  EXPECT_NE(p.closed->reason.find("credit"), std::string::npos) << p.closed->reason;
}

TEST(HostileAgentTest, DataWithinCreditGrantedAgainIsKeptAndReadInOrder) {
  auto p = hostile_pair();
  uint32_t id = 0;
  auto s = hostile_open(p, &id);
  // Frames of one byte, then 4 MB in frames of 1,000 (the daemon granting back as it reads): an honest agent's output, which must not close anything.
  std::string want;
  std::string out;
  for (int i = 0; i < 20000; ++i) {
    const char c = static_cast<char>('a' + i % 26);
    out += protocol::encode_frame(FrameType::kStdout, id, std::string(1, c));
    want += c;
  }
  // Within the 4 MiB window in all: this fake agent does not wait for WINDOW frames, so past
  // the window it would race the daemon's grants (it did once, on a busy machine).
  for (int i = 0; i < 4000; ++i) {
    const std::string piece(1000, static_cast<char>('A' + i % 26));
    out += protocol::encode_frame(FrameType::kStdout, id, piece);
    want += piece;
  }
  std::thread writer([&] { hostile_send(p.agent.get(), out); });
  std::string got;
  while (got.size() < want.size()) {
    auto f = s->next(std::chrono::steady_clock::now() + 5s);
    ASSERT_TRUE(f) << f.error().message;
    ASSERT_EQ(f->type, FrameType::kStdout);
    got += f->payload;
    s->grant(static_cast<uint32_t>(f->payload.size()));
  }
  writer.join();
  EXPECT_EQ(got, want);
  EXPECT_FALSE(p.closed->wait(100ms)) << p.closed->reason;
}

TEST(HostileAgentTest, InterleavedTinyStdoutAndStderrAreKeptNotRefused) {
  // An honest process writing `echo out; echo err >&2` in a loop, read slowly: the agent sends
  // a frame per write, stdout and stderr alternating, all within credit. 200,000 of them (more
  // than any cap on queue entries) must come through, each stream's bytes whole and in order.
  auto p = hostile_pair();
  uint32_t id = 0;
  auto s = hostile_open(p, &id);
  std::string out, want_out, want_err;
  for (int i = 0; i < 100000; ++i) {
    const std::string o(1, static_cast<char>('a' + i % 26)), e(1, static_cast<char>('A' + i % 26));
    out += protocol::encode_frame(FrameType::kStdout, id, o);
    out += protocol::encode_frame(FrameType::kStderr, id, e);
    want_out += o;
    want_err += e;
  }
  hostile_send(p.agent.get(), out);  // 2.6 MB of frames: the reader holds them all unread
  std::string got_out, got_err;
  while (got_out.size() + got_err.size() < want_out.size() + want_err.size()) {
    auto f = s->next(std::chrono::steady_clock::now() + 5s);
    ASSERT_TRUE(f) << f.error().message;
    (f->type == FrameType::kStdout ? got_out : got_err) += f->payload;
  }
  EXPECT_EQ(got_out, want_out);
  EXPECT_EQ(got_err, want_err);
  EXPECT_FALSE(p.closed->wait(100ms)) << p.closed->reason;
}

TEST(HostileAgentTest, AFloodOfControlFramesClosesTheChannel) {
  auto p = hostile_pair();
  std::string out;
  for (int i = 0; i < 200; ++i) out += protocol::encode_frame(FrameType::kIdentityAck, 0, "{\"ok\":true}");
  hostile_send(p.agent.get(), out);
  ASSERT_TRUE(p.closed->wait(5s));
  EXPECT_NE(p.closed->reason.find("control frames"), std::string::npos) << p.closed->reason;
}

TEST(HostileAgentTest, AFloodOfHeadersOnAStreamClosesTheChannel) {
  auto p = hostile_pair();
  uint32_t id = 0;
  auto s = hostile_open(p, &id);
  std::string out;
  for (int i = 0; i < 2000; ++i) out += protocol::encode_frame(FrameType::kHeader, id, "{}");
  hostile_send(p.agent.get(), out);
  ASSERT_TRUE(p.closed->wait(5s));
  EXPECT_NE(p.closed->reason.find("control frames on a stream"), std::string::npos) << p.closed->reason;
}

TEST(HostileAgentTest, FramesForStreamsNeverOpenedAreDropped) {
  auto p = hostile_pair();
  std::string out;
  for (uint32_t id = 1; id < 5000; ++id) out += protocol::encode_frame(FrameType::kEnd, id, "{\"ok\":true}");
  hostile_send(p.agent.get(), out);
  EXPECT_FALSE(p.closed->wait(300ms)) << p.closed->reason;
  auto ping = p.ch->ping(200ms);  // nobody answers it here; the channel is still up to try
  EXPECT_FALSE(ping);
  EXPECT_TRUE(p.closed->reason.empty());
}

}  // namespace
}  // namespace b3os::agentlink
