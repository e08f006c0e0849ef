// b3os-shim: holds the daemon's end of one sandbox's agent channel (inherited as fd 3) so that
// the channel outlives a b3osd restart, and hands it (with the log pipe below, while open) to
// whoever connects to SOCKET_PATH.
// With LOG_PATH it also drains the sandbox's stderr (a pipe inherited as fd 4: runsc's own
// messages and whatever is written to /proc/1/fd/2 inside) into LOG_PATH, which never grows
// past kLogCap (it rotates once to LOG_PATH.1), at no more than kLogRate bytes a second, so
// code inside a sandbox can neither fill a host file nor spend host CPU through it.
// Deliberately tiny: no threads, no heap use in the loop, no iostream, no JSON.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/fd_passing.h"

namespace {

constexpr int kChannelFd = 3;
constexpr int kLogFd = 4;
constexpr off_t kLogCap = 1 << 20;     // bytes per log file; two files at most
constexpr size_t kLogRate = 256 << 10;  // bytes drained per second; the writer waits beyond

// The capped, rate-limited copy of the sandbox's stderr.
class LogDrain {
 public:
  bool open(const char* path) {
    if (std::strlen(path) + 3 > sizeof path_) return false;
    std::strcpy(path_, path);
    std::strcpy(old_, path);
    std::strcat(old_, ".1");
    return reopen(O_APPEND);
  }
  // With this second's allowance spent: how long until the next second's.
  int wait_ms() const {
    const long left = 1000 - since_window_ms();
    return left > 0 ? static_cast<int>(left) : 0;
  }
  bool may_read() {
    if (since_window_ms() >= 1000) {
      window_ = now_ms();
      drained_ = 0;
    }
    return drained_ < kLogRate;
  }
  // Moves what the pipe holds (up to the allowance) into the file; false at the pipe's end.
  bool pump(int from) {
    char buf[16 << 10];
    const ssize_t n = ::read(from, buf, sizeof buf);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    drained_ += static_cast<size_t>(n);
    if (size_ + n > kLogCap) {
      ::rename(path_, old_);
      ::close(fd_);
      if (!reopen(O_TRUNC)) return true;  // bytes are dropped rather than kept anywhere
    }
    if (::write(fd_, buf, static_cast<size_t>(n)) == n) size_ += n;
    return true;
  }

 private:
  bool reopen(int mode) {
    fd_ = ::open(path_, O_WRONLY | O_CREAT | O_CLOEXEC | mode, 0600);
    if (fd_ < 0) return false;
    struct stat st {};
    size_ = ::fstat(fd_, &st) == 0 ? st.st_size : 0;
    return true;
  }
  static long now_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  }
  long since_window_ms() const { return now_ms() - window_; }

  char path_[4096] = {};
  char old_[4096] = {};
  int fd_ = -1;
  off_t size_ = 0;
  long window_ = 0;
  size_t drained_ = 0;
};

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
void close_inherited(int last_kept) {
  if (::close_range(last_kept + 1, ~0u, 0) == 0) return;
  for (int fd = last_kept + 1; fd < 4096; ++fd) ::close(fd);
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

// Hands over the channel and, while it is still open, the log pipe's read end: b3osd keeps a
// copy of both, so that it can start a new shim if this one is killed.
void serve(int conn, int log_fd) {
  timeval tv{2, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const int fds[2] = {kChannelFd, log_fd};
  if (peer_allowed(conn)) (void)b3os::send_fds(conn, fds, log_fd >= 0 ? 2 : 1);
  ::close(conn);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    say("usage: b3os-shim SOCKET_PATH [LOG_PATH] (the channel inherited as fd 3; with LOG_PATH, "
        "the sandbox's stderr pipe as fd 4)");
    return 2;
  }
  const char* path = argv[1];
  fill_stdio();
  if (::fcntl(kChannelFd, F_GETFD) < 0) {
    say("fd 3 (the channel) is not open");
    return 2;
  }
  const bool logging = argc == 3;
  if (logging && ::fcntl(kLogFd, F_GETFD) < 0) {
    say("fd 4 (the log pipe) is not open");
    return 2;
  }
  close_inherited(logging ? kLogFd : kChannelFd);
  LogDrain log;
  if (logging) {
    if (!log.open(argv[2])) return die(argv[2], errno);
    ::fcntl(kLogFd, F_SETFL, ::fcntl(kLogFd, F_GETFL) | O_NONBLOCK);
  }
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

  // The log pipe is watched only while this second's allowance lasts; past it the pipe
  // fills and the writer inside waits (the agent's own stderr is non-blocking).
  int log_fd = logging ? kLogFd : -1;
  pollfd pfds[3] = {{lfd, POLLIN, 0}, {sfd, POLLIN, 0}, {-1, POLLIN, 0}};
  for (;;) {
    const bool watch_log = log_fd >= 0 && log.may_read();
    pfds[2].fd = watch_log ? log_fd : -1;
    pfds[2].revents = 0;
    const int timeout = log_fd >= 0 && !watch_log ? log.wait_ms() : -1;
    if (::poll(pfds, 3, timeout) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (pfds[1].revents != 0) {
      ::unlink(path);
      return 0;
    }
    if (pfds[0].revents != 0) {
      const int conn = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) serve(conn, log_fd);
    }
    if (pfds[2].revents != 0 && !log.pump(log_fd)) {
      ::close(log_fd);  // every writer is gone: the sandbox has stopped
      log_fd = -1;
    }
  }
}
