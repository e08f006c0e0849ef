#include "agent/stream.h"

#include <algorithm>

namespace b3os::agent {

namespace {
// A daemon granting credit forever must not overflow the counter.
constexpr uint64_t kMaxCredit = uint64_t{1} << 40;
}  // namespace

void Stream::on_window(uint32_t credit) { credit_ = std::min(credit_ + credit, kMaxCredit); }

void Stream::send(protocol::FrameType type, std::string_view payload) {
  channel_.send(type, id_, payload);
}

void Stream::end(const Json& result) {
  if (finished_) return;
  channel_.send(protocol::FrameType::kEnd, id_, dump_json(result));
  finished_ = true;
}

void Stream::end_error(const Error& e) { end(error_json(e)); }

void Stream::grant(uint64_t n) {
  // One WINDOW carries a u32; a larger grant (never in practice) goes out in pieces.
  while (n > 0) {
    const uint32_t piece = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
    channel_.send(protocol::FrameType::kWindow, id_, protocol::encode_u32(piece));
    n -= piece;
  }
}

void send_end_error(Channel& channel, uint32_t id, const Error& e) {
  channel.send(protocol::FrameType::kEnd, id, dump_json(error_json(e)));
}

void send_header(Channel& channel, uint32_t id, const Json& header) {
  channel.send(protocol::FrameType::kHeader, id, dump_json(header));
}

}  // namespace b3os::agent
