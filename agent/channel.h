#pragma once
// Channel: the agent's end of the socketpair to b3osd. Reads frames from fd 0 and queues
// outgoing frames for fd 1 without ever blocking the event loop.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/frame.h"

namespace b3os::agent {

class Channel {
 public:
  /// Wraps the (already nonblocking) read and write fds; it does not own them.
  Channel(int in_fd, int out_fd);

  /// The fd the loop polls for incoming frames.
  int in_fd() const { return in_fd_; }
  /// The fd the loop polls for room to write queued frames.
  int out_fd() const { return out_fd_; }
  /// True until the peer closed the read side (EOF or a hard error).
  bool readable() const { return readable_; }
  /// True while queued bytes wait for the socket to accept them.
  bool wants_write() const { return writable_ && out_pos_ < out_.size(); }
  /// Bytes queued and not yet written.
  size_t queued() const { return out_.size() - out_pos_; }

  /// Reads what the socket has (bounded per call) into the frame parser.
  void read_available();
  /// The next complete frame read so far, if any.
  std::optional<protocol::Frame> next_frame();
  /// Queues a frame; it is written by `flush`.
  void send(protocol::FrameType type, uint32_t stream, std::string_view payload);
  /// Writes queued bytes until the socket is full or the queue is empty.
  void flush();
  /// Stops reading (after EOF) so the loop no longer polls the read fd.
  void close_read() { readable_ = false; }

 private:
  /// Payloads at least this large skip the queue when it is empty (Channel::send).
  static constexpr size_t kDirectBytes = 16 * 1024;
  int in_fd_;
  int out_fd_;
  bool readable_ = true;
  bool writable_ = true;
  bool was_desynced_ = false;
  uint64_t discarded_at_desync_ = 0;
  protocol::FrameParser parser_{protocol::FrameType::kResync};
  std::string out_;
  size_t out_pos_ = 0;
};

}  // namespace b3os::agent
