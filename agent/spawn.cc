#include "agent/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace b3os::agent {

namespace {

constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Everything the child needs, built before fork: after fork only async-signal-safe calls.
struct ChildPlan {
  std::vector<char*> argv;
  std::vector<char*> env;
  std::vector<std::string> candidates;
  std::vector<char*> sh_argv;  // for ENOEXEC: /bin/sh <candidate> args...
  std::string exec_prefix;     // "b3os: exec <argv0>: "
  const char* cwd = nullptr;
  const SpawnIds* ids = nullptr;
  int stdin_src = -1;
  int stdout_w = -1;
  int stderr_w = -1;
  int close_up_to = -1;  // without close_range: the highest fd to close; else -1
  std::vector<int> pass_fds;  // dup'ed to 3, 4, ...: each first moved above all of them
  bool set_ctty = false;  // stdin is a pty slave: make it the session's controlling terminal
  // The step before execve that failed in the child, and its errno. vfork: the child writes
  // them into this very memory before it exits, and the parent reads them once it resumes;
  // volatile, since the compiler cannot see that the child's stores reach the parent.
  volatile int failed_step = 0;  // a SetupStep
  volatile int failed_errno = 0;
};

enum SetupStep : int { kNoFailure = 0, kSetgroups, kSetgid, kSetuid, kChdir };

[[noreturn]] void setup_failed(ChildPlan& p, SetupStep step, int err) {
  p.failed_errno = err;
  p.failed_step = step;
  ::_exit(127);
}

// Raw syscalls, not the libc wrappers: glibc's set*id broadcast the change to every thread of
// the process, and a vfork child shares the agent's memory; the kernel changes only the
// calling task's credentials, which is exactly the child.
void take_ids(ChildPlan& p) {
  const SpawnIds& ids = *p.ids;
  if (::syscall(SYS_setgroups, ids.groups.size(), ids.groups.data()) != 0) {
    setup_failed(p, kSetgroups, errno);
  }
  if (::syscall(SYS_setgid, ids.gid) != 0) setup_failed(p, kSetgid, errno);
  if (::syscall(SYS_setuid, ids.uid) != 0) setup_failed(p, kSetuid, errno);
}

// The top of close_range's range. Linux takes ~0u, but gVisor rejects anything above INT_MAX;
// and syscall() is variadic, so it is passed as a long with the upper half clear.
constexpr unsigned long kAllFds = 0x7ffffffful;

bool have_close_range() {
  // Closing an empty range at the very top: 0 where the syscall exists, ENOSYS elsewhere.
  static const bool works = ::syscall(SYS_close_range, kAllFds - 1, kAllFds, 0ul) == 0;
  return works;
}

// Without close_range, the child closes fds one by one; bound the loop by the fds the agent
// really has open, since a close per possible fd costs seconds under gVisor.
int highest_open_fd() {
  int highest = 2;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 1023;
  while (const dirent* e = ::readdir(d)) {
    highest = std::max(highest, std::atoi(e->d_name));
  }
  ::closedir(d);
  return highest;
}

void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

[[noreturn]] void child_fail(const std::string& prefix, int err) {
  write_all(2, prefix.data(), prefix.size());
  // strerrordesc_np returns a static string: safe here, unlike strerror.
  const char* desc = ::strerrordesc_np(err);
  if (desc == nullptr) desc = "unknown error";
  write_all(2, desc, std::strlen(desc));
  write_all(2, "\n", 1);
  ::_exit(127);
}

// True for the execve errors after which execvp also moves on to the next PATH entry.
bool try_next(int err) {
  return err == ENOENT || err == ENOTDIR || err == EACCES || err == ESTALE || err == ENODEV ||
         err == ETIMEDOUT;
}

[[noreturn]] void run_child(ChildPlan& p) {
  // The agent blocks SIGCHLD and ignores SIGPIPE; a command must start with neither.
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);

