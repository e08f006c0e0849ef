#pragma once
// exec: runs a command and streams its stdout/stderr back, feeding stdin from DATA frames.

#include <memory>
#include <string>

#include "agent/spawn.h"
#include "agent/stream.h"

namespace b3os::agent {

/// The process an exec or proc_start request asks for: argv, env, cwd and stdin checked, its
/// `user` resolved from the sandbox's own account files, its cwd one that exists.
Result<SpawnSpec> prepare_spawn(const Json& req);

class ExecStream : public Stream {
 public:
  /// Validates the request, checks cwd and starts the process.
  static Result<std::unique_ptr<Stream>> start(Channel& channel, uint32_t id, const Json& req);

  void on_data(std::string_view data) override;
  void on_eof() override;
  void on_window(uint32_t credit) override;
  void on_cancel() override;
  void abandon() override;

  void poll_fds(std::vector<pollfd>& out) const override;
  void on_fd_ready(int fd, short revents) override;
  std::optional<Clock::time_point> deadline() const override;
  void on_deadline(Clock::time_point now) override;
  pid_t child_pid() const override { return exited_ ? -1 : pid_; }
  void on_child_exit(int status, Clock::time_point when) override;

 private:
  struct Output {
    UniqueFd fd;
    protocol::FrameType type;
    uint64_t sent = 0;
    bool truncated = false;
  };

  ExecStream(Channel& channel, uint32_t id, SpawnedChild child, Clock::time_point started,
             uint64_t timeout_ms, uint64_t max_output);
  bool forwarding(const Output& o) const { return o.sent < max_output_; }
  bool wants_read(const Output& o) const { return o.fd && (!forwarding(o) || credit_ > 0); }
  bool credit_blocked() const;
  void read_output(Output& o);
  void write_stdin();
  void close_stdin();
  void maybe_finish();

  pid_t pid_;
  Output out_[2];
  UniqueFd stdin_fd_;
  std::string stdin_buf_;
  bool stdin_eof_ = false;
  uint64_t max_output_;
  Clock::time_point started_;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> grace_until_;
  bool exited_ = false;
  int status_ = 0;
  Clock::time_point exited_at_;
  bool timed_out_ = false;
};

}  // namespace b3os::agent
