#include "agent/exec_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "agent/fs_ops.h"
#include "agent/log.h"
#include "agent/users.h"

namespace b3os::agent {

namespace {

// How long END waits for pipe EOF after the process exited: background children that keep
// the pipes open must not hold the exec forever.
constexpr auto kPipeGrace = std::chrono::milliseconds(100);
constexpr uint64_t kDefaultMaxOutput = 16u << 20;

bool has_nul(const std::string& s) { return s.find('\0') != std::string::npos; }

Result<SpawnSpec> parse_spec(const Json& req) {
  SpawnSpec spec;
  const auto argv = req.find("argv");
  if (argv == req.end() || !argv->is_array() || argv->empty()) {
    return fail(ErrorCode::kInvalidRequest, "argv must be a non-empty array of strings");
  }
  for (const auto& a : *argv) {
    if (!a.is_string()) {
      return fail(ErrorCode::kInvalidRequest, "argv must be a non-empty array of strings");
    }
    spec.argv.push_back(a.get<std::string>());
    if (has_nul(spec.argv.back())) {
      return fail(ErrorCode::kInvalidRequest, "argv strings must not contain NUL bytes");
    }
  }
  if (spec.argv[0].empty()) return fail(ErrorCode::kInvalidRequest, "argv[0] must not be empty");

  const auto env = req.find("env");
  if (env != req.end() && !env->is_null()) {
    if (!env->is_object()) return fail(ErrorCode::kInvalidRequest, "env must be an object");
    for (const auto& [k, v] : env->items()) {
      if (!v.is_string()) {
        return fail(ErrorCode::kInvalidRequest, "env value of \"" + k + "\" must be a string");
      }
      std::string val = v.get<std::string>();
      if (k.empty() || k.find('=') != std::string::npos || has_nul(k) || has_nul(val)) {
        return fail(ErrorCode::kInvalidRequest, "invalid env variable \"" + k + "\"");
      }
      spec.env.push_back(k + "=" + val);
    }
  }

  auto cwd = get_string(req, "cwd", std::string("/"));
  if (!cwd) return fail(cwd.error());
  if (cwd->empty() || has_nul(*cwd)) return fail(ErrorCode::kInvalidRequest, "invalid cwd");
  spec.cwd = std::move(*cwd);
  auto pipe_stdin = get_bool(req, "stdin", false);
  if (!pipe_stdin) return fail(pipe_stdin.error());
  spec.pipe_stdin = *pipe_stdin;
  return spec;
}

}  // namespace

// Larger account files are refused rather than read by the agent's one thread.
constexpr size_t kMaxAccountFile = 8u << 20;

// The sandbox's /etc/passwd or /etc/group. Code inside may have put anything there: a FIFO
// (O_NONBLOCK, and only regular files are read) must not block the agent, nor a huge file fill
// its memory. A missing file reads as empty: a numeric uid needs none.
Result<std::string> read_account_file(const char* path) {
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) {
    if (errno == ENOENT) return std::string();
    return fail(errno_error(ErrorCode::kInvalidRequest, std::string("user: open ") + path, errno));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return fail(errno_error(ErrorCode::kInternal, std::string("user: stat ") + path, errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(ErrorCode::kInvalidRequest, std::string("user: ") + path + " is not a regular file");
  }
  std::string text;
  char buf[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_error(ErrorCode::kInternal, std::string("user: read ") + path, errno));
    if (n == 0) return text;
    if (text.size() + static_cast<size_t>(n) > kMaxAccountFile) {
      return fail(ErrorCode::kInvalidRequest,
                  std::string("user: ") + path + " is larger than 8 MiB; the agent does not read it");
    }
    text.append(buf, static_cast<size_t>(n));
  }
}

namespace {

Result<ExecUser> load_user(const std::string& user) {
  auto passwd = read_account_file("/etc/passwd");
  if (!passwd) return fail(passwd.error());
  auto group = read_account_file("/etc/group");
  if (!group) return fail(group.error());
  return resolve_user(user, *passwd, *group);
}

Result<void> check_cwd(const std::string& cwd) {
  struct stat st;
  if (::stat(cwd.c_str(), &st) != 0) {
    return fail(errno_error(ErrorCode::kInvalidRequest, "cwd " + cwd, errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail(errno_error(ErrorCode::kInvalidRequest, "cwd " + cwd, ENOTDIR));
  }
  return {};
}

}  // namespace

Result<SpawnSpec> prepare_spawn(const Json& req) {
  auto spec = parse_spec(req);
  if (!spec) return fail(spec.error());
  auto user = get_string(req, "user", std::string());
  if (!user) return fail(user.error());
  if (!user->empty()) {
    auto u = load_user(*user);
    if (!u) return fail(u.error());
    add_user_env(spec->env, *u);
    spec->ids = SpawnIds{u->uid, u->gid, std::move(u->groups)};
  }
  if (auto r = check_cwd(spec->cwd); !r) return fail(r.error());
  return spec;
}

Result<std::unique_ptr<Stream>> ExecStream::start(Channel& channel, uint32_t id, const Json& req) {
  auto spec = prepare_spawn(req);
  if (!spec) return fail(spec.error());
  auto timeout_ms = get_u64(req, "timeout_ms", 0);
  if (!timeout_ms) return fail(timeout_ms.error());
  auto max_output = get_u64(req, "max_output", kDefaultMaxOutput);
  if (!max_output) return fail(max_output.error());
  auto announce = get_bool(req, "announce", false);
  if (!announce) return fail(announce.error());

  const auto started = Clock::now();
  auto child = spawn_child(*spec);
  if (!child) return fail(child.error());
  const pid_t pid = child->pid;
  auto stream = std::unique_ptr<Stream>(
      new ExecStream(channel, id, std::move(*child), started, *timeout_ms, *max_output));
  // The daemon that streams the output says "started" (with the pid) once this arrives.
  if (*announce) send_header(channel, id, Json{{"ok", true}, {"pid", pid}});
  return stream;
}

ExecStream::ExecStream(Channel& channel, uint32_t id, SpawnedChild child, Clock::time_point started,
                       uint64_t timeout_ms, uint64_t max_output)
    : Stream(channel, id),
      pid_(child.pid),
      stdin_fd_(std::move(child.stdin_fd)),
      max_output_(max_output),
      started_(started) {
  out_[0].fd = std::move(child.stdout_fd);
  out_[0].type = protocol::FrameType::kStdout;
  out_[1].fd = std::move(child.stderr_fd);
  out_[1].type = protocol::FrameType::kStderr;
  if (timeout_ms > 0) kill_at_ = started_ + std::chrono::milliseconds(timeout_ms);
}

void ExecStream::poll_fds(std::vector<pollfd>& out) const {
  if (finished_) return;
  for (const auto& o : out_) {
    if (wants_read(o)) out.push_back(pollfd{o.fd.get(), POLLIN, 0});
  }
  if (stdin_fd_ && !stdin_buf_.empty()) out.push_back(pollfd{stdin_fd_.get(), POLLOUT, 0});
}

void ExecStream::on_fd_ready(int fd, short revents) {
  if (finished_) return;
  for (auto& o : out_) {
    if (o.fd && o.fd.get() == fd) read_output(o);
  }
  if (stdin_fd_ && stdin_fd_.get() == fd) write_stdin();
  maybe_finish();
}

void ExecStream::read_output(Output& o) {
  // A frame as large as the channel takes (1 MiB, not kMaxData's 256 KiB): a command that
  // writes fast fills its 1 MiB pipe, and one read and one frame then carry all of it.
  static char buf[protocol::kMaxPayload];
  const bool fwd = forwarding(o);
  size_t want = sizeof(buf);
  if (fwd) want = static_cast<size_t>(std::min<uint64_t>({want, credit_, max_output_ - o.sent}));
  if (want == 0) return;
  const ssize_t n = ::read(o.fd.get(), buf, want);
  if (n > 0) {
    if (fwd) {
      send(o.type, std::string_view(buf, static_cast<size_t>(n)));
      credit_ -= static_cast<uint64_t>(n);
      o.sent += static_cast<uint64_t>(n);
    } else {
      o.truncated = true;
    }
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n < 0) log_line("exec %u: read pipe: %s", id_, std::strerror(errno));
  o.fd.reset();
}

void ExecStream::on_data(std::string_view data) {
  if (finished_) return;
  if (!stdin_fd_) {
    // Nowhere to put it (stdin off, closed, or the command stopped reading): drop it but
    // keep the daemon's window open so it is never stuck waiting for credit.
    grant(data.size());
    return;
  }
  stdin_buf_.append(data.data(), data.size());
  write_stdin();
}

void ExecStream::on_eof() {
  if (finished_) return;
  stdin_eof_ = true;
  if (stdin_buf_.empty()) close_stdin();
}

void ExecStream::write_stdin() {
  while (stdin_fd_ && !stdin_buf_.empty()) {
    const ssize_t n = ::write(stdin_fd_.get(), stdin_buf_.data(), stdin_buf_.size());
    if (n > 0) {
      stdin_buf_.erase(0, static_cast<size_t>(n));
      grant(static_cast<uint64_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EPIPE: the command closed its stdin. What is buffered can never be delivered.
    grant(stdin_buf_.size());
    stdin_buf_.clear();
    close_stdin();
    return;
  }
  if (stdin_eof_ && stdin_buf_.empty()) close_stdin();
}

void ExecStream::close_stdin() {
  stdin_fd_.reset();
  stdin_buf_.clear();
}

void ExecStream::on_window(uint32_t credit) {
  const bool was_blocked = credit_blocked();
  Stream::on_window(credit);
  // The grace period is for pipes held open by background processes, not for output the
  // daemon has not made room for yet: waiting for credit restarts it.
  if (exited_ && was_blocked) grace_until_ = Clock::now() + kPipeGrace;
}

bool ExecStream::credit_blocked() const {
  if (credit_ > 0) return false;
  for (const auto& o : out_) {
    if (o.fd && forwarding(o)) return true;
  }
  return false;
}

void ExecStream::on_cancel() {
  if (finished_) return;
  log_line("exec %u: cancelled, killing process group %d", id_, pid_);
  kill_group(pid_);
  kill_at_.reset();
}

void ExecStream::abandon() {
  kill_group(pid_);
  finished_ = true;
}

std::optional<Clock::time_point> ExecStream::deadline() const {
  if (finished_) return std::nullopt;
  if (!exited_) return kill_at_;
  if (credit_blocked()) return std::nullopt;
  return grace_until_;
}

void ExecStream::on_deadline(Clock::time_point now) {
  if (finished_) return;
  if (!exited_) {
    if (kill_at_ && now >= *kill_at_) {
      timed_out_ = true;
      kill_at_.reset();
      kill_group(pid_);
    }
    return;
  }
  if (grace_until_ && now >= *grace_until_) {
    for (auto& o : out_) o.fd.reset();
    maybe_finish();
  }
}

void ExecStream::on_child_exit(int status, Clock::time_point when) {
  exited_ = true;
  status_ = status;
  exited_at_ = when;
  grace_until_ = when + kPipeGrace;
  kill_at_.reset();
  maybe_finish();
}

void ExecStream::maybe_finish() {
  if (finished_ || !exited_ || out_[0].fd || out_[1].fd) return;
  close_stdin();
  int exit_code = 0;
  int signal = 0;
  if (WIFEXITED(status_)) {
    exit_code = WEXITSTATUS(status_);
  } else if (WIFSIGNALED(status_)) {
    signal = WTERMSIG(status_);
    exit_code = 128 + signal;
  }
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(exited_at_ - started_).count();
  const double duration_ms = std::round(static_cast<double>(ns) / 1000.0) / 1000.0;
  end(Json{{"ok", true},
           {"exit_code", exit_code},
           {"signal", signal},
           {"timed_out", timed_out_},
           {"duration_ms", duration_ms},
           {"stdout_bytes", out_[0].sent},
           {"stderr_bytes", out_[1].sent},
           {"stdout_truncated", out_[0].truncated},
           {"stderr_truncated", out_[1].truncated}});
}

}  // namespace b3os::agent
