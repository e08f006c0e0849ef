#include "daemon/runtime/shims.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/fd_passing.h"
#include "common/file.h"
#include "daemon/sys/process.h"

namespace b3os::runtime {

using namespace std::chrono_literals;

namespace {

UniqueFd pidfd_of(pid_t pid) { return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); }

// Whether the process behind `pidfd` has exited, waiting up to `wait`.
bool gone_within(int pidfd, std::chrono::milliseconds wait) {
  pollfd pfd{pidfd, POLLIN, 0};
  return ::poll(&pfd, 1, static_cast<int>(wait.count())) == 1;
}

// Whether `pid` is a b3os-shim serving `dir` (its command line: b3os-shim DIR/shim.sock ...).
bool serves(pid_t pid, const std::string& dir) {
  auto cmd = read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 4096);
  if (!cmd) return false;
  const size_t end0 = cmd->find('\0');
  if (end0 == std::string::npos) return false;
  const std::string argv0 = cmd->substr(0, end0);
  const size_t end1 = cmd->find('\0', end0 + 1);
  const std::string argv1 = cmd->substr(end0 + 1, end1 == std::string::npos ? std::string::npos : end1 - end0 - 1);
  return argv1 == dir + "/shim.sock" && argv0.size() >= 9 && argv0.compare(argv0.size() - 9, 9, "b3os-shim") == 0;
}

// The shim serving `dir`, found by its command line: for a shim whose pid was never recorded,
// as when b3osd was killed between starting it and writing shim.pid (seen with a fork's three
// launches cut short). -1 if there is none.
pid_t find_shim(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (serves(pid, dir)) return pid;
  }
  return -1;
}

}  // namespace

Result<pid_t> ShimProcesses::start(const std::string& dir, int fd, int log_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail(errno_error(ErrorCode::kInternal, "pipe", errno));
  UniqueFd rd(p[0]), wr(p[1]);
  std::vector<std::string> argv = {shim_path_, dir + "/shim.sock"};
  std::vector<int> fds = {-1, wr.get(), -1, fd};
  if (log_fd >= 0) {
    argv.push_back(dir + "/sandbox.log");
    fds.push_back(log_fd);
  }
  auto pid = sys::spawn({argv, fds, true});
  if (!pid) return fail(pid.error().wrap("starting b3os-shim"));
  wr.reset();
  pollfd pfd{rd.get(), POLLIN, 0};
  char buf[16] = {};
  if (::poll(&pfd, 1, 5000) != 1 || ::read(rd.get(), buf, sizeof buf - 1) <= 0 || std::string(buf) != "ready\n") {
    ::kill(*pid, SIGKILL);
    (void)sys::wait_exit(*pid);
    return fail(ErrorCode::kInternal, "b3os-shim did not start (" + shim_path_ + ")");
  }
  std::ofstream(dir + "/shim.pid") << *pid << "\n";
  return *pid;
}

void ShimProcesses::stop(const std::string& dir, pid_t pid, int watch) {
  if (watch >= 0) {  // the process itself, whatever has its number by now
    (void)::syscall(SYS_pidfd_send_signal, watch, SIGTERM, nullptr, 0);
    if (!gone_within(watch, 1000ms)) {
      (void)::syscall(SYS_pidfd_send_signal, watch, SIGKILL, nullptr, 0);
      (void)gone_within(watch, 1000ms);
    }
    reap(watch, pid);
    return;
  }
  if (pid <= 0) pid = recorded_pid(dir);
  if (pid <= 0) pid = find_shim(dir);
  // A pid file can outlive its process and the pid be reused: only a shim of `dir` is signalled.
  if (pid <= 0 || !serves(pid, dir)) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (sys::try_reap(pid) && ::kill(pid, 0) != 0) return;  // reaped, or not our child and gone
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);
  sys::try_reap(pid);
}

pid_t ShimProcesses::recorded_pid(const std::string& dir) {
  auto text = read_small_file(dir + "/shim.pid", 64);
  if (!text || text->empty()) return -1;
  char* end = nullptr;
  long pid = std::strtol(text->c_str(), &end, 10);
  return end != text->c_str() && pid > 0 ? static_cast<pid_t>(pid) : -1;
}

Result<Shims::Held> ShimProcesses::reclaim(const std::string& dir) {
  auto fds = receive_fds(dir + "/shim.sock");
  if (!fds) return fail(fds.error());
  Held held;
  held.channel = std::move((*fds)[0]);
  if (fds->size() > 1) held.log = std::move((*fds)[1]);
  return held;
}

Shims::Watched ShimProcesses::watch(const std::string& dir, pid_t child) {
  Watched w;
  if (child > 0) {
    w.fd = pidfd_of(child);
    if (w.fd) w.pid = child;
    return w;
  }
  // Opened first, then checked: the pidfd names that process even if its pid is reused later,
  // and a pid already reused by something else does not serve `dir`.
  auto take = [&](pid_t pid) {
    if (pid <= 0) return false;
    UniqueFd fd = pidfd_of(pid);
    if (!fd || !serves(pid, dir)) return false;
    w.fd = std::move(fd);
    w.pid = pid;
    return true;
  };
  if (!take(recorded_pid(dir))) take(find_shim(dir));  // the /proc scan only when needed
  return w;
}

void ShimProcesses::reap(int watch, pid_t pid) { sys::reap_pidfd(watch, pid); }

}  // namespace b3os::runtime
