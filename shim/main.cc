// b3os-shim: holds the daemon's end of one sandbox's agent channel (inherited as fd 3) so that
// the channel outlives a b3osd restart, and hands it to whoever connects to SOCKET_PATH.
// Deliberately tiny: no threads, no heap use in the loop, no iostream, no JSON.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd_passing.h"

namespace {

constexpr int kChannelFd = 3;

void say(const char* a, const char* b = "", const char* c = "") {
  const char* parts[] = {"b3os-shim: ", a, b, c, "\n"};
  for (const char* p : parts) {
    if (::write(2, p, std::strlen(p)) < 0) return;
  }
}

int die(const char* what, int err) {
  say(what, ": ", std::strerror(err));
  return 1;
}

// Reopens any closed stdio fd on /dev/null, so that the sockets opened below can never take
// a number 0-2 that is later replaced by /dev/null.
void fill_stdio() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    const int n = ::open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) {
      ::dup2(n, fd);
      ::close(n);
    }
  }
}

// Whatever else the spawner leaked (a daemon's listening sockets, say) must not live on in a
// process that outlasts it.
void close_inherited() {
  if (::close_range(kChannelFd + 1, ~0u, 0) == 0) return;
  for (int fd = kChannelFd + 1; fd < 4096; ++fd) ::close(fd);
}

void detach_stdio() {
  const int n = ::open("/dev/null", O_RDWR);
  if (n < 0) return;
  for (int fd = 0; fd < 3; ++fd) ::dup2(n, fd);
  if (n > 2) ::close(n);
}

// Only the shim's own user (root) may take the channel; the 0600 socket mode says the same,
// but a directory with looser permissions must not open it up.
bool peer_allowed(int conn) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid();
}

void serve(int conn) {
  timeval tv{2, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (peer_allowed(conn)) (void)b3os::send_fd(conn, kChannelFd);
  ::close(conn);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    say("usage: b3os-shim SOCKET_PATH (with the channel fd inherited as fd 3)");
    return 2;
  }
  const char* path = argv[1];
  fill_stdio();
  if (::fcntl(kChannelFd, F_GETFD) < 0) {
    say("fd 3 (the channel) is not open");
    return 2;
  }
  close_inherited();
  ::setsid();
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);

  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  ::sigprocmask(SIG_BLOCK, &term, nullptr);
  const int sfd = ::signalfd(-1, &term, SFD_CLOEXEC);
  if (sfd < 0) return die("signalfd", errno);

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof(addr.sun_path)) {
    say("socket path too long: ", path);
    return 2;
  }
  std::strcpy(addr.sun_path, path);
  const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) return die("socket", errno);
  ::unlink(path);
  // The umask makes the socket 0600 from the start; chmod below only confirms it.
  const mode_t old_mask = ::umask(0177);
  const int b = ::bind(lfd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int bind_err = errno;
  ::umask(old_mask);
  if (b != 0) return die(path, bind_err);
  if (::chmod(path, 0600) != 0) return die(path, errno);
  if (::listen(lfd, 16) != 0) return die("listen", errno);

  if (::write(1, "ready\n", 6) != 6) return die("write ready", errno);
  detach_stdio();
  if (path[0] == '/' && ::chdir("/") != 0) return 1;

  pollfd pfds[2] = {{lfd, POLLIN, 0}, {sfd, POLLIN, 0}};
  for (;;) {
    if (::poll(pfds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (pfds[1].revents != 0) {
      ::unlink(path);
      return 0;
    }
    if (pfds[0].revents != 0) {
      const int conn = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) serve(conn);
    }
  }
}