  ::setsid();
  if (::dup2(p.stdin_src, 0) < 0 || ::dup2(p.stdout_w, 1) < 0 || ::dup2(p.stderr_w, 2) < 0) {
    ::_exit(127);
  }
  if (p.set_ctty && ::ioctl(0, TIOCSCTTY, 0) != 0) ::_exit(127);
  // Fds to pass, at 3, 4, ...: moved first above the range they go to, so that placing one
  // never closes another that still has to be placed.
  const int n_pass = static_cast<int>(p.pass_fds.size());
  for (int i = 0; i < n_pass; ++i) {
    p.pass_fds[i] = ::fcntl(p.pass_fds[i], F_DUPFD, 3 + n_pass);
    if (p.pass_fds[i] < 0) ::_exit(127);
  }
  for (int i = 0; i < n_pass; ++i) {
    if (::dup2(p.pass_fds[i], 3 + i) < 0) ::_exit(127);
  }
  // The ids first, so that the cwd is entered with the command's own permissions.
  if (p.ids != nullptr) take_ids(p);
  if (::chdir(p.cwd) != 0) setup_failed(p, kChdir, errno);
  const int first_closed = 3 + n_pass;
  if (p.close_up_to < 0) {
    ::syscall(SYS_close_range, static_cast<unsigned long>(first_closed), kAllFds, 0ul);
  } else {
    for (int fd = first_closed; fd <= p.close_up_to + n_pass; ++fd) ::close(fd);  // the moved copies too
  }

  int err = ENOENT;
  bool saw_eacces = false;
  for (const auto& c : p.candidates) {
    ::execve(c.c_str(), p.argv.data(), p.env.data());
    err = errno;
    if (err == ENOEXEC) {
      // A script without a #! line: run it with the shell, as execvp does.
      p.sh_argv[1] = const_cast<char*>(c.c_str());
      ::execve("/bin/sh", p.sh_argv.data(), p.env.data());
      err = errno;
      break;
    }
    if (err == EACCES) saw_eacces = true;
    if (!try_next(err)) break;
  }
  if (saw_eacces && try_next(err)) err = EACCES;
  child_fail(p.exec_prefix, err);
}

Error setup_error(const SpawnSpec& spec, SetupStep step, int err) {
  if (step == kChdir) return errno_error(ErrorCode::kInvalidRequest, "cwd " + spec.cwd, err);
  const char* call = step == kSetgroups ? "setgroups" : step == kSetgid ? "setgid" : "setuid";
  const auto id = step == kSetgid ? spec.ids->gid : spec.ids->uid;
  const std::string context = step == kSetgroups ? std::string("user: ") + call
                                                 : std::string("user: ") + call + " " + std::to_string(id);
  // EINVAL: an id the sandbox's user namespace cannot map, which is the request's doing.
  return errno_error(err == EINVAL ? ErrorCode::kInvalidRequest : ErrorCode::kInternal, context, err);
}

// A command's stdout and stderr pipes hold 1 MiB, not 64 KiB: in gVisor a full pipe costs a
// switch for each writer wake-up and reader wake-up, and a command that writes fast (a 1 GiB
// `cat`) streamed 2.5 times faster with it (docs/benchmarks.md). The pages are taken only as
// output waits unread. 1 MiB is the most an unprivileged pipe may hold (pipe-max-size).
constexpr int kOutputPipeBytes = 1 << 20;

Result<void> make_pipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(errno_error(ErrorCode::kInternal, "pipe", errno));
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return {};
}

void set_nonblocking(int fd) {
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

}  // namespace

std::vector<std::string> exec_candidates(const std::string& argv0, const std::string& path_var) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  std::vector<std::string> out;
  size_t i = 0;
  for (;;) {
    const size_t j = std::min(path_var.find(':', i), path_var.size());
    // An empty PATH entry means the current directory, as in execvp.
    const std::string dir = j > i ? path_var.substr(i, j - i) : ".";
    out.push_back(dir.back() == '/' ? dir + argv0 : dir + "/" + argv0);
    if (j >= path_var.size()) break;
    i = j + 1;
  }
  return out;
}

