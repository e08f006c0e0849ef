#include "agent/agent.h"

#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "agent/exec_stream.h"
#include "agent/file_streams.h"
#include "agent/fs_ops.h"
#include "agent/identity.h"
#include "agent/log.h"
#include "agent/port_stream.h"
#include "agent/pty_stream.h"
#include "agent/watch_stream.h"

namespace b3os::agent {

using protocol::FrameType;

Agent::Agent(int in_fd, int out_fd, UniqueFd signal_fd)
    : channel_(in_fd, out_fd), signal_fd_(std::move(signal_fd)) {}

int Agent::run() {
  relay_.listen();
  channel_.send(FrameType::kHello, 0, hello_payload());
  channel_.flush();
  for (;;) {
    try {
      run_once();
    } catch (const std::exception& e) {
      // Nothing may take PID 1 down: the sandbox would die with it.
      log_line("event loop: unexpected exception: %s", e.what());
    }
  }
}

int Agent::poll_timeout_ms(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  for (const auto& [id, s] : streams_) {
    if (s->finished()) continue;
    if (s->wants_pump()) return 0;
    const auto d = s->deadline();
    if (d && (!next || *d < *next)) next = d;
  }
  const auto rd = relay_.deadline();
  if (rd && (!next || *rd < *next)) next = rd;
  if (!next) return -1;
  if (*next <= now) return 0;
  // Round up so that the loop does not wake a little early and spin until the deadline.
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(*next - now).count();
  return static_cast<int>(std::min<int64_t>((us + 999) / 1000, 60000));
}

void Agent::run_once() {
  pfds_.clear();
  owners_.clear();
  // Background processes' pipes first: what they read this turn is pumped to followers below.
  procs_.poll_fds(pfds_);
  const size_t n_proc_fds = pfds_.size();
  owners_.resize(n_proc_fds, nullptr);
  for (const auto& [id, s] : streams_) {
    s->poll_fds(pfds_);
    owners_.resize(pfds_.size(), s.get());
  }
  const size_t n_stream_fds = pfds_.size();
  relay_.poll_fds(pfds_);
  const size_t n_relay_fds = pfds_.size() - n_stream_fds;
  const size_t sig_idx = pfds_.size();
  pfds_.push_back(pollfd{signal_fd_.get(), POLLIN, 0});
  size_t in_idx = SIZE_MAX;
  if (channel_.readable()) {
    in_idx = pfds_.size();
    pfds_.push_back(pollfd{channel_.in_fd(), POLLIN, 0});
  }
  if (channel_.wants_write()) pfds_.push_back(pollfd{channel_.out_fd(), POLLOUT, 0});

  // Login shells to start ahead (warm_shell.h) wait until the agent has had nothing to do for a
  // while (WarmShell::quiet): a spawn holds this thread ~10 ms and takes the sandbox's CPU for
  // ~40 ms more, and a client that sends its next command straight after the last one's end
  // should find the agent free, not busy with a shell it will not have time to use (measured:
  // with 5 ms for the first shell, back-to-back commands were 3-6 ms slower).
  const bool warm_pending = procs_.warm_shell().pending();
  int timeout = poll_timeout_ms(Clock::now());
  const bool work_due = timeout == 0;  // a stream to pump or a deadline passed: not quiet
  if (warm_pending && !work_due) {
    const auto quiet_for = Clock::now() - last_busy_;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(procs_.warm_shell().quiet() - quiet_for);
    const int left_ms = static_cast<int>(std::max<int64_t>(left.count(), 0)) + 1;
    if (timeout < 0 || timeout > left_ms) timeout = left_ms;
  }
  const int r = ::poll(pfds_.data(), pfds_.size(), timeout);
  // Quiet is counted from the end of the last turn that did something (set at the end below).
  const bool quiet_turn = r == 0 && !work_due;
  if (quiet_turn && warm_pending && Clock::now() - last_busy_ >= procs_.warm_shell().quiet()) {
    procs_.warm_shell().start_pending();
    last_busy_ = Clock::now();  // the next one waits for quiet of its own
  }
  if (r < 0 && errno != EINTR) {
    log_line("poll: %s", std::strerror(errno));
    ::usleep(10000);
    return;
  }
  const auto now = Clock::now();

  if (r > 0) procs_.on_poll(pfds_.data(), n_proc_fds);
  // Streams first: a RESYNC read below may destroy them, and owners_ points into them.
  for (size_t i = n_proc_fds; r > 0 && i < n_stream_fds; ++i) {
    if (pfds_[i].revents != 0 && !owners_[i]->finished()) {
      owners_[i]->on_fd_ready(pfds_[i].fd, pfds_[i].revents);
    }
  }
  for (const auto& [id, s] : streams_) {
    if (!s->finished() && s->wants_pump()) s->pump();
    const auto d = s->deadline();
    if (!s->finished() && d && *d <= now) s->on_deadline(now);
  }
  if (r > 0) relay_.on_poll(pfds_.data() + n_stream_fds, n_relay_fds);
  if (const auto d = relay_.deadline(); d && *d <= now) relay_.on_deadline(now);
  if (r > 0 && pfds_[sig_idx].revents != 0) drain_signals();

  if (in_idx != SIZE_MAX && pfds_[in_idx].revents != 0) {
    channel_.read_available();
    while (auto f = channel_.next_frame()) handle_frame(*f);
    if (!channel_.readable()) drop_all_streams("channel closed");
  }
  channel_.flush();

  for (auto it = streams_.begin(); it != streams_.end();) {
    it = it->second->finished() ? streams_.erase(it) : std::next(it);
  }
  relay_.sweep();
  report_idle();
  if (!quiet_turn) last_busy_ = Clock::now();
}

bool Agent::idle() const {
  if (!streams_.empty() || !relay_.idle()) return false;
  // Every process of the sandbox descends from PID 1 and orphans are re-parented to it, so
  // "no child" means nothing else is alive. WNOWAIT: the reaper in drain_signals reaps.
  siginfo_t si{};
  if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD) return true;
  // The login shells waiting for a command (warm_shell.h) do not make the sandbox busy: idle
  // when PID 1's children are all among them.
  // A process of the table running is a child besides the shells: no need to read /proc.
  const std::vector<pid_t> waiting = procs_.warm_shell().waiting();
  return !waiting.empty() && procs_.running() == 0 && children_among(waiting);
}

