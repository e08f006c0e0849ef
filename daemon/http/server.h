#pragma once
// A small HTTP/1.1 server on Boost.Beast. One asio thread waits for every connection's next
// request head (with deadlines, costing no thread); a complete head goes to a worker thread,
// which runs the synchronous Handler; bodies stream both ways. The API layer sees only
// Exchange; Beast types stay in this folder.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace b3os::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

/// A byte pipe to an HTTP/1.1 server: for the preview, a connection to an app inside a
/// sandbox through its agent (daemon/preview). Reads and writes may run on two threads at once.
class Upstream {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  virtual ~Upstream() = default;
  /// Reads up to `cap` bytes; 0 once the server sent its last byte. Nothing by `deadline` is
  /// a kUpstreamTimeout error (the caller may wait again).
  virtual Result<size_t> read(char* buf, size_t cap, Deadline deadline) = 0;
  virtual Result<void> write(std::string_view bytes, Deadline deadline) = 0;
  /// Nothing more will be written (a half-close).
  virtual void close_write() = 0;
};

/// The sending side of a WebSocket connection (Exchange::websocket). Thread-safe.
class WebSocketPeer {
 public:
  /// Messages queued past this many bytes make send() wait: a client that reads slowly holds
  /// its sender back instead of growing b3osd's memory.
  static constexpr size_t kMaxQueued = 1u << 20;
  virtual ~WebSocketPeer() = default;
  /// Queues one message (binary or text); waits while kMaxQueued bytes are queued. False once
  /// the connection is closed (nothing more will be sent).
  virtual bool send(std::string message, bool binary) = 0;
  /// Closes the connection with a status code (1000: normal) and a reason.
  virtual void close(uint16_t code, std::string reason) = 0;
  /// Reads the client's messages again after `message` returned false (from any thread).
  virtual void resume_reading() = 0;
};

/// What runs a WebSocket connection. All three run on the request's own thread.
struct WebSocketHandler {
  /// Once, when the upgrade is done: start whatever feeds `peer` (on another thread).
  std::function<void(WebSocketPeer& peer)> opened;
  /// Each message from the client, whole (Beast reassembles fragments; at most 1 MiB). It
  /// must not block: false stops reading the client (its messages wait in the socket, and the
  /// client's sends in turn) until peer.resume_reading().
  std::function<bool(std::string_view message, bool binary)> message;
  /// Once, when the connection has closed (either side, or a time-out): stop feeding it.
  std::function<void()> closed;
};

/// How Exchange::proxy changes the request and its answer on the way.
struct ProxyOptions {
  std::string target;         // the request target to send (the client's, minus the token)
  std::string cookie;         // the Cookie header to send ("" sends none)
  Headers response_headers;   // added to the response head (a Set-Cookie)
  /// Headers of the server's response head left out when it answers true (name, value).
  std::function<bool(std::string_view, std::string_view)> drop_response_header;
  /// A new value for a header of the server's response head (name, value), or nullopt to
  /// pass it as it is.
  std::function<std::optional<std::string>(std::string_view, std::string_view)> rewrite_response_header;
  /// No byte either way for this long ends a response or an upgraded connection.
  std::chrono::milliseconds idle_timeout{60'000};
  /// Headers set on the request sent (replacing the client's of the same name).
  Headers request_headers;
  /// Headers of the client's request not sent on (names, any case): a credential meant for
  /// this server, not for the app behind it.
  std::vector<std::string> drop_request_headers;
  /// The request body to send instead of reading the client's (a caller that read it whole
  /// to decide where the request goes); sent with its length.
  std::optional<std::string> body;
  /// Sends `Expect: 100-continue` with a body over 64 KiB or of unknown length and waits for
  /// the server's 100 (or its early answer) before reading the client's body: for a server
  /// that answers from the head alone (b3osd nodes behind the router).
  bool expect_large_bodies = false;
  /// Checked while waiting on the server, like the client's going: true ends the relay (an
  /// MCP call relayed to another node that its client cancelled).
  std::function<bool()> abandon;
};

/// A TCP connection to host:port as an Upstream (the router's connection to a node). Fails
/// with kNodeUnavailable when nothing accepts it within `timeout`.
Result<std::unique_ptr<Upstream>> connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout);
/// The connected socket connect_tcp wraps (non-blocking, close-on-exec; the caller owns it).
Result<int> connect_tcp_socket(const std::string& host, int port, std::chrono::milliseconds timeout);