Result<SpawnedChild> spawn_child(const SpawnSpec& spec) {
  if (spec.argv.empty()) return fail(ErrorCode::kInvalidRequest, "argv must not be empty");

  std::string path_var = kDefaultPath;
  for (const auto& e : spec.env) {
    if (e.rfind("PATH=", 0) == 0) path_var = e.substr(5);
  }

  SpawnedChild child;
  UniqueFd stdin_r, stdout_w, stderr_w;
  if (spec.tty >= 0) {
    // The terminal is all three; the caller keeps the master.
  } else if (spec.pipe_stdin) {
    if (auto r = make_pipe(stdin_r, child.stdin_fd); !r) return fail(r.error());
  } else {
    stdin_r.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!stdin_r) return fail(errno_error(ErrorCode::kInternal, "open /dev/null", errno));
  }
  if (spec.tty < 0) {
    if (auto r = make_pipe(child.stdout_fd, stdout_w); !r) return fail(r.error());
    if (auto r = make_pipe(child.stderr_fd, stderr_w); !r) return fail(r.error());
    (void)::fcntl(stdout_w.get(), F_SETPIPE_SZ, kOutputPipeBytes);
    (void)::fcntl(stderr_w.get(), F_SETPIPE_SZ, kOutputPipeBytes);
  }

  ChildPlan plan;
  for (const auto& a : spec.argv) plan.argv.push_back(const_cast<char*>(a.c_str()));
  plan.argv.push_back(nullptr);
  for (const auto& e : spec.env) plan.env.push_back(const_cast<char*>(e.c_str()));
  plan.env.push_back(nullptr);
  plan.candidates = exec_candidates(spec.argv[0], path_var);
  plan.sh_argv.push_back(const_cast<char*>("/bin/sh"));
  plan.sh_argv.push_back(nullptr);
  for (size_t i = 1; i < spec.argv.size(); ++i) plan.sh_argv.push_back(plan.argv[i]);
  plan.sh_argv.push_back(nullptr);
  plan.exec_prefix = "b3os: exec " + spec.argv[0] + ": ";
  plan.cwd = spec.cwd.c_str();
  if (spec.ids) plan.ids = &*spec.ids;
  plan.stdin_src = spec.tty >= 0 ? spec.tty : stdin_r.get();
  plan.stdout_w = spec.tty >= 0 ? spec.tty : stdout_w.get();
  plan.stderr_w = spec.tty >= 0 ? spec.tty : stderr_w.get();
  plan.set_ctty = spec.tty >= 0;
  plan.pass_fds = spec.pass_fds;
  if (!have_close_range()) plan.close_up_to = highest_open_fd();

  // vfork: the child borrows the agent's memory until execve instead of copying its page
  // tables, which under gVisor halves the spawn (about 27 ms instead of 45 ms for /bin/true).
  // run_child only reads the prepared plan and makes async-signal-safe calls, and signal
  // dispositions and masks are per task, so nothing it does reaches the parent.
  const pid_t pid = ::vfork();
  if (pid < 0) return fail(errno_error(ErrorCode::kInternal, "fork", errno));
  if (pid == 0) run_child(plan);
  if (plan.failed_step != kNoFailure) {
    // The child has exited (vfork returns only then): reap it here, it belongs to no stream.
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return fail(setup_error(spec, static_cast<SetupStep>(plan.failed_step), plan.failed_errno));
  }

  child.pid = pid;
  if (child.stdin_fd) set_nonblocking(child.stdin_fd.get());
  if (child.stdout_fd) set_nonblocking(child.stdout_fd.get());
  if (child.stderr_fd) set_nonblocking(child.stderr_fd.get());
  return child;
}

int signal_session(pid_t sid, int sig) {
  if (sid <= 1) return 0;
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return 0;
  while (const dirent* e = ::readdir(d)) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 1) continue;
    // getsid asks the kernel directly: no parsing of /proc/PID/stat.
    if (::getsid(pid) == sid && ::kill(pid, sig) == 0) ++n;
  }
  ::closedir(d);
  return n;
}

void kill_group(pid_t pid) {
  if (pid <= 0) return;
  // Before the child's setsid() there is no group yet; then the process itself is the target.
  if (::kill(-pid, SIGKILL) != 0 && errno == ESRCH) ::kill(pid, SIGKILL);
}

}  // namespace b3os::agent