bool Agent::children_among(const std::vector<pid_t>& pids) {
  UniqueFd fd(::open("/proc/self/task/1/children", O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  // The list is as long as the children are many; more than it holds is more than the shells.
  char buf[256];
  size_t len = 0;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf + len, sizeof(buf) - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    len += static_cast<size_t>(n);
    if (len == sizeof(buf) - 1) return false;
  }
  buf[len] = '\0';
  std::string_view rest(buf, len);
  bool any = false;
  while (!rest.empty()) {
    const size_t sp = rest.find(' ');
    const std::string_view tok = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    if (tok.empty()) continue;
    pid_t pid = 0;
    for (char c : tok) {
      if (c < '0' || c > '9') return false;
      pid = pid * 10 + (c - '0');
    }
    if (std::find(pids.begin(), pids.end(), pid) == pids.end()) return false;
    any = true;
  }
  return any;
}

void Agent::report_idle() {
  if (!idle_reports_) return;
  const bool now_idle = idle();
  // Held: a background process runs (a terminal's shell is one too, kept by its stream).
  const bool now_held = procs_.running() > 0 || open_terminals() > 0 || open_watches() > 0;
  if (reported_idle_ == now_idle && reported_held_ == now_held) return;
  reported_idle_ = now_idle;
  reported_held_ = now_held;
  channel_.send(FrameType::kIdle, 0, dump_json(Json{{"idle", now_idle}, {"held", now_held}}));
  channel_.flush();
}

size_t Agent::open_terminals() const {
  size_t n = 0;
  for (const auto& [id, s] : streams_) n += !s->finished() && s->is_terminal();
  return n;
}

size_t Agent::open_watches() const {
  size_t n = 0;
  for (const auto& [id, s] : streams_) n += !s->finished() && s->is_watch();
  return n;
}

void Agent::handle_frame(protocol::Frame& f) {
  if (f.stream == 0) {
    handle_control(f);
    return;
  }
  if (HttpRelay::is_agent_stream(f.stream)) {
    // The agent opened these (HEADER, DATA, END, CANCEL and WINDOW come back on them); the
    // daemon never opens one.
    if (f.type == FrameType::kOpen) {
      log_line("OPEN of stream %#x, an id of the agent's own range; ignored", f.stream);
      return;
    }
    relay_.on_frame(f);
    return;
  }
  if (f.type == FrameType::kOpen) {
    if (streams_.count(f.stream) != 0) {
      log_line("OPEN of stream %u which is already open; ignored", f.stream);
      return;
    }
    open_stream(f.stream, f.payload);
    return;
  }
  const auto it = streams_.find(f.stream);
  // Frames for a stream that ended (or never existed) are expected after END or RESYNC.
  if (it == streams_.end() || it->second->finished()) return;
  Stream& s = *it->second;
  switch (f.type) {
    case FrameType::kData:
      s.on_data(f.payload);
      break;
    case FrameType::kEof:
      s.on_eof();
      break;
    case FrameType::kWindow:
      if (auto n = protocol::decode_u32(f.payload)) s.on_window(*n);
      break;
    case FrameType::kCancel:
      s.on_cancel();
      break;
    case FrameType::kHeader:
      s.on_header(f.payload);
      break;
    default:
      log_line("stream %u: unexpected frame type 0x%02x; ignored", f.stream,
               static_cast<unsigned>(f.type));
      break;
  }
}

void Agent::handle_control(protocol::Frame& f) {
  switch (f.type) {
    case FrameType::kPing:
      channel_.send(FrameType::kPong, 0, f.payload);
      break;
    case FrameType::kIdentity:
      // A new identity (a fork, a restore): a login shell waiting has the old one's environment
      // and would only be passed over, so it ends now.
      procs_.warm_shell().drop();
      channel_.send(FrameType::kIdentityAck, 0, identity_ack_payload(apply_identity(f.payload)));
      break;
    case FrameType::kResync:
      drop_all_streams("RESYNC");
      idle_reports_ = false;
      reported_idle_.reset();
      channel_.send(FrameType::kResyncAck, 0, f.payload);
      break;
    case FrameType::kPong:
      break;
    default:
      log_line("channel: unexpected control frame type 0x%02x; ignored",
               static_cast<unsigned>(f.type));
      break;
  }
}

void Agent::open_stream(uint32_t id, std::string_view payload) {
  try {
    auto req = parse_request(payload);
    if (!req) {
      send_end_error(channel_, id, req.error());
      return;
    }
    auto op = get_string(*req, "op");
    if (!op) {
      send_end_error(channel_, id, op.error());
      return;
    }
    Result<std::unique_ptr<Stream>> s = nullptr;
    if (*op == "exec") {
      s = ExecStream::start(channel_, id, *req);
    } else if (*op == "file_write") {
      s = FileWriteStream::open(channel_, id, *req);
    } else if (*op == "file_read") {
      s = FileReadStream::open(channel_, id, *req);
    } else if (*op == "port_connect") {
      size_t ports = 0;
      for (const auto& [sid, st] : streams_) ports += dynamic_cast<const PortStream*>(st.get()) != nullptr;
      if (ports >= kMaxPortStreams) {
        send_end_error(channel_, id, Error{ErrorCode::kCapacityUnavailable,
                                           "the sandbox has " + std::to_string(kMaxPortStreams) +
                                               " port connections open; retry shortly"});
        return;
      }
      s = PortStream::open(channel_, id, *req);
    } else if (*op == "pty") {
      if (open_terminals() >= kMaxTerminals) {
        send_end_error(channel_, id, Error{ErrorCode::kQuotaExceeded,
                                           "the sandbox has " + std::to_string(kMaxTerminals) +
                                               " terminals open; close one first"});
        return;
      }
      s = PtyStream::start(channel_, id, *req);
    } else if (*op == "watch") {
      if (open_watches() >= kMaxWatchStreams) {
        send_end_error(channel_, id, Error{ErrorCode::kQuotaExceeded,
                                           "the sandbox has " + std::to_string(kMaxWatchStreams) +
                                               " file watches open; close one first"});
        return;
      }
      s = WatchStream::open(channel_, id, *req);
    } else if (*op == "proc_start") {
      auto started = procs_.start(*req);
      channel_.send(FrameType::kEnd, id, dump_json(started ? *started : error_json(started.error())));
      return;
    } else if (*op == "proc_list" || *op == "proc_get" || *op == "proc_signal" || *op == "proc_forget" ||
               *op == "proc_resize") {
      channel_.send(FrameType::kEnd, id, dump_json(procs_.run_op(*op, *req)));
      return;
    } else if (*op == "proc_output") {
      s = ProcOutputStream::open(channel_, id, procs_, *req);
    } else if (*op == "proc_stdin") {
      s = ProcStdinStream::open(channel_, id, procs_, *req);
    } else if (*op == "proc_wait") {
      s = ProcWaitStream::open(channel_, id, procs_, *req);
    } else if (*op == "list" || *op == "stat" || *op == "remove" || *op == "mkdir" || *op == "rename") {
      channel_.send(FrameType::kEnd, id, dump_json(run_fs_op(*op, *req)));
      return;
    } else if (*op == "idle_reports") {
      // From now on IDLE frames say when the sandbox becomes idle and when it stops being
      // idle; the first (the state now) follows this END at the end of the loop turn.
      channel_.send(FrameType::kEnd, id, R"({"ok":true})");
      idle_reports_ = true;
      reported_idle_.reset();
      return;
    } else {
      send_end_error(channel_, id, Error{ErrorCode::kInvalidRequest, "unknown op \"" + *op + "\""});
      return;
    }
    if (!s) {
      send_end_error(channel_, id, s.error());
      return;
    }
    streams_.emplace(id, std::move(*s));
  } catch (const std::exception& e) {
    log_line("stream %u: OPEN failed: %s", id, e.what());
    send_end_error(channel_, id, Error{ErrorCode::kInternal, std::string("agent: ") + e.what()});
  }
}

void Agent::drain_signals() {
  signalfd_siginfo si;
  while (::read(signal_fd_.get(), &si, sizeof(si)) == static_cast<ssize_t>(sizeof(si))) {
  }
  reap_children();
}

void Agent::reap_children() {
  const auto now = Clock::now();
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    // Orphans re-parented to PID 1 are reaped here too; only exec leaders have a stream.
    if (procs_.on_child_exit(pid, status, now)) continue;
    for (const auto& [id, s] : streams_) {
      if (s->child_pid() == pid) {
        s->on_child_exit(status, now);
        break;
      }
    }
  }
}

void Agent::drop_all_streams(const char* why) {
  if (!streams_.empty()) log_line("%s: dropping %zu streams", why, streams_.size());
  for (auto& [id, s] : streams_) s->abandon();
  streams_.clear();
  relay_.drop_all_streams(why);
}

}  // namespace b3os::agent
