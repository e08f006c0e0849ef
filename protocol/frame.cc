#include "protocol/frame.h"

#include <cstring>

namespace b3os::protocol {

namespace {
void put_u32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v & 0xff);
  p[1] = static_cast<char>((v >> 8) & 0xff);
  p[2] = static_cast<char>((v >> 16) & 0xff);
  p[3] = static_cast<char>((v >> 24) & 0xff);
}
uint32_t get_u32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t(u[0]) | (uint32_t(u[1]) << 8) | (uint32_t(u[2]) << 16) | (uint32_t(u[3]) << 24);
}
}  // namespace

bool known_type(uint8_t t) {
  return (t >= 0x01 && t <= 0x08) || (t >= 0x10 && t <= 0x18);
}

void encode_header(char* h, FrameType type, uint32_t stream, uint32_t len) {
  h[0] = static_cast<char>(kMagic0);
  h[1] = static_cast<char>(kMagic1);
  h[2] = static_cast<char>(kVersion);
  h[3] = static_cast<char>(type);
  put_u32(h + 4, stream);
  put_u32(h + 8, len);
}

void encode_frame(std::string& out, FrameType type, uint32_t stream, std::string_view payload) {
  char h[kHeaderSize];
  encode_header(h, type, stream, static_cast<uint32_t>(payload.size()));
  out.append(h, kHeaderSize);
  out.append(payload.data(), payload.size());
}

std::string encode_frame(FrameType type, uint32_t stream, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  encode_frame(out, type, stream, payload);
  return out;
}

std::string encode_u32(uint32_t v) {
  std::string s(4, '\0');
  put_u32(s.data(), v);
  return s;
}

std::optional<uint32_t> decode_u32(std::string_view s) {
  if (s.size() != 4) return std::nullopt;
  return get_u32(s.data());
}

bool FrameParser::header_ok(const char* h) const {
  return static_cast<uint8_t>(h[0]) == kMagic0 && static_cast<uint8_t>(h[1]) == kMagic1 &&
         static_cast<uint8_t>(h[2]) == kVersion && known_type(static_cast<uint8_t>(h[3])) &&
         get_u32(h + 8) <= kMaxPayload;
}

void FrameParser::compact() {
  if (pos_ > 0 && (pos_ >= 64 * 1024 || pos_ == buf_.size())) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

std::optional<Frame> FrameParser::next() {
  for (;;) {
    const size_t avail = buf_.size() - pos_;
    if (avail < kHeaderSize) {
      compact();
      return std::nullopt;
    }
    const char* h = buf_.data() + pos_;
    if (!desynced_ && !header_ok(h)) desynced_ = true;
    if (desynced_) {
      // Look for a header of the resync type; skip one byte at a time until found.
      if (!header_ok(h) || static_cast<FrameType>(h[3]) != resync_type_) {
        const void* m = std::memchr(h + 1, kMagic0, avail - 1);
        const size_t skip = m ? static_cast<const char*>(m) - h : avail;
        pos_ += skip;
        discarded_ += skip;
        continue;
      }
    }
    const uint32_t len = get_u32(h + 8);
    if (avail < kHeaderSize + len) {
      compact();
      return std::nullopt;
    }
    Frame f;
    f.type = static_cast<FrameType>(h[3]);
    f.stream = get_u32(h + 4);
    f.payload.assign(h + kHeaderSize, len);
    pos_ += kHeaderSize + len;
    desynced_ = false;
    compact();
    return f;
  }
}

}  // namespace b3os::protocol
