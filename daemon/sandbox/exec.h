#pragma once
// Exec: what runs in a sandbox and the files it holds, over its agent channel: commands,
// uploads and downloads, listings and removals.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/sandbox/lifecycle.h"

namespace b3os::sandbox {

/// The JSON of an agent's END or HEADER; an END {"ok":false} is its error (code and message).
Result<nlohmann::json> parse_agent_json(const protocol::Frame& f);

class Exec {
 public:
  Exec(const Config& cfg, Lifecycle& lifecycle) : cfg_(cfg), lifecycle_(lifecycle) {}

  /// Output of a command as it comes (stderr or not, the bytes); false stops it (the client
  /// that streams it went away or stopped reading).
  using OutputSink = std::function<bool(bool is_stderr, std::string_view bytes)>;
  /// The command started with this pid (in the sandbox); false stops it.
  using StartSink = std::function<bool(int pid)>;

  /// Runs a command. With `on_output` its output goes there as it comes and, for a
  /// `spec.stream`, is not kept in the result (nor cut at --max-exec-output).
  Result<ExecResult> exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                          const CancelCheck& cancelled, const OutputSink& on_output = {},
                          const StartSink& on_start = {});
  Result<nlohmann::json> write_file(const Principal& p, const std::string& id, const std::string& path,
                                    const ChunkSource& source, Timing& t);
  Result<void> read_file(const Principal& p, const std::string& id, const std::string& path, FileSink& sink, Timing& t);
  /// A page of a directory's entries: the names after `after` (byte order), at most `limit`;
  /// "next_cursor" names where the next page starts (null on the last).
  Result<nlohmann::json> list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t,
                                  const std::string& after = {}, int limit = 1000);
  /// One entry as list_dir shows it (a symlink itself, not what it points at).
  Result<nlohmann::json> stat_path(const Principal& p, const std::string& id, const std::string& path);
  /// Creates a directory and its missing parents: its entry, "created" false when it was one.
  Result<nlohmann::json> make_dir(const Principal& p, const std::string& id, const std::string& path);
  /// Renames `from` to `to` inside the sandbox: the entry of `to`.
  Result<nlohmann::json> move_path(const Principal& p, const std::string& id, const std::string& from,
                                   const std::string& to);
  Result<nlohmann::json> remove_path(const Principal& p, const std::string& id, const std::string& path,
                                     bool recursive, Timing& t);
  /// Runs a command in a live sandbox the caller holds (a template build's, which no project
  /// can reach), giving its output to `on_output` as it comes as well as in the result.
  Result<ExecResult> run_live(LiveSandbox& s, const ExecSpec& spec, const CancelCheck& cancelled,
                              const OutputSink& on_output, const StartSink& on_start = {});
  /// Round trip over a sandbox's agent channel (benchmarks).
  Result<double> ping(const Principal& p, const std::string& id);

  // ---- terminals (processes.cc; docs/api.md, "Terminal") ----
  /// A terminal open in a sandbox: its agent stream (DATA in, STDOUT out, HEADER resizes),
  /// holding the sandbox awake for as long as it lives.
  struct Terminal {
    std::shared_ptr<LiveSandbox> sandbox;
    Awake awake;
    std::shared_ptr<agentlink::Stream> stream;
    int pid = -1;
  };
  /// Starts `spec.cmd` (a login shell when empty) on a new terminal of `rows` x `cols`.
  Result<Terminal> open_terminal(const Principal& p, const std::string& id, const TerminalSpec& spec);

  // ---- background processes (processes.cc; docs/api.md, "Background processes") ----
  /// Starts a command detached: the process object ({"id","pid","status",...}).
  Result<nlohmann::json> start_process(const Principal& p, const std::string& id, const ProcessSpec& spec, Timing& t);
  Result<nlohmann::json> list_processes(const Principal& p, const std::string& id);
  /// `proc` is a process id ("proc_3") or a pid ("412").
  Result<nlohmann::json> get_process(const Principal& p, const std::string& id, const std::string& proc);
  Result<nlohmann::json> signal_process(const Principal& p, const std::string& id, const std::string& proc, int signal,
                                        bool group);
  /// A process started on a terminal gets a new window size (its program gets SIGWINCH).
  Result<nlohmann::json> resize_process(const Principal& p, const std::string& id, const std::string& proc, int rows,
                                        int cols);
  /// Forgets an exited process (its output with it); 409 while it runs.
  Result<nlohmann::json> forget_process(const Principal& p, const std::string& id, const std::string& proc);
  /// Writes to its stdin (and closes it after, with `eof`); 409 when its stdin is closed.
  Result<nlohmann::json> write_process_stdin(const Principal& p, const std::string& id, const std::string& proc,
                                             std::string_view data, bool eof);
  /// Waits up to `timeout_ms` for it to exit: {"exited", "process"}.
  Result<nlohmann::json> wait_process(const Principal& p, const std::string& id, const std::string& proc,
                                      int64_t timeout_ms, const CancelCheck& cancelled);
  /// Reading a process's output from an offset (offsets count stdout and stderr bytes together).
  struct OutputReader {
    /// Once, first: where the read starts ({"start","end","from","dropped"}).
    std::function<bool(const nlohmann::json& header)> begin;
    /// Bytes of stdout or stderr at `offset`, in order; false stops the read.
    std::function<bool(uint64_t offset, bool is_stderr, std::string_view bytes)> data;
    /// Bytes [from, to) fell out of the ring before this reader took them.
    std::function<bool(uint64_t from, uint64_t to)> gap;
    /// While following: the process said nothing for `quiet_every_ms` (a keep-alive is due);
    /// false stops the read.
    std::function<bool()> quiet;
    int64_t quiet_every_ms = 0;
    /// After each piece of data: true when this answer holds all it may (a read that is not a
    /// follow is bounded); the read ends there with {"next", "more": true}.
    std::function<bool()> full;
  };
  /// Reads from `since` to the end, or with `follow` until the process's output is done (or
  /// `max_ms` passed): {"next","running","exit_code","signal"}; {"next","more"} when the
  /// reader was `full` first.
  Result<nlohmann::json> process_output(const Principal& p, const std::string& id, const std::string& proc,
                                        uint64_t since, bool follow, int64_t max_ms, const OutputReader& reader,
                                        const CancelCheck& cancelled);

  // ---- file watches (watch.cc; docs/api.md, "Watching files") ----
  struct WatchReader {
    /// Once, first: what is watched ({"path","is_dir","recursive","watches","truncated"}).
    std::function<bool(const nlohmann::json& header)> begin;
    /// Events, as whole JSON lines, in order; false stops the watch.
    std::function<bool(std::string_view lines)> events;
    /// Nothing happened for a while (a keep-alive is due); false stops the watch.
    std::function<bool()> quiet;
  };
  /// Follows changes under `path` until it is removed ({"reason":"deleted"}), `max_ms` passed
  /// ({"reason":"timeout"}) or the reader stops.
  Result<nlohmann::json> watch_files(const Principal& p, const std::string& id, const std::string& path,
                                     bool recursive, int64_t max_ms, const WatchReader& reader,
                                     const CancelCheck& cancelled);

 private:
  Result<std::shared_ptr<agentlink::Stream>> open_stream(LiveSandbox& s, const nlohmann::json& request);
  /// The command with its template's defaults (workdir, user) where it gives none.
  ExecSpec with_defaults(LiveSandbox& s, const ExecSpec& spec);
  /// The complete environment of a command: the node's, the sandbox's env and secrets, its own.
  nlohmann::json command_env(LiveSandbox& s, const ExecSpec& spec);
  /// One request whose whole answer is the agent's END (list, remove).
  Result<nlohmann::json> call_agent(const Principal& p, const std::string& id, const nlohmann::json& request);

  const Config& cfg_;
  Lifecycle& lifecycle_;
};

}  // namespace b3os::sandbox
