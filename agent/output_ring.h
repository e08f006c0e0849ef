#pragma once
// OutputRing: the last `cap` bytes a background process wrote, stdout and stderr in the order
// they were read. Offsets count every byte the process ever wrote (both streams together), so
// a reader names where it stopped and learns what fell out in between (docs/api.md,
// "Background processes"). Pure: no syscalls, unit-tested.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace b3os::agent {

class OutputRing {
 public:
  struct Piece {
    uint64_t offset = 0;  // of its first byte
    bool is_stderr = false;
    std::string_view bytes;  // valid until the next append
  };

  explicit OutputRing(size_t cap) : cap_(cap) {}

  /// Keeps `bytes`; the oldest bytes go when more than `cap` are held.
  void append(bool is_stderr, std::string_view bytes);
  /// Offset of the oldest byte held (== end() when nothing is held).
  uint64_t start() const { return end_ - held_; }
  /// Offset just past the newest byte: every byte ever written.
  uint64_t end() const { return end_; }
  size_t cap() const { return cap_; }
  /// The bytes from `from` (clamped up to start()) to the end of the chunk that holds it, at
  /// most `max`: all of one stream. Nothing when `from` >= end().
  std::optional<Piece> read(uint64_t from, size_t max) const;

 private:
  struct Chunk {
    uint64_t offset;
    bool is_stderr;
    std::string bytes;
  };
  size_t cap_;
  size_t held_ = 0;
  uint64_t end_ = 0;
  // Contiguous, oldest first; the front one may have lost its first bytes (offset moved up).
  std::deque<Chunk> chunks_;
};

}  // namespace b3os::agent
