// libFuzzer target for the channel's FrameParser: arbitrary bytes, fed in pieces of arbitrary
// sizes, must never crash the parser or make it yield a frame that breaks the wire format.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "protocol/frame.h"

namespace {

using b3os::protocol::FrameParser;
using b3os::protocol::FrameType;

void require(bool ok) {
  if (!ok) std::abort();
}

// Checks one yielded frame: a known type within limits, and re-encoding it parses back
// to the same frame with a fresh parser.
void check_frame(const b3os::protocol::Frame& f, FrameType resync_type, bool was_desynced) {
  require(f.payload.size() <= b3os::protocol::kMaxPayload);
  require(b3os::protocol::known_type(static_cast<uint8_t>(f.type)));
  if (was_desynced) require(f.type == resync_type);
  const std::string wire = b3os::protocol::encode_frame(f.type, f.stream, f.payload);
  FrameParser again(resync_type);
  again.feed(wire);
  auto g = again.next();
  require(g.has_value() && g->type == f.type && g->stream == f.stream && g->payload == f.payload);
  require(!again.next().has_value() && again.buffered() == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks the parser's resync type and whether it starts desynced; the
  // second seeds the piece sizes.
  const FrameType resync_type = (data[0] & 1) ? FrameType::kResync : FrameType::kResyncAck;
  FrameParser p(resync_type);
  if (data[0] & 2) p.force_resync();
  uint32_t seed = data[1] | 1u;
  data += 2;
  size -= 2;

  size_t off = 0;
  size_t fed = 0;
  size_t yielded_bytes = 0;
  while (off < size) {
    seed = seed * 1103515245u + 12345u;
    const size_t piece = std::min<size_t>(size - off, 1 + (seed >> 16) % 97);
    p.feed(reinterpret_cast<const char*>(data) + off, piece);
    off += piece;
    fed += piece;
    for (;;) {
      const bool was_desynced = p.desynced();
      auto f = p.next();
      if (!f) break;
      check_frame(*f, resync_type, was_desynced);
      yielded_bytes += b3os::protocol::kHeaderSize + f->payload.size();
      require(!p.desynced());
    }
    // Every byte fed is accounted for: yielded, discarded, or still buffered.
    require(yielded_bytes + p.discarded() + p.buffered() == fed);
    // A buffered partial frame is never more than one maximal frame.
    require(p.buffered() < b3os::protocol::kHeaderSize + b3os::protocol::kMaxPayload);
  }
  return 0;
}
