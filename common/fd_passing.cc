#include "common/fd_passing.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace b3os {

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(2000);
constexpr char kMessage = 'F';
// Room for a few fds: a misbehaving sender's extras are received, then closed.
constexpr size_t kMaxFds = 4;

void set_timeout(int sock, int opt, std::chrono::milliseconds ms) {
  if (ms.count() < 1) ms = std::chrono::milliseconds(1);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  ::setsockopt(sock, SOL_SOCKET, opt, &tv, sizeof(tv));
}

Error fd_error(const std::string& path, std::string_view what, int err) {
  return errno_error(ErrorCode::kInternal, "receive fd from " + path + ": " + std::string(what),
                     err);
}

}  // namespace

Result<std::vector<UniqueFd>> receive_fds(const std::string& socket_path) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return fail(ErrorCode::kInternal, "receive fd from " + socket_path + ": bad socket path");
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return fail(fd_error(socket_path, "socket", errno));
  // A unix connect blocks only while the listener's backlog is full; SO_SNDTIMEO bounds it.
  set_timeout(sock.get(), SO_SNDTIMEO, kTimeout);
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return fail(fd_error(socket_path, "connect", errno));
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  set_timeout(sock.get(), SO_RCVTIMEO, left);

  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR && std::chrono::steady_clock::now() < deadline);
  if (n < 0) {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) {
      return fail(ErrorCode::kInternal, "receive fd from " + socket_path + ": timed out", err);
    }
    return fail(fd_error(socket_path, "recvmsg", err));
  }

  auto fds = received_fds(msg);
  if (n == 0 && fds.empty()) {
    return fail(ErrorCode::kInternal,
                "receive fd from " + socket_path + ": closed without sending an fd");
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || fds.empty() || byte != kMessage) {
    return fail(ErrorCode::kInternal,
                "receive fd from " + socket_path + ": unexpected message from the holder");
  }
  return fds;
}

std::vector<UniqueFd> received_fds(msghdr& msg) {
  std::vector<UniqueFd> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds.emplace_back(fd);
    }
  }
  return fds;
}

Result<void> send_fds(int sock, const int* fds, size_t count) {
  if (count == 0 || count > kMaxFds) return fail(ErrorCode::kInternal, "send fd: one to four fds");
  char byte = kMessage;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  std::memset(control, 0, sizeof(control));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * count);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * count);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * count);
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != 1) {
    return fail(errno_error(ErrorCode::kInternal, "send fd", n < 0 ? errno : EIO));
  }
  return {};
}

}  // namespace b3os
