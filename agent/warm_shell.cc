#include "agent/warm_shell.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/log.h"

namespace b3os::agent {

namespace {

// What the shell runs once its profile is read: wait for fd 4 to close, read the command from
// fd 3 (a regular file, which bash reads in blocks, where a pipe would be read byte by byte),
// close both, then eval the command in this same shell. `builtin`, so that a function of the
// profile's named like one cannot take its place; `|| :`, so that a profile's `set -e` does not
// end the shell at the reads' EOF. SECONDS counts from here and hashed command paths are
// forgotten. Before the command runs, BASH_EXECUTION_STRING is set to it (as `bash -c` sets it)
// and the variable is unset; all on one line, so $LINENO counts as in `bash -c`.
constexpr char kStub[] =
    "builtin read -r -n 1 __b3os_cmd <&4 || :; exec 4<&-; "
    "IFS= builtin read -r -d '' __b3os_cmd <&3 || :; exec 3<&-; SECONDS=0; builtin hash -r; "
    "builtin eval \"BASH_EXECUTION_STRING=\\$__b3os_cmd; builtin unset __b3os_cmd; $__b3os_cmd\"";

// A shell taken this soon after its start was started after the last command ended (20 ms of
// quiet), or was not even ready (bash and its profile take ~45 ms here): commands come faster
// than shells are made ready at leisure.
constexpr auto kYoung = std::chrono::milliseconds(100);

// The longest command a warm shell takes: what execve would take as one argument
// (MAX_ARG_STRLEN); a longer one goes the usual way and gets the usual error.
constexpr size_t kMaxCommand = 128 * 1024 - 1;

std::string env_value(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  std::string value;
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) value = e.substr(prefix.size());
  return value;
}

int64_t ns_of(const timespec& ts) { return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec; }

bool same_ids(const std::optional<SpawnIds>& a, const std::optional<SpawnIds>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->uid == b->uid && a->gid == b->gid && a->groups == b->groups);
}

}  // namespace

bool WarmShell::fits(const SpawnSpec& spec) {
  return spec.argv.size() == 4 && spec.argv[0] == "/bin/bash" && spec.argv[1] == "-l" && spec.argv[2] == "-c" &&
         spec.argv[3].size() <= kMaxCommand && spec.argv[3].find('\0') == std::string::npos && spec.tty < 0 &&
         spec.pass_fds.empty();
}

SpawnSpec WarmShell::key_of(const SpawnSpec& spec) {
  SpawnSpec key = spec;
  key.argv.pop_back();
  return key;
}

bool WarmShell::same_kind(const SpawnSpec& a, const SpawnSpec& b) {
  return a.argv == b.argv && a.env == b.env && a.cwd == b.cwd && a.pipe_stdin == b.pipe_stdin && a.tty == b.tty &&
         same_ids(a.ids, b.ids);
}

// The files a login bash reads before the command (bash(1), INVOCATION, and Debian's
// /etc/profile and ~/.profile, which read /etc/profile.d/*.sh, /etc/bash.bashrc and ~/.bashrc),
// the directory /etc/profile.d itself (a file added or removed), and the accounts file.
std::optional<std::vector<WarmShell::Stamp>> WarmShell::stamp_profile(const SpawnSpec& spec) {
  // Read at every take and start: a directory made huge must not hold the agent's thread.
  constexpr size_t kMaxProfileD = 256;
  std::vector<std::string> paths = {"/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/passwd",
                                    "/etc/environment"};
  if (DIR* d = ::opendir("/etc/profile.d")) {
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      if (names.size() == kMaxProfileD) {
        ::closedir(d);
        return std::nullopt;
      }
      names.emplace_back(e->d_name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& n : names) paths.push_back("/etc/profile.d/" + n);
  }
  const std::string home = env_value(spec.env, "HOME");
  if (!home.empty()) {
    for (const char* f : {"/.bash_profile", "/.bash_login", "/.profile", "/.bashrc"}) paths.push_back(home + f);
  }
  std::vector<Stamp> out;
  out.reserve(paths.size());
  for (auto& p : paths) {
    Stamp s;
    s.path = std::move(p);
    struct stat st;
    if (::stat(s.path.c_str(), &st) == 0) {
      s.exists = true;
      s.ino = st.st_ino;
      s.size = st.st_size;
      s.mtime_ns = ns_of(st.st_mtim);
      s.ctime_ns = ns_of(st.st_ctim);
    }
    out.push_back(std::move(s));
  }
  return out;
}

bool WarmShell::stat_cwd(const SpawnSpec& key, struct stat& st) {
  return ::stat(key.cwd.empty() ? "/" : key.cwd.c_str(), &st) == 0;
}

