#include "agent/port_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace b3os::agent {

using protocol::FrameType;

Result<std::unique_ptr<Stream>> PortStream::open(Channel& channel, uint32_t id, const Json& req) {
  auto port = get_u64(req, "port", 0);
  if (!port) return fail(port.error());
  if (*port < 1 || *port > 65535) return fail(ErrorCode::kInvalidRequest, "port must be 1 to 65535");
  auto s = std::unique_ptr<PortStream>(new PortStream(channel, id, static_cast<int>(*port)));
  if (!s->connect_next())
    return fail(ErrorCode::kUpstreamUnavailable,
                "nothing listens on port " + std::to_string(*port) + " inside the sandbox (127.0.0.1 and ::1 refused)");
  return std::unique_ptr<Stream>(std::move(s));
}

bool PortStream::connect_next() {
  while (family_index_ < 2) {
    const bool v6 = family_index_++ == 1;
    fd_.reset(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd_) continue;
    sockaddr_storage ss{};
    socklen_t len;
    if (v6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(static_cast<uint16_t>(port_));
      a->sin6_addr = in6addr_loopback;
      len = sizeof(*a);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(static_cast<uint16_t>(port_));
      a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(*a);
    }
    const int one = 1;
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd_.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0) {
      on_connect_done();
      return true;
    }
    if (errno == EINPROGRESS || errno == EINTR) {
      connecting_ = true;
      return true;
    }
  }
  fd_.reset();
  return false;
}

void PortStream::on_connect_done() {
  connecting_ = false;
  connected_ = true;
  send(FrameType::kHeader, R"({"ok":true})");
  write_app();
}

void PortStream::poll_fds(std::vector<pollfd>& out) const {
  if (finished_ || !fd_) return;
  short events = 0;
  if (connecting_) {
    events = POLLOUT;
  } else {
    // The app's bytes are read only as far as the daemon's credit goes.
    if (!app_eof_ && credit_ > 0) events |= POLLIN;
    if (to_app_pos_ < to_app_.size()) events |= POLLOUT;
  }
  // POLLERR and POLLHUP are reported whatever the events; an fd with none still tells a reset.
  out.push_back(pollfd{fd_.get(), events, 0});
}

void PortStream::on_fd_ready(int, short revents) {
  if (finished_) return;
  if (connecting_) {
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0 && (revents & POLLOUT)) {
      on_connect_done();
      return;
    }
    if (!connect_next()) {
      fail_with(Error{ErrorCode::kUpstreamUnavailable,
                      "nothing listens on port " + std::to_string(port_) +
                          " inside the sandbox (127.0.0.1 and ::1 refused)",
                      err});
    }
    return;
  }
  if (revents & (POLLOUT | POLLERR | POLLHUP)) write_app();
  if (!finished_ && (revents & (POLLIN | POLLERR | POLLHUP))) read_app();
}

void PortStream::read_app() {
  if (finished_ || app_eof_ || credit_ == 0) return;
  static char buf[protocol::kMaxData];
  // A bounded amount per turn, so that one busy connection cannot starve the others.
  for (int i = 0; i < 4 && credit_ > 0; ++i) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof(buf), credit_));
    const ssize_t n = ::read(fd_.get(), buf, want);
    if (n > 0) {
      send(FrameType::kData, std::string_view(buf, static_cast<size_t>(n)));
      credit_ -= static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 && errno != ECONNRESET) {
      fail_with(Error{ErrorCode::kUpstreamError, std::string("reading from the app: ") + std::strerror(errno), errno});
      return;
    }
    // EOF (or a reset, which ends the app's bytes just the same).
    app_eof_ = true;
    send(FrameType::kEof, {});
    maybe_end();
    return;
  }
}

void PortStream::write_app() {
  if (finished_ || !connected_) return;
  uint64_t written = 0;
  while (to_app_pos_ < to_app_.size()) {
    const ssize_t n = ::send(fd_.get(), to_app_.data() + to_app_pos_, to_app_.size() - to_app_pos_, MSG_NOSIGNAL);
    if (n > 0) {
      to_app_pos_ += static_cast<size_t>(n);
      written += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    // The app closed its reading side: what the daemon still sends is dropped (as a peer's
    // RST would drop it), and the app's own bytes, if any, still come back.
    written += to_app_.size() - to_app_pos_;
    to_app_.clear();
    to_app_pos_ = 0;
    app_write_shut_ = true;
    break;
  }
  if (to_app_pos_ == to_app_.size()) {
    to_app_.clear();
    to_app_pos_ = 0;
  } else if (to_app_pos_ >= (1u << 20)) {
    to_app_.erase(0, to_app_pos_);
    to_app_pos_ = 0;
  }
  // The daemon's credit comes back as its bytes reach the app, not when they arrive here.
  if (written > 0) grant(written);
  if (daemon_eof_ && to_app_.empty() && !app_write_shut_) {
    ::shutdown(fd_.get(), SHUT_WR);
    app_write_shut_ = true;
  }
  maybe_end();
}

void PortStream::on_data(std::string_view data) {
  if (finished_) return;
  if (app_write_shut_) {
    grant(data.size());  // dropped: the app no longer reads
    return;
  }
  to_app_.append(data.data(), data.size());
  write_app();
}

void PortStream::on_eof() {
  if (finished_) return;
  daemon_eof_ = true;
  write_app();
}

void PortStream::maybe_end() {
  // Both directions are over: the app sent everything and will get nothing more.
  if (!finished_ && app_eof_ && daemon_eof_ && app_write_shut_) {
    fd_.reset();
    end(Json{{"ok", true}});
  }
}

void PortStream::fail_with(const Error& e) {
  fd_.reset();
  end_error(e);
}

void PortStream::on_cancel() {
  if (finished_) return;
  fd_.reset();
  end(Json{{"ok", true}, {"cancelled", true}});
}

void PortStream::abandon() {
  fd_.reset();
  finished_ = true;
}

}  // namespace b3os::agent
