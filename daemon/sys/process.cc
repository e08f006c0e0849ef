#include "daemon/sys/process.h"

#include "common/file.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "common/unique_fd.h"

extern char** environ;

namespace b3os::sys {

namespace {
constexpr size_t kMaxCapturedOutput = 64 * 1024;

// Children that some caller will reap itself; the orphan reaper leaves them alone.
std::mutex g_owned_mu;
std::set<pid_t> g_owned;

// Wait statuses of reaped orphans, oldest first, so a sandbox's death can be explained.
std::mutex g_reaped_mu;
std::condition_variable g_reaped_cv;
std::deque<std::pair<pid_t, int>> g_reaped;
constexpr size_t kReapedKept = 1024;

void remember_reaped(pid_t pid, int status) {
  std::lock_guard lk(g_reaped_mu);
  g_reaped.emplace_back(pid, status);
  if (g_reaped.size() > kReapedKept) g_reaped.pop_front();
  g_reaped_cv.notify_all();
}

void forget(pid_t pid) {
  std::lock_guard lk(g_owned_mu);
  g_owned.erase(pid);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}
}  // namespace

std::string join_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

Result<pid_t> spawn(const SpawnOptions& opts) {
  if (opts.argv.empty()) return fail(ErrorCode::kInternal, "spawn: empty argv");
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return fail(errno_error(ErrorCode::kInternal, "open /dev/null", errno));

  // Sources are first moved above every target so dup2 chains cannot clobber each other.
  std::vector<UniqueFd> staged;
  const int first_free = static_cast<int>(std::max<size_t>(opts.fds.size(), 3));
  std::vector<int> sources;
  size_t n = std::max<size_t>(opts.fds.size(), 3);
  for (size_t i = 0; i < n; ++i) {
    int src = i < opts.fds.size() && opts.fds[i] >= 0 ? opts.fds[i] : devnull.get();
    int d = ::fcntl(src, F_DUPFD_CLOEXEC, first_free + 16);
    if (d < 0) return fail(errno_error(ErrorCode::kInternal, "dup fd for child", errno));
    staged.emplace_back(d);
    sources.push_back(d);
  }

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (size_t i = 0; i < sources.size(); ++i) posix_spawn_file_actions_adddup2(&fa, sources[i], static_cast<int>(i));
  posix_spawn_file_actions_addclosefrom_np(&fa, static_cast<int>(sources.size()));

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (opts.new_session) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);

  std::vector<char*> argv;
  for (const auto& a : opts.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  std::unique_lock owned(g_owned_mu);  // so the reaper cannot take the child before it is owned
  int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
  if (rc == 0) g_owned.insert(pid);
  owned.unlock();
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return fail(errno_error(ErrorCode::kInternal, "starting " + opts.argv[0], rc));
  return pid;
}

bool try_reap(pid_t pid) {
  int status = 0;
  pid_t r = ::waitpid(pid, &status, WNOHANG);
  if (r == pid || (r < 0 && errno == ECHILD)) {
    forget(pid);
    return true;
  }
  return false;
}

void reap_pidfd(int pidfd, pid_t pid) {
  siginfo_t si{};
  if (::waitid(P_PIDFD, static_cast<id_t>(pidfd), &si, WEXITED | WNOHANG) == 0 && si.si_pid == pid) forget(pid);
}

void start_orphan_reaper() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  std::thread([] {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    const std::string self = std::to_string(::getpid());
    for (;;) {
      timespec tick{1, 0};
      ::sigtimedwait(&chld, nullptr, &tick);
      // Reap zombies that are ours by adoption only; spawn()'s callers reap their own.
      DIR* d = ::opendir("/proc");
      if (!d) continue;
      while (dirent* e = ::readdir(d)) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        std::string stat = read_small_file(std::string("/proc/") + e->d_name + "/stat", 4096).value_or("");
        size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 4 >= stat.size() || stat[close + 2] != 'Z') continue;
        size_t ppid_at = close + 4;
        if (stat.compare(ppid_at, self.size() + 1, self + " ") != 0) continue;
        pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
        int status = 0;
        bool reaped = false;
        {
          std::lock_guard lk(g_owned_mu);
          reaped = !g_owned.count(pid) && ::waitpid(pid, &status, WNOHANG) == pid;
        }
        if (reaped) remember_reaped(pid, status);
      }
      ::closedir(d);
    }
  }).detach();
}

Result<int> wait_exit(pid_t pid) {
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid) {
      forget(pid);
      return exit_code_of(status);
    }
    if (r < 0 && errno == EINTR) continue;
    return fail(errno_error(ErrorCode::kInternal, "waitpid " + std::to_string(pid), errno));
  }
}

Result<CommandResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  return run(argv, timeout, std::string_view{});
}

Result<CommandResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          std::string_view input) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail(errno_error(ErrorCode::kInternal, "pipe", errno));
  UniqueFd rd(p[0]), wr(p[1]);
  // stdin: /dev/null, or a pipe the loop below fills while it drains the output (a child that
  // answers before it has read everything cannot deadlock against us).
  UniqueFd in_rd, in_wr;
  if (!input.empty()) {
    int q[2];
    if (::pipe2(q, O_CLOEXEC) != 0) return fail(errno_error(ErrorCode::kInternal, "pipe", errno));
    in_rd.reset(q[0]);
    in_wr.reset(q[1]);
    ::fcntl(in_wr.get(), F_SETFL, O_NONBLOCK);
  }
  auto pid = spawn({argv, {in_rd ? in_rd.get() : -1, wr.get(), wr.get()}, false});
  if (!pid) return fail(pid.error());
  wr.reset();
  in_rd.reset();
  size_t written = 0;

  CommandResult res;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(*pid, SIGKILL);
      killed = true;
      res.output += "\n[killed after " + std::to_string(timeout.count()) + " ms]";
    }
    pollfd pfd[2] = {{rd.get(), POLLIN, 0}, {in_wr ? in_wr.get() : -1, POLLOUT, 0}};
    int pr = ::poll(pfd, 2, killed ? 1000 : static_cast<int>(std::max<int64_t>(left.count(), 1)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      if (killed) break;
      continue;
    }
    if (in_wr && (pfd[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::write(in_wr.get(), input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();  // the child closed it
      if (written >= input.size()) in_wr.reset();
    }
    if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t r = ::read(rd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (res.output.size() < kMaxCapturedOutput) res.output.append(buf, static_cast<size_t>(r));
  }
  auto code = wait_exit(*pid);
  if (!code) return fail(code.error());
  res.exit_code = *code;
  while (!res.output.empty() && (res.output.back() == '\n' || res.output.back() == ' ')) res.output.pop_back();
  return res;
}

Result<void> run_checked(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::string_view input) {
  auto r = run(argv, timeout, input);
  if (!r) return fail(r.error());
  if (r->exit_code != 0)
    return fail(ErrorCode::kInternal,
                join_argv(argv) + " failed (exit " + std::to_string(r->exit_code) + "): " + r->output);
  return {};
}

std::optional<int> orphan_status(pid_t pid, std::chrono::milliseconds wait) {
  std::unique_lock lk(g_reaped_mu);
  std::optional<int> found;
  g_reaped_cv.wait_for(lk, wait, [&] {
    for (auto it = g_reaped.rbegin(); it != g_reaped.rend(); ++it)
      if (it->first == pid) {
        found = it->second;
        return true;
      }
    return false;
  });
  return found;
}

}  // namespace b3os::sys