/// One request and its response on a connection.
class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual std::string_view method() const = 0;
  /// The request target as sent: path and query.
  virtual std::string_view target() const = 0;
  /// A request header, or "" when absent.
  virtual std::string_view header(std::string_view name) const = 0;
  /// The client's address as the socket sees it ("" when unknown): a router in between is the
  /// client.
  virtual std::string peer_address() const { return {}; }
  /// The declared body length, if any (nullopt for chunked bodies).
  virtual std::optional<uint64_t> content_length() const = 0;
  /// True when the request has a body (non-zero length or chunked).
  virtual bool has_body() const = 0;

  /// Reads the whole body; fails with 413 payload_too_large above `limit`.
  virtual Result<std::string> read_body(size_t limit) = 0;
  /// Reads the next piece of the body into buf; 0 at the end. Fails above `limit` in total.
  virtual Result<size_t> read_chunk(char* buf, size_t cap, uint64_t limit) = 0;

  /// Sends a complete response.
  virtual void respond(int status, std::string_view content_type, std::string body, const Headers& headers) = 0;
  /// `begin_stream` length for a body of unknown length (sent chunked; finish with end_stream).
  static constexpr uint64_t kUnknownLength = ~uint64_t{0};
  /// Starts a streamed response of `length` bytes; then `write` the bytes.
  virtual Result<void> begin_stream(int status, std::string_view content_type, uint64_t length,
                                    const Headers& headers) = 0;
  virtual Result<void> write(std::string_view bytes) = 0;
  /// Ends a body of kUnknownLength (a no-op for a body whose length was declared).
  virtual Result<void> end_stream() = 0;
  /// Gives up on a streamed body: the connection closes without the body's end, so the
  /// client sees it cut short instead of complete.
  virtual void abort_stream() = 0;
  virtual bool responded() const = 0;
  /// True when the client closed its side (work it started can be cancelled).
  virtual bool client_gone() const = 0;

  /// Relays this request to `up` and the answer back (daemon/http/proxy.cc): heads through
  /// Beast's parser and serializer, hop-by-hop headers dropped, bodies streamed as they come
  /// (chunked, server-sent events), and an Upgrade answered 101 becomes raw bytes both ways
  /// until either side ends or `idle_timeout` passes with no byte. Fails without having
  /// responded when the server gave no response head (the caller answers then).
  virtual Result<void> proxy(Upstream& up, const ProxyOptions& opts) = 0;

  /// Declares this request a long-lived stream of `tenant` (a project): it leaves the request
  /// workers' count for the streams' (Config::max_streams, fair between tenants) until it ends.
  /// Fails, taking nothing, when the tenant is at its share (429 concurrency_limited) or the
  /// node's streams are all taken (503 node_unavailable); a second call is a no-op.
  virtual Result<void> hold_stream(std::string_view tenant) { return {}; }

  /// True when the request asks to be upgraded to a WebSocket.
  virtual bool is_websocket_upgrade() const { return false; }
  /// Answers the upgrade (101, Beast's handshake) and runs the connection on this thread until
  /// it closes: `handler` sees each message; a connection with no frame either way for
  /// `idle_timeout` (Beast pings it first) is closed. The connection is not reused after.
  virtual Result<void> websocket(const WebSocketHandler& handler, std::chrono::milliseconds idle_timeout) {
    return fail(ErrorCode::kNotImplemented, "no WebSocket on this exchange");
  }

  /// The request's id: sent as X-Request-Id on every answer and named by the log lines the
  /// request causes (the client's own X-Request-Id when it is a plain token, else a new one).
  virtual std::string_view request_id() const { return {}; }
  /// Names the operation for metrics (a route pattern such as "/v1/sandboxes/{id}/exec",
  /// never anything a client chose); requests that set none count as "unmatched".
  virtual void set_route(std::string_view route) {}
};

using Handler = std::function<void(Exchange&)>;

/// What a client may hold, and for how long (docs/configuration.md).
struct Config {
  /// Open connections, idle ones included. At the cap a new connection evicts the one that
  /// has waited longest for a request head; only when every connection is in a request is
  /// the new one refused (503).
  int max_connections = 10000;
  /// Requests being handled at once (worker threads); past it a request gets 503.
  int max_requests = 512;
  /// Requests that become long-lived (Exchange::hold_stream: terminals, watches, follows,
  /// execs) leave the count above for one of their own, capped below it and shared fairly
  /// between tenants, so they can never take every worker: short requests and /healthz are
  /// served whatever streams are open. 0: max_requests / 2; per tenant 0: half of that.
  int max_streams = 0;
  int max_streams_per_tenant = 0;
  /// How long a connection may wait for the first byte of its next request.
  std::chrono::milliseconds idle_timeout{60'000};
  /// How long a request head may take once its first byte came.
  std::chrono::milliseconds head_timeout{15'000};
  /// How long a body read may go without a byte (then 408 request_timeout).
  std::chrono::milliseconds body_timeout{30'000};
  /// The `listener` label of this server's metrics (b3os_http_requests_total).
  std::string name = "api";
  /// Log a line per request (method, route, status, time; the request id with it).
  bool access_log = false;
  /// Count statuses by class ("2xx") rather than exactly: for a listener whose answers come
  /// from elsewhere (the preview relays a sandbox app's status, any number it likes).
  bool status_classes = false;
};

/// Listens on host:port and runs `handler` for each request.
/// Who a per-client limit counts: the address as given, an IPv6 one by its /64 (one host can
/// hold a whole /64).
std::string client_key(std::string addr);

class Server {
 public:
  Server(std::string host, int port, Config cfg, Handler handler);
  ~Server();
  /// Binds and listens; fails with a clear message when the address is taken.
  Result<void> listen();
  /// Serves until stop(); blocks.
  void run();
  void stop();
  int port() const { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string host_;
  int port_;
};

/// The reason phrase of a status code, for error messages.
std::string_view status_reason(int status);

}  // namespace b3os::http
