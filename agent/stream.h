#pragma once
// Stream: one request the daemon OPENed (exec, file_write, file_read), driven by the agent's
// event loop. The loop asks each stream which fds to poll, when its next timer is due and
// whether it has work that needs no fd, and forwards the daemon's frames to it.

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/channel.h"
#include "agent/request.h"
#include "common/error.h"

namespace b3os::agent {

using Clock = std::chrono::steady_clock;

class Stream {
 public:
  Stream(Channel& channel, uint32_t id) : channel_(channel), id_(id) {}
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// The stream id the daemon chose in OPEN.
  uint32_t id() const { return id_; }
  /// True once END was sent (or the stream was abandoned): the loop then drops it.
  bool finished() const { return finished_; }

  /// A DATA frame from the daemon.
  virtual void on_data(std::string_view data) {}
  /// The daemon's EOF: no more DATA.
  virtual void on_eof() {}
  /// A HEADER from the daemon (a terminal's resize).
  virtual void on_header(std::string_view payload) {}
  /// True for a terminal (a sandbox holds at most kMaxTerminals).
  virtual bool is_terminal() const { return false; }
  /// True for a file watch (a sandbox holds at most kMaxWatchStreams).
  virtual bool is_watch() const { return false; }
  /// WINDOW: the daemon grants `credit` more bytes of DATA/STDOUT/STDERR.
  virtual void on_window(uint32_t credit);
  /// CANCEL: abandon the request (exec: kill its process group; END still follows).
  virtual void on_cancel() = 0;
  /// Drops the stream without a reply (RESYNC, lost channel): kills processes, frees files.
  virtual void abandon() { finished_ = true; }

  /// Appends the fds to poll and their events.
  virtual void poll_fds(std::vector<pollfd>& out) const {}
  /// One of the stream's fds is ready.
  virtual void on_fd_ready(int fd, short revents) {}
  /// True if `pump` has work that needs no fd (file_read while it has credit).
  virtual bool wants_pump() const { return false; }
  /// Does one bounded piece of fd-less work.
  virtual void pump() {}
  /// The next time `on_deadline` must run, if any.
  virtual std::optional<Clock::time_point> deadline() const { return std::nullopt; }
  /// The deadline passed.
  virtual void on_deadline(Clock::time_point now) {}
  /// The process this stream waits for, or -1.
  virtual pid_t child_pid() const { return -1; }
  /// The process was reaped with wait status `status`.
  virtual void on_child_exit(int status, Clock::time_point when) {}

 protected:
  /// Queues a frame on this stream.
  void send(protocol::FrameType type, std::string_view payload);
  /// Sends END with `result` (which must carry "ok") and finishes the stream.
  void end(const Json& result);
  /// Sends END {"ok":false,"error":...} and finishes the stream.
  void end_error(const Error& e);
  /// Grants the daemon `n` more bytes of DATA credit.
  void grant(uint64_t n);

  Channel& channel_;
  const uint32_t id_;
  // What we may still send as DATA/STDOUT/STDERR before the daemon grants more.
  uint64_t credit_ = protocol::kInitialWindow;
  bool finished_ = false;
};

/// Sends a HEADER (JSON) on stream `id`.
void send_header(Channel& channel, uint32_t id, const Json& header);
/// Sends END {"ok":false,...} for a stream that never got an object (a failed OPEN).
void send_end_error(Channel& channel, uint32_t id, const Error& e);

}  // namespace b3os::agent
