#pragma once
// Agent: the event loop of b3os-agent, PID 1 of a sandbox. One thread polls the channel, the
// exec pipes, a signalfd for SIGCHLD and the HTTP relay's sockets, and runs timers; nothing in
// it ever blocks.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "agent/channel.h"
#include "agent/http_relay.h"
#include "agent/processes.h"
#include "agent/stream.h"
#include "common/unique_fd.h"

namespace b3os::agent {

class Agent {
 public:
  /// Terminals a sandbox may have open at once.
  static constexpr size_t kMaxTerminals = 64;
  /// File watches a sandbox may have open at once (each holds an inotify instance).
  static constexpr size_t kMaxWatchStreams = 64;

  /// `in_fd`/`out_fd` are the channel (nonblocking); `signal_fd` a signalfd for SIGCHLD.
  Agent(int in_fd, int out_fd, UniqueFd signal_fd);

  /// Sends HELLO and serves the channel; returns only on a fatal poll error.
  int run();

 private:
  void run_once();
  int poll_timeout_ms(Clock::time_point now) const;
  Clock::time_point last_busy_ = Clock::now();  // the end of the last turn that did something
  void handle_frame(protocol::Frame& f);
  void handle_control(protocol::Frame& f);
  void open_stream(uint32_t id, std::string_view payload);
  void drain_signals();
  void reap_children();
  void drop_all_streams(const char* why);
  /// True when nothing but the agent (and waiting login shells) is alive and no stream or relay connection is open.
  bool idle() const;
  /// True when PID 1 has children and all are among `pids` (/proc's list of its children).
  static bool children_among(const std::vector<pid_t>& pids);
  /// Sends IDLE when the idle state changed since the last report (only once asked).
  void report_idle();

  Channel channel_;
  UniqueFd signal_fd_;
  // Streams the daemon opened.
  std::map<uint32_t, std::unique_ptr<Stream>> streams_;
  // Background processes (proc_* ops): not streams, they outlive them.
  ProcessTable procs_;
  // Streams the agent opens: the in-sandbox HTTP relay.
  HttpRelay relay_{channel_};
  std::vector<pollfd> pfds_;
  std::vector<Stream*> owners_;
  // Idle reports (docs/agent-protocol.md): on once the daemon sent OPEN {"op":"idle_reports"},
  // off again at RESYNC (the daemon that asked is gone; a new one asks again).
  bool idle_reports_ = false;
  std::optional<bool> reported_idle_;
  bool reported_held_ = false;
  /// Terminals (pty streams) open now.
  size_t open_terminals() const;
  /// File watches open now.
  size_t open_watches() const;
};

}  // namespace b3os::agent
