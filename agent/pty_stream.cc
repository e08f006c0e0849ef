#include "agent/pty_stream.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/exec_stream.h"
#include "agent/log.h"
#include "agent/pty.h"

namespace b3os::agent {

namespace {

// After the shell exits, what it left behind may hold the terminal; its output counts as done
// this long after (then the master closes, and they get SIGHUP).
constexpr auto kExitGrace = std::chrono::milliseconds(100);

}  // namespace

Result<std::unique_ptr<Stream>> PtyStream::start(Channel& channel, uint32_t id, const Json& req) {
  auto spec = prepare_spawn(req);
  if (!spec) return fail(spec.error());
  auto rows = get_u64(req, "rows", 24);
  if (!rows) return fail(rows.error());
  auto cols = get_u64(req, "cols", 80);
  if (!cols) return fail(cols.error());

  auto pty = open_pty(*rows, *cols, spec->ids ? std::optional<uid_t>(spec->ids->uid) : std::nullopt);
  if (!pty) return fail(pty.error());
  UniqueFd master = std::move(pty->master);
  UniqueFd slave = std::move(pty->slave);

  spec->tty = slave.get();
  auto child = spawn_child(*spec);
  if (!child) return fail(child.error());
  slave.reset();  // the shell holds it now
  const int fl = ::fcntl(master.get(), F_GETFL);
  if (fl >= 0) ::fcntl(master.get(), F_SETFL, fl | O_NONBLOCK);
  const pid_t pid = child->pid;
  auto s = std::unique_ptr<Stream>(new PtyStream(channel, id, std::move(master), pid));
  send_header(channel, id, Json{{"ok", true}, {"pid", pid}});
  log_line("pty %u: %s started, pid %d", id, spec->argv[0].c_str(), pid);
  return s;
}

PtyStream::PtyStream(Channel& channel, uint32_t id, UniqueFd master, pid_t pid)
    : Stream(channel, id), master_(std::move(master)), pid_(pid) {}

PtyStream::~PtyStream() = default;

void PtyStream::poll_fds(std::vector<pollfd>& out) const {
  if (finished_ || !master_) return;
  short ev = 0;
  if (credit_ > 0) ev |= POLLIN;
  if (!in_buf_.empty()) ev |= POLLOUT;
  if (ev) out.push_back(pollfd{master_.get(), ev, 0});
}

void PtyStream::on_fd_ready(int fd, short revents) {
  if (finished_ || !master_ || fd != master_.get()) return;
  if (revents & POLLOUT) write_input();
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    static char buf[protocol::kMaxData];
    const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof buf, credit_));
    if (want == 0) return;
    const ssize_t n = ::read(master_.get(), buf, want);
    if (n > 0) {
      send(protocol::FrameType::kStdout, std::string_view(buf, static_cast<size_t>(n)));
      credit_ -= static_cast<uint64_t>(n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      // EIO: every slave fd closed (the shell and all it started are gone).
      master_.reset();
      maybe_finish();
    }
  }
}

void PtyStream::on_data(std::string_view data) {
  if (finished_) return;
  if (!master_) {
    grant(data.size());  // nowhere to type: keep the daemon's window open
    return;
  }
  in_buf_.append(data);
  write_input();
}

void PtyStream::write_input() {
  while (master_ && !in_buf_.empty()) {
    const ssize_t n = ::write(master_.get(), in_buf_.data(), in_buf_.size());
    if (n > 0) {
      in_buf_.erase(0, static_cast<size_t>(n));
      grant(static_cast<uint64_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    grant(in_buf_.size());
    in_buf_.clear();
    return;
  }
}

void PtyStream::on_header(std::string_view payload) {
  if (finished_ || !master_) return;
  auto j = parse_request(payload);
  if (!j) return;
  auto rows = get_u64(*j, "rows", 0);
  auto cols = get_u64(*j, "cols", 0);
  if (!rows || !cols) return;
  // TIOCSWINSZ sends the foreground process group SIGWINCH.
  if (auto r = set_pty_size(master_.get(), *rows, *cols); !r) log_line("pty %u: resize: %s", id_, r.error().message.c_str());
}

void PtyStream::on_window(uint32_t credit) {
  const bool blocked = credit_ == 0;
  Stream::on_window(credit);
  if (exited_ && blocked) grace_until_ = Clock::now() + kExitGrace;
}

void PtyStream::on_cancel() {
  if (finished_ || hangup_at_) return;
  // As a terminal that was closed: the whole session (the shell and its jobs, each in a group
  // of its own) gets SIGHUP, and what is left of it half a second later SIGKILL.
  signal_session(pid_, SIGHUP);
  hangup_at_ = Clock::now() + std::chrono::milliseconds(500);
}

void PtyStream::abandon() {
  signal_session(pid_, SIGKILL);
  if (!exited_) kill_group(pid_);
  master_.reset();
  finished_ = true;
}

std::optional<Clock::time_point> PtyStream::deadline() const {
  if (finished_) return std::nullopt;
  if (hangup_at_) return hangup_at_;
  // Waiting for the daemon's credit is not the grace's to end: what the shell printed last
  // is still owed.
  if (!exited_ || credit_ == 0) return std::nullopt;
  return grace_until_;
}

void PtyStream::on_deadline(Clock::time_point now) {
  if (finished_) return;
  if (hangup_at_ && now >= *hangup_at_) {
    hangup_at_.reset();
    signal_session(pid_, SIGKILL);
    if (!exited_) kill_group(pid_);
    return;
  }
  if (!grace_until_ || now < *grace_until_) return;
  master_.reset();
  maybe_finish();
}

void PtyStream::on_child_exit(int status, Clock::time_point when) {
  exited_ = true;
  status_ = status;
  grace_until_ = when + kExitGrace;
  maybe_finish();
}

void PtyStream::maybe_finish() {
  if (finished_ || !exited_ || master_) return;
  int exit_code = -1, signal = 0;
  if (WIFEXITED(status_)) exit_code = WEXITSTATUS(status_);
  if (WIFSIGNALED(status_)) {
    signal = WTERMSIG(status_);
    exit_code = 128 + signal;
  }
  end(Json{{"ok", true}, {"exit_code", exit_code}, {"signal", signal}});
}

}  // namespace b3os::agent
