#include "agent/processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "agent/exec_stream.h"
#include "agent/pty.h"
#include "agent/log.h"
#include "agent/spawn.h"

namespace b3os::agent {

namespace {

// After its exit a process's pipes may stay open in a child it left behind; its output counts
// as done this long after the exit (what the child writes later still reaches the ring).
constexpr auto kPipeGrace = std::chrono::milliseconds(100);
// One read of a process's pipe: the ring takes it whole.
constexpr size_t kReadChunk = 64 * 1024;
// Reads per pipe per loop turn: a process that writes without pause cannot keep the agent's
// one thread from everything else.
constexpr int kReadsPerTurn = 4;

int64_t unix_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

Error not_found(const std::string& key) {
  return Error{ErrorCode::kProcessNotFound, "no process \"" + key + "\" in this sandbox"};
}

}  // namespace

bool Process::output_done(Clock::time_point now) const {
  return exited && ((!out[0] && !out[1]) || now >= exited_at + kPipeGrace);
}

int Process::exit_code() const {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int Process::signal() const { return WIFSIGNALED(status) ? WTERMSIG(status) : 0; }

Json Process::describe() const {
  Json j = {{"id", id},
            {"pid", pid},
            {"argv", argv},
            {"cwd", cwd},
            {"user", user.empty() ? Json(nullptr) : Json(user)},
            {"tag", tag.empty() ? Json(nullptr) : Json(tag)},
            {"status", exited ? "exited" : "running"},
            {"started_at_ms", started_unix_ms},
            {"stdin_open", static_cast<bool>(in) && !in_closing},
            {"pty", static_cast<bool>(pty)},
            {"output", {{"start", ring.start()}, {"end", ring.end()}, {"ring_bytes", ring.cap()}}}};
  if (exited) {
    j["exit_code"] = exit_code();
    j["signal"] = signal();
    j["exited_at_ms"] = exited_unix_ms;
  } else {
    j["exit_code"] = nullptr;
  }
  return j;
}

size_t ProcessTable::running() const {
  size_t n = 0;
  for (const auto& [seq, p] : procs_) n += !p->exited;
  return n;
}

Result<void> ProcessTable::make_room() {
  if (procs_.size() < kMaxProcesses) return {};
  for (auto it = procs_.begin(); it != procs_.end(); ++it) {
    if (it->second->exited) {
      procs_.erase(it);
      return {};
    }
  }
  return fail(ErrorCode::kQuotaExceeded,
              "the sandbox has " + std::to_string(kMaxProcesses) + " background processes running; stop one first");
}

Result<Json> ProcessTable::start(const Json& req) {
  auto spec = prepare_spawn(req);
  if (!spec) return fail(spec.error());
  auto ring = get_u64(req, "ring_bytes", kDefaultRingBytes);
  if (!ring) return fail(ring.error());
  if (*ring < 4096 || *ring > kMaxRingBytes)
    return fail(ErrorCode::kInvalidRequest, "ring_bytes must be 4096 to " + std::to_string(kMaxRingBytes));
  auto user = get_string(req, "user", std::string());
  if (!user) return fail(user.error());
  auto tag = get_string(req, "tag", std::string());
  if (!tag) return fail(tag.error());
  // {"pty": {"rows", "cols"}}: the process runs on a terminal; what it prints is its stdout,
  // its stdin is what is typed, and it can be resized (proc_resize).
  std::optional<Pty> pty;
  if (req.contains("pty") && !req["pty"].is_null()) {
    const Json& size = req["pty"];
    if (!size.is_object()) return fail(ErrorCode::kInvalidRequest, "pty must be {\"rows\", \"cols\"}");
    auto rows = get_u64(size, "rows", 24);
    if (!rows) return fail(rows.error());
    auto cols = get_u64(size, "cols", 80);
    if (!cols) return fail(cols.error());
    auto opened = open_pty(*rows, *cols, spec->ids ? std::optional<uid_t>(spec->ids->uid) : std::nullopt);
    if (!opened) return fail(opened.error());
    pty = std::move(*opened);
    spec->tty = pty->slave.get();
    spec->pipe_stdin = false;  // the terminal is its stdin
  }
  if (auto r = make_room(); !r) return fail(r.error());
  const bool login_shell = !pty && WarmShell::fits(*spec);
  std::optional<SpawnedChild> warm = login_shell ? warm_.take(*spec) : std::nullopt;
  auto child = warm ? Result<SpawnedChild>(std::move(*warm)) : spawn_child(*spec);
  if (!child) return fail(child.error());
  const uint64_t seq = next_seq_++;
  auto p = std::make_unique<Process>(static_cast<size_t>(*ring));
  p->id = "proc_" + std::to_string(seq);
  p->pid = child->pid;
  p->argv = spec->argv;
  p->cwd = spec->cwd;
  p->user = *user;
  p->tag = *tag;
  p->started_unix_ms = unix_ms();
  if (login_shell) p->login_shell = std::move(*spec);
  p->in = std::move(child->stdin_fd);
  p->out[0] = std::move(child->stdout_fd);
  p->out[1] = std::move(child->stderr_fd);
  if (pty) {
    pty->slave.reset();  // the child holds it now
    const int fl = ::fcntl(pty->master.get(), F_GETFL);
    if (fl >= 0) ::fcntl(pty->master.get(), F_SETFL, fl | O_NONBLOCK);
    p->in = UniqueFd(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    p->out[0] = UniqueFd(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    p->pty = std::move(pty->master);
  }
  Json j = p->describe();
  log_line("process %s: started pid %d%s", p->id.c_str(), p->pid, warm ? " (warm shell)" : "");
  procs_.emplace(seq, std::move(p));
  return Json{{"ok", true}, {"process", j}};
}

Process* ProcessTable::find(const std::string& key) {
  const bool numeric = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), ::isdigit);
  // The newest first: a pid the kernel reused names the process that has it now.
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
    Process& p = *it->second;
    if (p.id == key || (numeric && std::to_string(p.pid) == key)) return &p;
  }
  return nullptr;
}

Json ProcessTable::run_op(const std::string& op, const Json& req) {
  if (op == "proc_list") {
    Json list = Json::array();
    for (const auto& [seq, p] : procs_) list.push_back(p->describe());
    return Json{{"ok", true}, {"processes", list}};
  }
  auto key = get_string(req, "id");
  if (!key) return error_json(key.error());
  Process* p = find(*key);
  if (!p) return error_json(not_found(*key));
  if (op == "proc_get") return Json{{"ok", true}, {"process", p->describe()}};
  if (op == "proc_signal") {
    auto sig = get_u64(req, "signal", SIGTERM);
    if (!sig) return error_json(sig.error());
    if (*sig < 1 || *sig > 64) return error_json(Error{ErrorCode::kInvalidRequest, "signal must be 1 to 64"});
    auto group = get_bool(req, "group", true);
    if (!group) return error_json(group.error());
    if (p->exited) return Json{{"ok", true}, {"delivered", false}, {"process", p->describe()}};
    // Its process group (the command and what it started), or the process alone.
    int rc = *group ? ::kill(-p->pid, static_cast<int>(*sig)) : -1;
    if (!*group || (rc != 0 && errno == ESRCH)) rc = ::kill(p->pid, static_cast<int>(*sig));
    if (rc != 0 && errno != ESRCH)
      return error_json(Error{ErrorCode::kInternal, std::string("kill: ") + std::strerror(errno), errno});
    return Json{{"ok", true}, {"delivered", rc == 0}, {"process", p->describe()}};
  }
  if (op == "proc_resize") {
    if (!p->pty) return error_json(Error{ErrorCode::kInvalidRequest, "process " + p->id + " does not run on a terminal"});
    auto rows = get_u64(req, "rows", 24);
    if (!rows) return error_json(rows.error());
    auto cols = get_u64(req, "cols", 80);
    if (!cols) return error_json(cols.error());
    if (auto r = set_pty_size(p->pty.get(), *rows, *cols); !r) return error_json(r.error());
    return Json{{"ok", true}, {"process", p->describe()}};
  }
  if (op == "proc_forget") {
    if (!p->exited) return error_json(Error{ErrorCode::kConflict, "process " + p->id + " is still running; signal it first"});
    for (auto it = procs_.begin(); it != procs_.end(); ++it)
      if (it->second.get() == p) {
        procs_.erase(it);
        break;
      }
    return Json{{"ok", true}};
  }
  return error_json(Error{ErrorCode::kInvalidRequest, "unknown op \"" + op + "\""});
}

Result<void> ProcessTable::write_stdin(Process& p, std::string_view bytes, bool eof) {
  if (!p.in || p.in_closing)
    return fail(ErrorCode::kConflict, "the stdin of process " + p.id + " is closed" +
                                          (p.exited ? " (it exited)" : ""));
  if (p.in_buf.size() + bytes.size() > kMaxStdinBuffered)
    return fail(ErrorCode::kConcurrencyLimited,
                "process " + p.id + " has not read the 4 MiB of stdin it was given; retry once it has");
  p.in_buf.append(bytes);
  if (eof) p.in_closing = true;
  write_in(p);
  return {};
}

void ProcessTable::write_in(Process& p) {
  while (p.in && !p.in_buf.empty()) {
    const ssize_t n = ::write(p.in.get(), p.in_buf.data(), p.in_buf.size());
    if (n > 0) {
      p.in_buf.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EPIPE: it closed its stdin; nothing buffered can be delivered.
    p.in_buf.clear();
    p.in.reset();
    return;
  }
  if (p.in && p.in_closing && p.in_buf.empty()) p.in.reset();
}

void ProcessTable::poll_fds(std::vector<pollfd>& out) const {
  for (const auto& [seq, p] : procs_) {
    for (const auto& fd : p->out)
      if (fd) out.push_back(pollfd{fd.get(), POLLIN, 0});
    if (p->in && !p->in_buf.empty()) out.push_back(pollfd{p->in.get(), POLLOUT, 0});
  }
}

void ProcessTable::on_poll(const pollfd* fds, size_t n) {
  size_t i = 0;
  // The same walk as poll_fds: nothing changes the table in between.
  for (auto& [seq, p] : procs_) {
    for (int which = 0; which < 2; ++which) {
      if (!p->out[which]) continue;
      if (i < n && fds[i].fd == p->out[which].get() && fds[i].revents != 0) read_output(*p, which);
      ++i;
    }
    if (p->in && !p->in_buf.empty()) {
      if (i < n && fds[i].fd == p->in.get() && fds[i].revents != 0) write_in(*p);
      ++i;
    }
  }
}

void ProcessTable::read_output(Process& p, int which) {
  static char buf[kReadChunk];
  for (int k = 0; k < kReadsPerTurn && p.out[which]; ++k) {
    const ssize_t n = ::read(p.out[which].get(), buf, sizeof buf);
    if (n > 0) {
      p.ring.append(which == 1, std::string_view(buf, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) < sizeof buf) return;
      continue;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    p.out[which].reset();  // EOF (or an error: nothing more will come)
  }
}

bool ProcessTable::on_child_exit(pid_t pid, int status, Clock::time_point now) {
  if (warm_.on_child_exit(pid)) return true;
  for (auto& [seq, p] : procs_) {
    if (p->pid != pid || p->exited) continue;
    p->exited = true;
    p->status = status;
    p->exited_at = now;
    p->exited_unix_ms = unix_ms();
    log_line("process %s: pid %d exited (%d)", p->id.c_str(), pid, p->exit_code());
    if (p->login_shell) warm_.command_ended(*p->login_shell);
    return true;
  }
  return false;
}

// ---- proc_output ----

Result<std::unique_ptr<Stream>> ProcOutputStream::open(Channel& channel, uint32_t id, ProcessTable& table,
                                                       const Json& req) {
  auto key = get_string(req, "id");
  if (!key) return fail(key.error());
  auto since = get_u64(req, "since", 0);
  if (!since) return fail(since.error());
  auto follow = get_bool(req, "follow", false);
  if (!follow) return fail(follow.error());
  Process* p = table.find(*key);
  if (!p) return fail(not_found(*key));
  const uint64_t from = std::max(*since, p->ring.start());
  if (*since > p->ring.end())
    return fail(ErrorCode::kInvalidRequest, "since " + std::to_string(*since) + " is past the output's end (" +
                                                std::to_string(p->ring.end()) + ")");
  auto s = std::unique_ptr<ProcOutputStream>(new ProcOutputStream(channel, id, table, p->id, from, *follow));
  s->send(protocol::FrameType::kHeader, dump_json(Json{{"ok", true},
                                                        {"start", p->ring.start()},
                                                        {"end", p->ring.end()},
                                                        {"from", from},
                                                        {"dropped", from - *since}}));
  return std::unique_ptr<Stream>(std::move(s));
}

bool ProcOutputStream::wants_pump() const {
  if (finished_) return false;
  Process* p = table_.find(proc_);
  if (!p) return true;  // forgotten: finish
  if (next_ < p->ring.end()) return credit_ > 0;
  return !follow_ || p->output_done(Clock::now());
}

std::optional<Clock::time_point> ProcOutputStream::deadline() const {
  if (finished_ || !follow_) return std::nullopt;
  Process* p = table_.find(proc_);
  if (p && p->exited && !p->output_done(Clock::now())) return p->exited_at + kPipeGrace;
  return std::nullopt;
}

void ProcOutputStream::pump() {
  Process* p = table_.find(proc_);
  if (!p) return finish(nullptr);
  if (next_ < p->ring.start()) {  // the reader fell behind what the ring keeps
    send(protocol::FrameType::kHeader,
         dump_json(Json{{"gap_from", next_}, {"gap_to", p->ring.start()}}));
    next_ = p->ring.start();
  }
  if (next_ < p->ring.end()) {
    auto piece = p->ring.read(next_, static_cast<size_t>(std::min<uint64_t>(credit_, protocol::kMaxData)));
    if (!piece) return;
    send(piece->is_stderr ? protocol::FrameType::kStderr : protocol::FrameType::kStdout, piece->bytes);
    credit_ -= piece->bytes.size();
    next_ += piece->bytes.size();
    return;
  }
  if (!follow_ || p->output_done(Clock::now())) finish(p);
}

void ProcOutputStream::finish(const Process* p) {
  if (!p) {
    end_error(not_found(proc_));
    return;
  }
  Json j = {{"ok", true}, {"next", next_}, {"running", !p->exited}};
  if (p->exited) {
    j["exit_code"] = p->exit_code();
    j["signal"] = p->signal();
  }
  end(j);
}

// ---- proc_stdin ----

Result<std::unique_ptr<Stream>> ProcStdinStream::open(Channel& channel, uint32_t id, ProcessTable& table,
                                                      const Json& req) {
  auto key = get_string(req, "id");
  if (!key) return fail(key.error());
  auto eof = get_bool(req, "eof", false);
  if (!eof) return fail(eof.error());
  Process* p = table.find(*key);
  if (!p) return fail(not_found(*key));
  if (!p->in || p->in_closing)
    return fail(ErrorCode::kConflict, "the stdin of process " + p->id + " is closed" +
                                          (p->exited ? " (it exited)" : ""));
  return std::unique_ptr<Stream>(new ProcStdinStream(channel, id, table, p->id, *eof));
}

void ProcStdinStream::on_data(std::string_view data) {
  if (finished_) return;
  // The daemon sends at most the 1 MiB a request may carry: the initial window covers it.
  if (buf_.size() + data.size() > ProcessTable::kMaxStdinBuffered) {
    end_error(Error{ErrorCode::kInvalidRequest, "stdin: more than 4 MiB in one request"});
    return;
  }
  buf_.append(data);
  grant(data.size());
}

void ProcStdinStream::on_eof() {
  if (finished_) return;
  Process* p = table_.find(proc_);
  if (!p) return end_error(not_found(proc_));
  const size_t n = buf_.size();
  if (auto r = table_.write_stdin(*p, buf_, eof_); !r) return end_error(r.error());
  end(Json{{"ok", true}, {"written", n}, {"process", p->describe()}});
}

// ---- proc_wait ----

Result<std::unique_ptr<Stream>> ProcWaitStream::open(Channel& channel, uint32_t id, ProcessTable& table,
                                                     const Json& req) {
  auto key = get_string(req, "id");
  if (!key) return fail(key.error());
  auto timeout_ms = get_u64(req, "timeout_ms", 0);
  if (!timeout_ms) return fail(timeout_ms.error());
  Process* p = table.find(*key);
  if (!p) return fail(not_found(*key));
  return std::unique_ptr<Stream>(new ProcWaitStream(
      channel, id, table, p->id, Clock::now() + std::chrono::milliseconds(std::min<uint64_t>(*timeout_ms, 3'600'000))));
}

bool ProcWaitStream::wants_pump() const {
  if (finished_) return false;
  Process* p = table_.find(proc_);
  return !p || p->exited;
}

void ProcWaitStream::pump() {
  Process* p = table_.find(proc_);
  if (!p) return end_error(not_found(proc_));
  end(Json{{"ok", true}, {"exited", p->exited}, {"process", p->describe()}});
}

void ProcWaitStream::on_deadline(Clock::time_point) {
  if (finished_) return;
  pump();
}

}  // namespace b3os::agent
