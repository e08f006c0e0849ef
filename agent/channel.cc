#include "agent/channel.h"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/log.h"

namespace b3os::agent {

namespace {
// Per read_available call: enough for many frames, small enough that one busy daemon cannot
// keep the loop from serving exec pipes and timers.
constexpr size_t kReadBudget = 1u << 20;
constexpr size_t kReadChunk = 128u * 1024;
}  // namespace

Channel::Channel(int in_fd, int out_fd) : in_fd_(in_fd), out_fd_(out_fd) {}

void Channel::read_available() {
  if (!readable_) return;
  char buf[kReadChunk];
  size_t total = 0;
  while (total < kReadBudget) {
    const ssize_t n = ::read(in_fd_, buf, sizeof(buf));
    if (n > 0) {
      parser_.feed(buf, static_cast<size_t>(n));
      total += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      log_line("channel: EOF on fd %d", in_fd_);
      readable_ = false;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    log_line("channel: read: %s", std::strerror(errno));
    readable_ = false;
    return;
  }
}

std::optional<protocol::Frame> Channel::next_frame() {
  const uint64_t discarded_before = parser_.discarded();
  auto f = parser_.next();
  if (!was_desynced_ && (parser_.desynced() || parser_.discarded() != discarded_before)) {
    log_line("channel: bad frame header, discarding input until RESYNC");
    was_desynced_ = true;
    discarded_at_desync_ = discarded_before;
  }
  if (f && was_desynced_) {
    log_line("channel: resynchronised after discarding %llu bytes",
             static_cast<unsigned long long>(parser_.discarded() - discarded_at_desync_));
    was_desynced_ = false;
  }
  return f;
}

void Channel::send(protocol::FrameType type, uint32_t stream, std::string_view payload) {
  if (!writable_) return;
  if (out_pos_ < out_.size() || payload.size() < kDirectBytes) {
    protocol::encode_frame(out_, type, stream, payload);
    return;
  }
  // Nothing queued and a large payload (a fast command's output): header and payload go out
  // in one writev from where they are, and only what the socket did not take is queued.
  char h[protocol::kHeaderSize];
  protocol::encode_header(h, type, stream, static_cast<uint32_t>(payload.size()));
  iovec iov[2] = {{h, sizeof h}, {const_cast<char*>(payload.data()), payload.size()}};
  ssize_t n;
  do {
    n = ::writev(out_fd_, iov, 2);
  } while (n < 0 && errno == EINTR);
  size_t done = n > 0 ? static_cast<size_t>(n) : 0;
  if (done < sizeof h) out_.append(h + done, sizeof h - done);
  const size_t from = done > sizeof h ? done - sizeof h : 0;
  out_.append(payload.data() + from, payload.size() - from);
  // An error other than a full socket is met again (and reported) by the next flush.
}

void Channel::flush() {
  while (writable_ && out_pos_ < out_.size()) {
    const ssize_t n = ::write(out_fd_, out_.data() + out_pos_, out_.size() - out_pos_);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    log_line("channel: write: %s; dropping output", n < 0 ? std::strerror(errno) : "wrote 0");
    writable_ = false;
    out_.clear();
    out_pos_ = 0;
    return;
  }
  // Drop the written prefix: at once when all went out, otherwise only when it is large, so
  // a slow reader does not cost a memmove of the whole queue per write.
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  } else if (out_pos_ >= (1u << 20) && out_pos_ * 2 >= out_.size()) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
}

}  // namespace b3os::agent
