#pragma once
// HttpRelay: the agent's HTTP listener on 127.0.0.1:7700, for model access from inside the
// sandbox (docs/agent-protocol.md, "Streams the agent opens"). Each HTTP/1.1 request accepted
// there becomes a stream the agent opens towards the daemon: OPEN {"op":"http",...}, the body
// as DATA, EOF. The daemon's gateway answers with HEADER, DATA and END, which the relay writes
// back to the client as they come. The relay holds no policy: what may be called and who pays
// is decided by the daemon. Like every part of the agent it never blocks: all its sockets are
// nonblocking and are served from the agent's poll loop.

#include <poll.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "agent/channel.h"
#include "agent/stream.h"
#include "common/unique_fd.h"

namespace b3os::agent {

struct HttpError;

/// The loopback port the relay listens on.
inline constexpr uint16_t kRelayPort = 7700;
/// Stream ids the agent opens have this bit set; the daemon's never do.
inline constexpr uint32_t kAgentStreamBit = 0x80000000u;

class HttpRelay {
 public:
  explicit HttpRelay(Channel& channel);
  ~HttpRelay();
  HttpRelay(const HttpRelay&) = delete;
  HttpRelay& operator=(const HttpRelay&) = delete;

  /// True for ids of streams the agent opens.
  static bool is_agent_stream(uint32_t id) { return (id & kAgentStreamBit) != 0; }

  /// Listens on 127.0.0.1:`port`. On failure it logs why and the relay stays off; the rest of
  /// the agent works as before.
  void listen(uint16_t port = kRelayPort);

  /// Appends the fds to poll. `on_poll` must get exactly these entries back, with revents.
  void poll_fds(std::vector<pollfd>& out);
  /// Serves the fds `poll_fds` added (the listener and the client connections).
  void on_poll(const pollfd* pfds, size_t n);
  /// The next time `on_deadline` must run (a slow request head, a lingering close), if any.
  std::optional<Clock::time_point> deadline() const;
  void on_deadline(Clock::time_point now);

  /// A frame from the daemon on an agent-opened stream: HEADER, DATA, END, CANCEL, WINDOW.
  /// Frames for streams the relay does not know (finished, cancelled, dropped) are ignored.
  void on_frame(const protocol::Frame& f);
  /// RESYNC or a lost channel: forgets every open stream and closes its connection.
  void drop_all_streams(const char* why);
  /// Frees the connections that are done; once per loop turn, after everything above.
  void sweep();
  /// True when no client connection is open (after sweep).
  bool idle() const { return conns_.empty(); }

 private:
  struct Conn;

  void accept_all();
  void on_readable(Conn& c);
  void on_head_bytes(Conn& c);
  void start_request(Conn& c, size_t head_size);
  void forward_body(Conn& c, const char* data, size_t n);
  void on_header(Conn& c, const protocol::Frame& f);
  void on_end(Conn& c, const protocol::Frame& f);
  void queue_out(Conn& c, std::string_view bytes, bool from_daemon);
  void write_out(Conn& c);
  void finish_response(Conn& c);
  void reply_error(Conn& c, const HttpError& e);
  void gateway_failed(Conn& c, const std::string& why);
  void abort_response(Conn& c, const std::string& why);
  void client_gone(Conn& c, const char* why);
  void forget_stream(Conn& c);
  void close_conn(Conn& c);

  Channel& channel_;
  UniqueFd listen_fd_;
  // Set after accept failed for want of fds: the listener is not polled until then.
  std::optional<Clock::time_point> accept_paused_until_;
  // Counts agent-opened streams: ids are kAgentStreamBit | n, never reused on one channel.
  uint32_t next_stream_ = 1;
  std::vector<std::unique_ptr<Conn>> conns_;
  // Live streams (OPEN sent, no END or CANCEL yet) and their connections.
  std::map<uint32_t, Conn*> streams_;
  // What poll_fds handed out, in order: nullptr for the listener.
  std::vector<Conn*> polled_;
};

}  // namespace b3os::agent
