#pragma once
// AgentChannel: the daemon's side of the framed, multiplexed channel to one sandbox's agent
// (docs/agent-protocol.md). A reader thread dispatches frames to streams; writers share a lock.

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"
#include "protocol/frame.h"

namespace b3os::agentlink {

class AgentChannel;

/// One request/response exchange on the channel (an exec, a file transfer, ...).
class Stream {
 public:
  Stream(std::shared_ptr<AgentChannel> ch, uint32_t id) : ch_(std::move(ch)), id_(id) {}
  ~Stream();

  uint32_t id() const { return id_; }
  /// Next frame the agent sent on this stream, waiting up to `deadline`. Fails when the
  /// channel closes or the deadline passes (code kInternal / message says which).
  Result<protocol::Frame> next(std::chrono::steady_clock::time_point deadline);
  /// Sends data bytes (chunked, waiting for credit). Fails if the stream ended or the channel closed.
  Result<void> send_data(std::string_view bytes, std::chrono::steady_clock::time_point deadline);
  /// Sends what the agent's credit allows of `bytes`, waiting (until `deadline`) only while
  /// nothing has gone yet: the bytes sent, 0 if the deadline passed first. Fails as send_data.
  Result<size_t> send_some(std::string_view bytes, std::chrono::steady_clock::time_point deadline);
  Result<void> send_eof();
  /// Tells the agent to abandon the stream (kills an exec's process group).
  void cancel();
  /// Grants the agent `n` more bytes of credit (call after consuming data frames).
  void grant(uint32_t n);

  // Streams the agent opened (the in-sandbox HTTP relay): the daemon answers with a HEADER,
  // data, then END; the agent may CANCEL (its client went away).
  /// True for a stream the agent opened.
  bool incoming() const { return (id_ & kAgentStreamBit) != 0; }
  Result<void> send_header(const nlohmann::json& header);
  /// Finishes an incoming stream (once; later calls do nothing).
  Result<void> send_end(const nlohmann::json& end);
  /// True once the agent cancelled the stream.
  bool cancelled();

  static constexpr uint32_t kAgentStreamBit = 0x80000000u;

 private:
  friend class AgentChannel;
  /// Queues a frame the agent sent; an empty string when it fits what the agent may send, else
  /// why it does not (the channel is then broken: the agent is not following the protocol).
  std::string deliver(protocol::Frame f);
  void add_credit(uint32_t n);
  void close(std::string reason);

  std::shared_ptr<AgentChannel> ch_;
  uint32_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<protocol::Frame> inbox_;
  int64_t credit_ = protocol::kInitialWindow;  // what we may still send
  int64_t recv_window_ = protocol::kInitialWindow;  // data bytes the agent may still send us
  size_t pending_other_ = 0;                   // frames in inbox_ that are not data
  // The queue position (entries ever queued, counted from the first) of the newest entry of
  // each data kind queued since the last frame that is not data, or kNoEntry.
  static constexpr uint64_t kNoEntry = ~uint64_t{0};
  std::array<uint64_t, 3> last_data_{kNoEntry, kNoEntry, kNoEntry};
  uint64_t popped_ = 0;  // entries taken from inbox_ so far
  bool ended_ = false;                         // END (or, incoming, CANCEL) received
  bool cancelled_ = false;                     // incoming: the agent sent CANCEL
  bool end_sent_ = false;                      // incoming: we sent END
  std::optional<std::string> closed_;          // channel gone
};

/// The channel to one agent. Thread-safe.
class AgentChannel : public std::enable_shared_from_this<AgentChannel> {
 public:
  /// Takes the daemon's end of the socketpair and starts the reader thread. `on_close` runs
  /// once, on the reader thread, when the channel reaches EOF or breaks.
  /// `incoming` runs for each stream the agent opens, on the reader thread (so it must hand
  /// the work to another thread at once); the stream's first frame is the OPEN. Without a
  /// handler the agent gets END {"ok":false} straight away.
  /// `on_idle` runs, on the reader thread, for each IDLE report of the agent (true: nothing
  /// but the agent is alive and no stream is open; false: no longer; `held`: a background
  /// process runs or a terminal is open). It must not wait on the channel.
  using IncomingHandler = std::function<void(std::shared_ptr<Stream>)>;
  using IdleHandler = std::function<void(bool idle, bool held)>;
  static std::shared_ptr<AgentChannel> start(UniqueFd fd, std::string name,
                                             std::function<void(const std::string&)> on_close,
                                             IncomingHandler incoming = nullptr, IdleHandler on_idle = nullptr);
  ~AgentChannel();

