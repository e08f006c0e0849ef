// connect_tcp (server.h): a plain TCP connection as an Upstream, for the router's requests
// to nodes. Non-blocking socket, every wait a poll() bounded by the caller's deadline.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/http/server.h"

namespace b3os::http {

namespace {

using Clock = std::chrono::steady_clock;

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

class TcpUpstream final : public Upstream {
 public:
  explicit TcpUpstream(int fd) : fd_(fd) {}
  ~TcpUpstream() override { ::close(fd_); }

  Result<size_t> read(char* buf, size_t cap, Deadline deadline) override {
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, cap, MSG_DONTWAIT);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return fail(ErrorCode::kUpstreamError, std::string("reading from the node: ") + std::strerror(errno));
      pollfd p{fd_, POLLIN, 0};
      const int r = ::poll(&p, 1, ms_until(deadline));
      if (r == 0) return fail(ErrorCode::kUpstreamTimeout, "the node sent nothing in time");
    }
  }

  Result<void> write(std::string_view bytes, Deadline deadline) override {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
        return fail(ErrorCode::kUpstreamError, std::string("writing to the node: ") + std::strerror(errno));
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, ms_until(deadline)) == 0)
        return fail(ErrorCode::kUpstreamTimeout, "the node took nothing in time");
    }
    return {};
  }

  void close_write() override { ::shutdown(fd_, SHUT_WR); }

 private:
  int fd_;
};

}  // namespace

Result<std::unique_ptr<Upstream>> connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout) {
  auto fd = connect_tcp_socket(host, port, timeout);
  if (!fd) return fail(fd.error());
  return std::unique_ptr<Upstream>(new TcpUpstream(*fd));
}

Result<int> connect_tcp_socket(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    return fail(ErrorCode::kNodeUnavailable, "resolving " + host + ": " + ::gai_strerror(rc));
  std::string last = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, ms_until(deadline)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::freeaddrinfo(found);
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return fail(ErrorCode::kNodeUnavailable, "connecting to " + host + ":" + service + ": " + last);
}

}  // namespace b3os::http
