#pragma once
// Background processes (docs/agent-protocol.md, "Processes"): commands the daemon starts
// detached with `proc_start`. The agent owns them: they outlive the stream that started them,
// the daemon's clients and a daemon restart, and fork and snapshot carry them with the agent's
// memory. Their output is always read (a process never blocks on a full pipe) into a bounded
// ring per process; readers come with an offset and are told what fell out of the ring.

#include <poll.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/output_ring.h"
#include "agent/spawn.h"
#include "agent/stream.h"
#include "agent/warm_shell.h"
#include "common/unique_fd.h"

namespace b3os::agent {

struct Process {
  explicit Process(size_t ring_bytes) : ring(ring_bytes) {}

  std::string id;  // "proc_N": N counts the processes this agent started
  pid_t pid = -1;
  std::vector<std::string> argv;
  std::string cwd;
  std::string user;
  std::string tag;
  int64_t started_unix_ms = 0;
  UniqueFd in;  // stdin, when asked for and still open
  std::string in_buf;
  bool in_closing = false;  // close once in_buf is written
  UniqueFd out[2];          // stdout, stderr (on a pty: its master, as stdout)
  UniqueFd pty;             // on a pty: its master, kept for resizes
  bool exited = false;
  int status = 0;
  int64_t exited_unix_ms = 0;
  Clock::time_point exited_at{};
  OutputRing ring;
  std::optional<SpawnSpec> login_shell;  // `/bin/bash -l -c CMD`: its spec, for the warm shell

  /// Its output is complete: it exited and its pipes are at EOF, or grace passed since (a child
  /// it left behind may hold them; what that child writes still reaches the ring).
  bool output_done(Clock::time_point now) const;
  int exit_code() const;
  int signal() const;
  Json describe() const;
};

class ProcessTable {
 public:
  /// At most this many processes are kept; an exited one is forgotten to make room.
  static constexpr size_t kMaxProcesses = 256;
  /// Largest and default ring per process.
  static constexpr uint64_t kMaxRingBytes = 64ull << 20;
  static constexpr uint64_t kDefaultRingBytes = 1ull << 20;
  /// Stdin the agent holds for a process that does not read it.
  static constexpr size_t kMaxStdinBuffered = 4u << 20;

  /// proc_start: {"argv","env","cwd","user","stdin","ring_bytes","tag"} -> {"ok","process"}.
  Result<Json> start(const Json& req);
  /// proc_list, proc_get, proc_signal, proc_forget: the END payload.
  Json run_op(const std::string& op, const Json& req);
  /// By id ("proc_3") or by pid ("412"); nullptr when unknown.
  Process* find(const std::string& key);

  /// Appends stdin bytes (`eof`: close it once written); conflict when its stdin is closed
  /// or was never opened, capacity when too much waits unread.
  Result<void> write_stdin(Process& p, std::string_view bytes, bool eof);

  void poll_fds(std::vector<pollfd>& out) const;
  /// Handles the ready fds among `fds` (the ones poll_fds added).
  void on_poll(const pollfd* fds, size_t n);
  /// A reaped child; true when it was one of the table's.
  bool on_child_exit(pid_t pid, int status, Clock::time_point now);
  size_t size() const { return procs_.size(); }
  /// How many have not exited.
  size_t running() const;
  WarmShell& warm_shell() { return warm_; }
  const WarmShell& warm_shell() const { return warm_; }

 private:
  void read_output(Process& p, int which);
  void write_in(Process& p);
  Result<void> make_room();

  uint64_t next_seq_ = 1;
  std::map<uint64_t, std::unique_ptr<Process>> procs_;  // by seq: oldest first
  WarmShell warm_;
};

/// proc_output {"id","since","follow"}: HEADER {"start","end","from","dropped"}, then STDOUT and
/// STDERR frames in offset order (a HEADER {"gap_from","gap_to"} where the ring dropped bytes
/// the reader had not taken), then END {"ok","next","running","exit_code","signal"}; with
/// `follow` it waits for more until the process's output is done.
class ProcOutputStream : public Stream {
 public:
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, ProcessTable& table, const Json& req);
  bool wants_pump() const override;
  void pump() override;
  void on_cancel() override { finished_ = true; }
  std::optional<Clock::time_point> deadline() const override;
  void on_deadline(Clock::time_point) override {}

 private:
  ProcOutputStream(Channel& channel, uint32_t id, ProcessTable& table, std::string proc, uint64_t next, bool follow)
      : Stream(channel, id), table_(table), proc_(std::move(proc)), next_(next), follow_(follow) {}
  void finish(const Process* p);

  ProcessTable& table_;
  std::string proc_;
  uint64_t next_;
  bool follow_;
};

/// proc_stdin {"id","eof"}: DATA frames for the process's stdin, then EOF; END {"ok","buffered"}.
class ProcStdinStream : public Stream {
 public:
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, ProcessTable& table, const Json& req);
  void on_data(std::string_view data) override;
  void on_eof() override;
  void on_cancel() override { finished_ = true; }

 private:
  ProcStdinStream(Channel& channel, uint32_t id, ProcessTable& table, std::string proc, bool eof)
      : Stream(channel, id), table_(table), proc_(std::move(proc)), eof_(eof) {}
  ProcessTable& table_;
  std::string proc_;
  bool eof_;
  std::string buf_;
};

/// proc_wait {"id","timeout_ms"}: END {"ok","process"} once it exited or the time passed.
class ProcWaitStream : public Stream {
 public:
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, ProcessTable& table, const Json& req);
  bool wants_pump() const override;
  void pump() override;
  void on_cancel() override { finished_ = true; }
  std::optional<Clock::time_point> deadline() const override { return until_; }
  void on_deadline(Clock::time_point now) override;

 private:
  ProcWaitStream(Channel& channel, uint32_t id, ProcessTable& table, std::string proc, Clock::time_point until)
      : Stream(channel, id), table_(table), proc_(std::move(proc)), until_(until) {}
  ProcessTable& table_;
  std::string proc_;
  Clock::time_point until_;
};

}  // namespace b3os::agent
