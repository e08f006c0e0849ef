#pragma once
// pty: a terminal made inside the sandbox (posix_openpt), a shell on it in its own session,
// and the master's bytes over the stream: DATA from the daemon is typed in, STDOUT carries
// what the terminal shows, a HEADER {"rows","cols"} from the daemon resizes it, and END says
// how the shell ended (docs/agent-protocol.md).

#include <memory>
#include <string>

#include "agent/spawn.h"
#include "agent/stream.h"

namespace b3os::agent {

class PtyStream : public Stream {
 public:
  /// {"argv","env","cwd","user","rows","cols"}: opens the terminal and starts the program; the
  /// HEADER {"ok":true,"pid"} follows at once.
  static Result<std::unique_ptr<Stream>> start(Channel& channel, uint32_t id, const Json& req);
  ~PtyStream() override;

  void on_data(std::string_view data) override;
  void on_header(std::string_view payload) override;
  void on_window(uint32_t credit) override;
  void on_cancel() override;
  void abandon() override;
  void poll_fds(std::vector<pollfd>& out) const override;
  void on_fd_ready(int fd, short revents) override;
  std::optional<Clock::time_point> deadline() const override;
  void on_deadline(Clock::time_point now) override;
  pid_t child_pid() const override { return exited_ ? -1 : pid_; }
  void on_child_exit(int status, Clock::time_point when) override;
  bool is_terminal() const override { return true; }

 private:
  PtyStream(Channel& channel, uint32_t id, UniqueFd master, pid_t pid);
  void write_input();
  void maybe_finish();

  UniqueFd master_;
  pid_t pid_;
  std::string in_buf_;
  bool exited_ = false;
  int status_ = 0;
  std::optional<Clock::time_point> grace_until_;
  std::optional<Clock::time_point> hangup_at_;  // cancelled: SIGKILL the session then
};

}  // namespace b3os::agent
