#pragma once
// The agent channel wire format, shared by b3osd and b3os-agent. See docs/agent-protocol.md.
//
// Every frame: a 12-byte header then `len` payload bytes.
//   u8 magic0 = 0xB3, u8 magic1 = 0x05, u8 version = 1, u8 type,
//   u32 stream (little endian), u32 len (little endian, at most kMaxPayload)

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace b3os::protocol {

inline constexpr uint8_t kMagic0 = 0xB3;
inline constexpr uint8_t kMagic1 = 0x05;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 12;
/// Largest payload of one frame. DATA frames are sent in chunks of at most kMaxData.
inline constexpr uint32_t kMaxPayload = 1u << 20;
inline constexpr uint32_t kMaxData = 256u * 1024;
/// Credit each side starts with, per stream and direction, for DATA/STDOUT/STDERR bytes.
inline constexpr uint32_t kInitialWindow = 4u * 1024 * 1024;

enum class FrameType : uint8_t {
  kHello = 0x01,      // agent -> daemon, stream 0: JSON {"version", "agent", "boot_id"}
  kResync = 0x02,     // daemon -> agent, stream 0: 16-byte nonce; agent drops all streams
  kResyncAck = 0x03,  // agent -> daemon, stream 0: the same nonce
  kPing = 0x04,       // either way, stream 0: payload echoed in kPong
  kPong = 0x05,
  kIdentity = 0x06,   // daemon -> agent, stream 0: JSON {"sandbox_id","hostname","machine_id","seed","time_ns"}
  kIdentityAck = 0x07,  // agent -> daemon, stream 0: JSON {"ok": true} or {"ok": false, "error": {...}}
  kIdle = 0x08,       // agent -> daemon, stream 0: JSON {"idle": bool}; sent only after the daemon
                      // asked with OPEN {"op":"idle_reports"} (an older daemon never sees one)
  // Streams. The daemon opens most (ids 1..0x7fffffff) and the agent answers them; the agent
  // opens its own for the in-sandbox HTTP relay (ids 0x80000000 | n, op "http") and
  // the daemon answers those. "Opener" and "answerer" below are the two roles.
  kOpen = 0x10,       // opener: JSON request, opens `stream` (see docs/agent-protocol.md)
  kData = 0x11,       // raw bytes: stdin (exec), file content (write: d->a, read: a->d),
                      // HTTP bodies (relay: request a->d, response d->a)
  kStdout = 0x12,     // agent -> daemon: exec stdout bytes
  kStderr = 0x13,     // agent -> daemon: exec stderr bytes
  kEof = 0x14,        // sender has no more DATA on this stream
  kWindow = 0x15,     // u32 LE: credit granted to the peer for this stream's data frames
  kHeader = 0x16,     // answerer: JSON metadata sent before data (file_read: {"size"}; relay:
                      // {"status","headers"})
  kEnd = 0x17,        // answerer: JSON result; the stream is finished
  kCancel = 0x18,     // opener: abandon the stream (exec: kill its process group; relay: the
                      // HTTP client went away)
};

/// True if `t` is a type this version knows.
bool known_type(uint8_t t);
/// True for the types whose payload counts against the flow-control window.
inline bool is_data_type(FrameType t) {
  return t == FrameType::kData || t == FrameType::kStdout || t == FrameType::kStderr;
}

struct Frame {
  FrameType type = FrameType::kPing;
  uint32_t stream = 0;
  std::string payload;
};

/// Appends the encoded frame to `out`.
void encode_frame(std::string& out, FrameType type, uint32_t stream, std::string_view payload);
/// The kHeaderSize bytes of a frame header, written at `h`.
void encode_header(char* h, FrameType type, uint32_t stream, uint32_t len);
/// Returns the encoded frame.
std::string encode_frame(FrameType type, uint32_t stream, std::string_view payload);
/// Encodes a u32 little endian (WINDOW payloads).
std::string encode_u32(uint32_t v);
/// Decodes a u32 little endian; nullopt unless exactly 4 bytes.
std::optional<uint32_t> decode_u32(std::string_view s);

/// Incremental decoder for a byte stream of frames.
///
/// Feed bytes with `feed`, then call `next` until it returns nullopt. A header with a bad
/// magic, version, unknown type or oversized length puts the parser in the `desynced` state:
/// it then discards bytes until it finds a whole frame of type `resync_type` (the channel's
/// way back after a peer died mid-frame) and yields that frame.
class FrameParser {
 public:
  explicit FrameParser(FrameType resync_type) : resync_type_(resync_type) {}

  void feed(const char* data, size_t n) { buf_.append(data, n); }
  void feed(std::string_view s) { buf_.append(s.data(), s.size()); }
  std::optional<Frame> next();

  bool desynced() const { return desynced_; }
  /// Enter the desynced state by hand (the daemon does this on reattach).
  void force_resync() { desynced_ = true; }
  /// Bytes discarded while desynced (for logs and tests).
  uint64_t discarded() const { return discarded_; }
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  bool header_ok(const char* h) const;
  void compact();

  FrameType resync_type_;
  std::string buf_;
  size_t pos_ = 0;
  bool desynced_ = false;
  uint64_t discarded_ = 0;
};

}  // namespace b3os::protocol
