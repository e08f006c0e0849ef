#pragma once
// port_connect: a TCP connection to an app inside the sandbox, for the preview URLs
// (docs/ports.md). The agent connects to 127.0.0.1:port (then [::1]:port when refused), answers
// HEADER {"ok":true} once connected or END {"ok":false} when nothing listens, then relays bytes
// both ways: the daemon's DATA goes to the app as credit allows (WINDOW back as it is written),
// the app's bytes come back as DATA within the daemon's credit; EOF each way is a half-close.
// It opens no port and needs no network: it works under egress deny and for apps bound to
// loopback only.

#include <memory>
#include <string>

#include "agent/stream.h"
#include "common/unique_fd.h"

namespace b3os::agent {

/// At most this many port connections at once (each holds a socket); the next one is refused.
inline constexpr size_t kMaxPortStreams = 1024;

class PortStream : public Stream {
 public:
  /// Validates `port` (1-65535) and starts a nonblocking connect.
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, const Json& req);

  void on_data(std::string_view data) override;
  void on_eof() override;
  void on_cancel() override;
  void abandon() override;
  void poll_fds(std::vector<pollfd>& out) const override;
  void on_fd_ready(int fd, short revents) override;

 private:
  PortStream(Channel& channel, uint32_t id, int port) : Stream(channel, id), port_(port) {}
  /// Starts a connect to the next address; false when none is left.
  bool connect_next();
  void on_connect_done();
  void read_app();
  void write_app();
  void maybe_end();
  void fail_with(const Error& e);

  const int port_;
  int family_index_ = 0;  // 0: 127.0.0.1 next, 1: ::1 next, 2: none left
  UniqueFd fd_;
  bool connecting_ = false;
  bool connected_ = false;
  std::string to_app_;   // the daemon's bytes not yet written to the app
  size_t to_app_pos_ = 0;
  bool daemon_eof_ = false;  // the daemon sent EOF: shut our write side once to_app_ is out
  bool app_write_shut_ = false;
  bool app_eof_ = false;     // the app closed its side; EOF sent
};

}  // namespace b3os::agent
