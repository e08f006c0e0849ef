// Tests of the agent channel wire format (protocol/frame.h): encoding, incremental parsing,
// and resynchronisation after garbage.

#include "protocol/frame.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace b3os::protocol {
namespace {

const FrameType kAllTypes[] = {
    FrameType::kHello,  FrameType::kResync,   FrameType::kResyncAck,   FrameType::kPing,
    FrameType::kPong,   FrameType::kIdentity, FrameType::kIdentityAck, FrameType::kIdle, FrameType::kOpen,
    FrameType::kData,   FrameType::kStdout,   FrameType::kStderr,      FrameType::kEof,
    FrameType::kWindow, FrameType::kHeader,   FrameType::kEnd,         FrameType::kCancel,
};

std::vector<Frame> drain(FrameParser& p) {
  std::vector<Frame> out;
  while (auto f = p.next()) out.push_back(std::move(*f));
  return out;
}

std::string header(uint8_t m0, uint8_t m1, uint8_t version, uint8_t type, uint32_t stream,
                   uint32_t len) {
  std::string h;
  h += static_cast<char>(m0);
  h += static_cast<char>(m1);
  h += static_cast<char>(version);
  h += static_cast<char>(type);
  h += encode_u32(stream);
  h += encode_u32(len);
  return h;
}

TEST(FrameTest, HeaderLayout) {
  const std::string f = encode_frame(FrameType::kOpen, 0x01020304, "xyz");
  ASSERT_EQ(f.size(), kHeaderSize + 3);
  EXPECT_EQ(static_cast<uint8_t>(f[0]), 0xB3);
  EXPECT_EQ(static_cast<uint8_t>(f[1]), 0x05);
  EXPECT_EQ(static_cast<uint8_t>(f[2]), 1);
  EXPECT_EQ(static_cast<uint8_t>(f[3]), 0x10);
  EXPECT_EQ(f.substr(4, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(f.substr(8, 4), std::string("\x03\x00\x00\x00", 4));
  EXPECT_EQ(f.substr(12), "xyz");
}

TEST(FrameTest, RoundTripEveryType) {
  FrameParser p(FrameType::kResync);
  uint32_t stream = 0;
  for (FrameType t : kAllTypes) {
    const std::string payload = "payload-" + std::to_string(static_cast<int>(t));
    p.feed(encode_frame(t, stream, payload));
    auto f = p.next();
    ASSERT_TRUE(f.has_value()) << static_cast<int>(t);
    EXPECT_EQ(f->type, t);
    EXPECT_EQ(f->stream, stream);
    EXPECT_EQ(f->payload, payload);
    EXPECT_FALSE(p.next().has_value());
    EXPECT_TRUE(known_type(static_cast<uint8_t>(t)));
    stream = stream * 7 + 1;
  }
  EXPECT_FALSE(p.desynced());
  EXPECT_EQ(p.discarded(), 0u);
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(FrameTest, UnknownTypesAreNotKnown) {
  EXPECT_FALSE(known_type(0x00));
  EXPECT_FALSE(known_type(0x09));
  EXPECT_FALSE(known_type(0x0f));
  EXPECT_FALSE(known_type(0x19));
  EXPECT_FALSE(known_type(0xff));
}

TEST(FrameTest, EmptyAndMaxPayload) {
  FrameParser p(FrameType::kResync);
  const std::string big(kMaxPayload, 'x');
  p.feed(encode_frame(FrameType::kEof, 5, ""));
  p.feed(encode_frame(FrameType::kData, 6, big));
  auto frames = drain(p);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].type, FrameType::kEof);
  EXPECT_TRUE(frames[0].payload.empty());
  EXPECT_EQ(frames[1].payload.size(), kMaxPayload);
  EXPECT_FALSE(p.desynced());
}

TEST(FrameTest, ByteAtATime) {
  std::string wire;
  for (FrameType t : kAllTypes) encode_frame(wire, t, 42, std::string(static_cast<int>(t), 'a'));
  FrameParser p(FrameType::kResync);
  std::vector<Frame> got;
  for (char c : wire) {
    p.feed(&c, 1);
    while (auto f = p.next()) got.push_back(std::move(*f));
  }
  ASSERT_EQ(got.size(), std::size(kAllTypes));
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].type, kAllTypes[i]);
    EXPECT_EQ(got[i].stream, 42u);
    EXPECT_EQ(got[i].payload.size(), static_cast<size_t>(kAllTypes[i]));
  }
  EXPECT_EQ(p.buffered(), 0u);
}

TEST(FrameTest, RandomSplitsKeepFrames) {
  std::mt19937 rng(7);
  std::string wire;
  std::vector<std::string> payloads;
  for (int i = 0; i < 200; ++i) {
    std::string pl(rng() % 3000, '\0');
    for (auto& c : pl) c = static_cast<char>(rng());
    payloads.push_back(pl);
    encode_frame(wire, FrameType::kData, static_cast<uint32_t>(i + 1), pl);
  }
  FrameParser p(FrameType::kResync);
  std::vector<Frame> got;
  size_t off = 0;
  while (off < wire.size()) {
    const size_t n = std::min<size_t>(wire.size() - off, 1 + rng() % 5000);
    p.feed(wire.data() + off, n);
    off += n;
    while (auto f = p.next()) got.push_back(std::move(*f));
  }
  ASSERT_EQ(got.size(), payloads.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].stream, i + 1);
    EXPECT_EQ(got[i].payload, payloads[i]);
  }
}

