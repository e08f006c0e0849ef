#include "agent/output_ring.h"

#include <algorithm>

namespace b3os::agent {

void OutputRing::append(bool is_stderr, std::string_view bytes) {
  if (bytes.empty()) return;
  const uint64_t offset = end_;
  end_ += bytes.size();
  if (bytes.size() >= cap_) {  // this alone fills the ring: keep its last cap_ bytes
    chunks_.clear();
    held_ = cap_;
    if (cap_ > 0) chunks_.push_back({end_ - cap_, is_stderr, std::string(bytes.substr(bytes.size() - cap_))});
    return;
  }
  // Small reads of the same stream are joined so that a chatty process does not make a chunk
  // (and a frame) per line.
  if (!chunks_.empty() && chunks_.back().is_stderr == is_stderr && chunks_.back().bytes.size() < 16 * 1024)
    chunks_.back().bytes.append(bytes);
  else
    chunks_.push_back({offset, is_stderr, std::string(bytes)});
  held_ += bytes.size();
  while (held_ > cap_) {
    Chunk& front = chunks_.front();
    const size_t over = held_ - cap_;
    if (front.bytes.size() <= over) {
      held_ -= front.bytes.size();
      chunks_.pop_front();
    } else {
      front.bytes.erase(0, over);
      front.offset += over;
      held_ -= over;
    }
  }
}

std::optional<OutputRing::Piece> OutputRing::read(uint64_t from, size_t max) const {
  from = std::max(from, start());
  if (from >= end_ || max == 0) return std::nullopt;
  // The chunk holding `from`: chunks are in offset order and contiguous.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), from,
                             [](uint64_t off, const Chunk& c) { return off < c.offset; });
  if (it == chunks_.begin()) return std::nullopt;  // cannot happen: from >= start()
  --it;
  const size_t at = static_cast<size_t>(from - it->offset);
  if (at >= it->bytes.size()) return std::nullopt;
  const size_t n = std::min(max, it->bytes.size() - at);
  return Piece{from, it->is_stderr, std::string_view(it->bytes).substr(at, n)};
}

}  // namespace b3os::agent