bool WarmShell::start(const SpawnSpec& key) {
  // The directory it runs in, by inode: a directory removed and made again is another one.
  struct stat cwd_st;
  if (!stat_cwd(key, cwd_st)) {
    log_line("warm shell: not started: cwd %s: %s", key.cwd.c_str(), std::strerror(errno));
    return false;
  }
  UniqueFd script(::memfd_create("b3os-command", MFD_CLOEXEC));
  int go[2];
  if (!script || ::pipe2(go, O_CLOEXEC) != 0) {
    log_line("warm shell: not started: %s", std::strerror(errno));
    return false;
  }
  UniqueFd go_r(go[0]), go_w(go[1]);
  SpawnSpec spec = key;
  spec.argv.push_back(kStub);
  spec.pass_fds = {script.get(), go_r.get()};
  // Stamped before the start: a change made while the shell reads its profile shows as one.
  auto stamps = stamp_profile(key);
  if (!stamps) {
    log_line("warm shell: not started: /etc/profile.d has too many entries to watch");
    return false;
  }
  auto child = spawn_child(spec);
  if (!child) {
    log_line("warm shell: not started: %s", child.error().message.c_str());
    return false;
  }
  shells_.push_back(Shell{key, std::move(*child), std::move(script), std::move(go_w), std::move(*stamps),
                          cwd_st.st_dev, cwd_st.st_ino, std::chrono::steady_clock::now()});
  return true;
}

bool WarmShell::kept(const Shell& sh, const std::optional<std::vector<Stamp>>& stamps) const {
  // Alive: not exited (reaped or not yet).
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(sh.child.pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != 0)
    return false;
  struct stat st;
  if (!stat_cwd(sh.key, st) || st.st_dev != sh.cwd_dev || st.st_ino != sh.cwd_ino) return false;
  return stamps && sh.stamps == *stamps;  // else it read a profile that has changed since
}

std::optional<SpawnedChild> WarmShell::take(const SpawnSpec& spec) {
  // No shell is started from here until a command that fits ends (the agent's loop is quiet
  // while a short command runs, and a start then takes the CPU it needs).
  const std::optional<SpawnSpec> due = std::move(pending_);
  pending_.reset();
  if (shells_.empty()) {
    // None waits, where one was due: shells are wanted faster than they come.
    if (due && same_kind(*due, key_of(spec))) target_ = std::min(target_ + 1, kMaxShells);
    return std::nullopt;
  }
  const SpawnSpec key = key_of(spec);
  if (!same_kind(shells_.front().key, key)) {
    // Left for the kind they were started for, unless commands of other kinds keep passing them.
    if (++passed_over_ >= kMaxPassedOver) drop();
    return std::nullopt;
  }
  passed_over_ = 0;
  const auto stamps = stamp_profile(key);
  while (!shells_.empty()) {
    Shell sh = std::move(shells_.front());
    shells_.pop_front();
    if (!kept(sh, stamps)) {
      kill_group(sh.child.pid);
      continue;
    }
    const std::string& cmd = spec.argv[3];
    size_t done = 0;
    int err = 0;  // 0 with done < size: a short write
    while (done < cmd.size()) {
      const ssize_t w = ::pwrite(sh.script.get(), cmd.data() + done, cmd.size() - done, static_cast<off_t>(done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err = w < 0 ? errno : 0;
        break;
      }
      done += static_cast<size_t>(w);
    }
    if (done < cmd.size()) {
      log_line("warm shell: command not written: %s", err != 0 ? std::strerror(err) : "short write");
      kill_group(sh.child.pid);
      continue;
    }
    if (std::chrono::steady_clock::now() - sh.started < kYoung) target_ = std::min(target_ + 1, kMaxShells);
    // Closing the go pipe's write end (with the Shell) lets the shell go on.
    return std::move(sh.child);
  }
  return std::nullopt;
}

void WarmShell::command_ended(const SpawnSpec& spec) {
  SpawnSpec key = key_of(spec);
  const bool again = std::any_of(recent_.begin(), recent_.end(), [&](const SpawnSpec& k) { return same_kind(k, key); });
  if (again && (shells_.empty() || same_kind(shells_.front().key, key))) pending_ = key;
  recent_.push_back(std::move(key));
  if (recent_.size() > kRecent) recent_.pop_front();
}

void WarmShell::start_pending() {
  if (!pending()) return;
  // One at a time, each at a quiet turn of its own; done once enough wait, or at a failure
  // (logged), which the next command that ends may try again.
  if (!start(*pending_) || shells_.size() >= target_) pending_.reset();
}

bool WarmShell::on_child_exit(pid_t pid) {
  for (auto it = shells_.begin(); it != shells_.end(); ++it)
    if (it->child.pid == pid) {
      shells_.erase(it);
      // Not started again until a command of the kind ends: a profile that ends the shell
      // (or a process that kills the waiting ones) must not have shells started in a loop.
      pending_.reset();
      return true;
    }
  return false;
}

std::vector<pid_t> WarmShell::waiting() const {
  std::vector<pid_t> out;
  for (const auto& sh : shells_) out.push_back(sh.child.pid);
  return out;
}

void WarmShell::drop() {
  passed_over_ = 0;
  pending_.reset();
  target_ = 1;
  // Each one's whole group: nothing of it may outlive it. Reaped by the agent's reaper, as any
  // child.
  for (const auto& sh : shells_) kill_group(sh.child.pid);
  shells_.clear();
}

}  // namespace b3os::agent