TEST(FrameTest, PartialFrameGivesNullopt) {
  const std::string f = encode_frame(FrameType::kStdout, 3, "hello world");
  FrameParser p(FrameType::kResync);
  p.feed(f.substr(0, 5));
  EXPECT_FALSE(p.next().has_value());
  p.feed(f.substr(5, kHeaderSize - 5 + 4));
  EXPECT_FALSE(p.next().has_value());
  EXPECT_FALSE(p.desynced());
  p.feed(f.substr(kHeaderSize + 4));
  auto got = p.next();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->payload, "hello world");
}

TEST(FrameTest, OversizedLengthDesyncs) {
  FrameParser p(FrameType::kResync);
  p.feed(header(kMagic0, kMagic1, kVersion, 0x11, 1, kMaxPayload + 1));
  p.feed(std::string(100, 'z'));
  EXPECT_FALSE(p.next().has_value());
  EXPECT_TRUE(p.desynced());
  EXPECT_GT(p.discarded(), 0u);
}

TEST(FrameTest, BadMagicDesyncs) {
  FrameParser p(FrameType::kResync);
  std::string f = encode_frame(FrameType::kPing, 0, "abc");
  f[1] = 0x06;
  p.feed(f);
  EXPECT_FALSE(p.next().has_value());
  EXPECT_TRUE(p.desynced());
}

TEST(FrameTest, BadVersionDesyncs) {
  FrameParser p(FrameType::kResync);
  std::string f = encode_frame(FrameType::kPing, 0, "abc");
  f[2] = 2;
  p.feed(f);
  EXPECT_FALSE(p.next().has_value());
  EXPECT_TRUE(p.desynced());
}

TEST(FrameTest, UnknownTypeDesyncs) {
  FrameParser p(FrameType::kResync);
  p.feed(header(kMagic0, kMagic1, kVersion, 0x7f, 0, 0));
  EXPECT_FALSE(p.next().has_value());
  EXPECT_TRUE(p.desynced());
}

TEST(FrameTest, GarbageThenResyncYieldsResync) {
  FrameParser p(FrameType::kResync);
  std::string garbage = "\xB3\x05\x01\x99junk\xB3\xB3\x05 more junk";
  // A valid frame of another type inside the garbage must be skipped too while desynced.
  garbage += encode_frame(FrameType::kData, 9, "not this");
  const std::string nonce = "0123456789abcdef";
  p.feed(garbage);
  p.feed(encode_frame(FrameType::kResync, 0, nonce));
  p.feed(encode_frame(FrameType::kPing, 0, "after"));
  auto frames = drain(p);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].type, FrameType::kResync);
  EXPECT_EQ(frames[0].payload, nonce);
  EXPECT_EQ(frames[1].type, FrameType::kPing);
  EXPECT_EQ(frames[1].payload, "after");
  EXPECT_FALSE(p.desynced());
  EXPECT_EQ(p.discarded(), garbage.size());
}

TEST(FrameTest, GarbageThenResyncByteAtATime) {
  FrameParser p(FrameType::kResync);
  std::string wire = std::string("\x01\x02\xB3garbage\xB3\x05", 12);
  wire += encode_frame(FrameType::kResync, 0, "nonce");
  std::vector<Frame> got;
  for (char c : wire) {
    p.feed(&c, 1);
    while (auto f = p.next()) got.push_back(std::move(*f));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, FrameType::kResync);
  EXPECT_EQ(got[0].payload, "nonce");
}

TEST(FrameTest, ForceResyncSkipsUntilAck) {
  FrameParser p(FrameType::kResyncAck);
  p.force_resync();
  p.feed(encode_frame(FrameType::kStdout, 1, "stale output"));
  p.feed(encode_frame(FrameType::kEnd, 1, "{}"));
  p.feed(encode_frame(FrameType::kResyncAck, 0, "n"));
  auto frames = drain(p);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].type, FrameType::kResyncAck);
  EXPECT_FALSE(p.desynced());
}

TEST(FrameTest, U32RoundTrip) {
  for (uint32_t v : {0u, 1u, 255u, 256u, 0x12345678u, kInitialWindow, 0xffffffffu}) {
    const std::string s = encode_u32(v);
    ASSERT_EQ(s.size(), 4u);
    EXPECT_EQ(decode_u32(s), v);
  }
  EXPECT_EQ(encode_u32(0x01020304), std::string("\x04\x03\x02\x01", 4));
  EXPECT_FALSE(decode_u32("").has_value());
  EXPECT_FALSE(decode_u32("abc").has_value());
  EXPECT_FALSE(decode_u32("abcde").has_value());
}

TEST(FrameTest, AppendingEncoderMatches) {
  std::string out = "prefix";
  encode_frame(out, FrameType::kWindow, 8, encode_u32(1024));
  EXPECT_EQ(out, "prefix" + encode_frame(FrameType::kWindow, 8, encode_u32(1024)));
}

}  // namespace
}  // namespace b3os::protocol
