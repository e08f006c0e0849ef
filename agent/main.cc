// b3os-agent: PID 1 of every sandbox. fd 0 and fd 1 are the channel to b3osd (one socket),
// fd 2 is the agent's log on the host.

#include <fcntl.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "agent/agent.h"
#include "agent/log.h"

namespace {

void set_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    b3os::agent::log_line("fcntl O_NONBLOCK on fd %d: %s", fd, std::strerror(errno));
  }
}

// Pipes and files the agent opens must never land on 0-2, where a child's dup2 would
// clobber them; a missing stdio fd is filled with /dev/null.
void ensure_stdio_open() {
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) >= 0) continue;
    const int n = ::open("/dev/null", O_RDWR);
    if (n >= 0 && n != fd) {
      ::dup2(n, fd);
      ::close(n);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace b3os::agent;
  // `/.b3os/agent --exit` does nothing: b3osd runs it once in a fork-ahead spare, so that the
  // spare's first exec pays the restored sentry's cold paths before a user's does. Never a
  // program of the sandbox's own disk, which its owner could make act differently in a fork.
  if (argc == 2 && std::strcmp(argv[1], "--exit") == 0) return 0;
  ensure_stdio_open();
  ::signal(SIGPIPE, SIG_IGN);
  ::umask(022);

  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  if (::sigprocmask(SIG_BLOCK, &chld, nullptr) != 0) {
    log_line("sigprocmask: %s", std::strerror(errno));
    return 1;
  }
  b3os::UniqueFd sfd(::signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!sfd) {
    log_line("signalfd: %s", std::strerror(errno));
    return 1;
  }
  set_nonblocking(0);
  set_nonblocking(1);
  // The log is a pipe the host drains at a capped rate; code inside can fill it (through
  // /proc/1/fd/2), and then a log line is dropped rather than the agent blocked.
  set_nonblocking(2);
  // The channel fds stay open in the agent only: children get their own stdio.
  ::fcntl(0, F_SETFD, FD_CLOEXEC);
  ::fcntl(1, F_SETFD, FD_CLOEXEC);
  log_line("started, pid %d", static_cast<int>(::getpid()));

  try {
    Agent agent(0, 1, std::move(sfd));
    return agent.run();
  } catch (const std::exception& e) {
    log_line("fatal: %s", e.what());
  } catch (...) {
    log_line("fatal: unknown exception");
  }
  // PID 1 exiting would kill the sandbox; keep reaping so that the daemon can still delete it.
  for (;;) {
    if (::waitpid(-1, nullptr, 0) < 0) ::sleep(1);
  }
}