  /// Waits for the agent's HELLO (after a boot).
  Result<nlohmann::json> wait_hello(std::chrono::milliseconds timeout);
  /// After a daemon restart: resynchronises the stream (docs/agent-protocol.md).
  /// `cut_frame`: the last writer may have died mid-frame (a b3osd killed, not a restore of a
  /// quiesced checkpoint): a frame's worth of filler goes first, so that an agent still
  /// waiting for that frame's payload finishes it and then finds the RESYNC.
  Result<void> resync(std::chrono::milliseconds timeout, bool cut_frame = false);
  /// Sends IDENTITY and waits for its acknowledgement. With `idle_reports`, the request for
  /// IDLE reports (as request_idle_reports) is written right behind it and its answer stored
  /// there: the agent takes frames in turn, so both cost one round trip, not two (a fork's and
  /// a claim's critical path). The identity's failure is the result; the request's is stored.
  Result<void> send_identity(const nlohmann::json& identity, std::chrono::milliseconds timeout,
                             Result<bool>* idle_reports = nullptr);
  /// Asks the agent for IDLE reports (OPEN {"op":"idle_reports"}); after a boot, a restore
  /// and every resync (RESYNC turns them off). True when the agent will report; false when it
  /// is an agent that does not know them (an older one, in a checkpoint image): it is then
  /// never reported idle. An error only when the channel failed.
  Result<bool> request_idle_reports(std::chrono::milliseconds timeout);
  /// Round trip of a PING (for health checks and the channel benchmark).
  Result<double> ping(std::chrono::milliseconds timeout);

  /// Liveness without waiting (for a watchdog): when the agent has sent nothing for `quiet`
  /// and no probe is out, sends a PING (giving up at once if a writer holds the channel).
  /// Returns how long the probe that is out has gone unanswered (0 when none is out); any
  /// frame from the agent answers it.
  std::chrono::milliseconds probe(std::chrono::milliseconds quiet);
  /// Forgets the probe that is out: the agent could not answer it (paused, frozen).
  void reset_probe();

  /// Opens a stream with `request` as the OPEN payload.
  Result<std::shared_ptr<Stream>> open(const nlohmann::json& request);


  /// Holds every writer back (no frame half-written) for as long as the lock lives; used
  /// around a checkpoint so the image never holds a torn frame from the daemon. Fails when a
  /// writer holds the channel longer than `timeout` (an agent that stopped reading).
  Result<std::unique_lock<std::timed_mutex>> quiesce(std::chrono::milliseconds timeout = kWriteTimeout);

  /// The longest a frame write waits (for the write lock, then for the socket) by default.
  static constexpr std::chrono::milliseconds kWriteTimeout{30000};

  /// Stops the reader and closes the fd (without calling on_close).
  void shutdown();
  bool closed() const { return closed_.load(); }
  /// The channel's socket, for a new shim to hold a copy of (Launcher::keep_shim); it is closed
  /// only when the channel is destroyed.
  int socket_fd() const { return fd_.get(); }
  const std::string& name() const { return name_; }

 private:
  friend class Stream;
  AgentChannel(UniqueFd fd, std::string name, std::function<void(const std::string&)> on_close);
  /// Writes one whole frame by `deadline`. Never blocks past it: the socket is written without
  /// blocking and waited on with poll. A frame that could not start is an error and the channel
  /// stays usable; one cut off half-written has torn the byte stream, so the channel breaks
  /// (on_close runs, as for a dead agent).
  /// Writes `buf` whole (bytes of frames) before `deadline`; a write cut off half-way breaks
  /// the channel.
  Result<void> write_bytes(std::string_view buf, std::chrono::steady_clock::time_point deadline);
  Result<void> write_frame(protocol::FrameType type, uint32_t stream, std::string_view payload,
                           std::chrono::steady_clock::time_point deadline);
  Result<void> write_frame(protocol::FrameType type, uint32_t stream, std::string_view payload) {
    return write_frame(type, stream, payload, std::chrono::steady_clock::now() + kWriteTimeout);
  }
  /// Breaks the channel from a writer: the reader stops and reports `why`.
  void break_channel(const std::string& why);
  void reader_loop();
  void handle_control(protocol::Frame f);
  void forget(uint32_t id);
  Result<protocol::Frame> wait_control(protocol::FrameType type, std::chrono::milliseconds timeout);
  /// The END of an idle_reports request: whether the agent will report.
  static Result<bool> idle_answer(Stream& s, std::chrono::steady_clock::time_point deadline);

  UniqueFd fd_;
  UniqueFd wake_;  // eventfd: shutdown() wakes the reader without touching the shared socket
  std::string name_;
  std::function<void(const std::string&)> on_close_;
  std::thread reader_;
  std::atomic<bool> closed_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> last_heard_ms_{0};  // steady clock: the agent's last bytes
  std::atomic<int64_t> probe_sent_ms_{0};  // steady clock: the probe that is out (0: none)
  std::timed_mutex write_mu_;
  std::mutex break_mu_;
  std::string break_reason_;  // why a writer broke the channel (guarded by break_mu_)

  std::mutex mu_;  // streams_, control_, next_id_, resync state
  std::condition_variable control_cv_;
  std::map<uint32_t, std::weak_ptr<Stream>> streams_;
  std::deque<protocol::Frame> control_;  // at most kMaxControlFrames; more breaks the channel
  uint32_t next_id_ = 1;
  std::optional<std::string> resync_nonce_;
  IncomingHandler incoming_;
  IdleHandler on_idle_;
  protocol::FrameParser parser_{protocol::FrameType::kResyncAck};
};

}  // namespace b3os::agentlink
