#include "agent/http_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <strings.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/http_head.h"
#include "agent/log.h"

namespace b3os::agent {

using protocol::FrameType;

namespace {

// At most this many client connections at once; beyond it the listener is not polled and new
// clients wait in the kernel's backlog.
constexpr size_t kMaxConns = 128;
// A request head must arrive within this time of the accept (a client that connects and says
// nothing would otherwise hold a connection slot forever).
constexpr auto kHeadTimeout = std::chrono::seconds(30);
// After an answer that left request bytes unread (an error written by the relay, a daemon that
// answered before the body was in), the rest is read and dropped, for at most this long and
// this many bytes, before the socket is closed: closing with unread input sends a TCP RST,
// which can destroy the answer before the client has read it.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr uint64_t kMaxLingerBytes = 64u << 20;
// Credit for the daemon's DATA goes back in WINDOWs of at least this size, or whenever a
// connection's buffer drained, rather than one per socket write.
constexpr uint64_t kGrantBatch = 64u * 1024;
// A daemon granting credit forever must not overflow the counter.
constexpr uint64_t kMaxCredit = uint64_t{1} << 40;
// Out of fds, accept fails while the listener stays readable: pause it rather than spin.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

struct HttpRelay::Conn {
  UniqueFd fd;
  bool dead = false;  // closed; freed by sweep()

  // The request. While reading_head, `in` collects the head.
  bool reading_head = true;
  std::string in;
  size_t head_scanned = 0;
  Clock::time_point head_deadline;
  uint64_t body_left = 0;     // request body bytes still to come from the client
  bool request_read = false;  // head and whole body consumed
  uint32_t stream = 0;        // the live stream; 0 before OPEN and once forgotten
  uint64_t credit = protocol::kInitialWindow;  // DATA bytes the daemon still accepts

  // The response, queued in `out` until the socket takes it.
  bool head_written = false;   // the response head is queued (HEADER came)
  bool response_done = false;  // nothing more will be queued: close once `out` is written
  std::string out;
  size_t out_pos = 0;
  size_t out_uncredited = 0;  // unwritten bytes at the front of `out` that were no DATA
  uint64_t to_grant = 0;      // the daemon's DATA written to the client, not granted yet

  // A lingering close: our side is shut down; input is dropped until EOF or this time.
  std::optional<Clock::time_point> linger_until;
  uint64_t lingered = 0;
};

HttpRelay::HttpRelay(Channel& channel) : channel_(channel) {}
HttpRelay::~HttpRelay() = default;

void HttpRelay::listen(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) {
    log_line("http relay: socket: %s; the relay is off", std::strerror(errno));
    return;
  }
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    log_line("http relay: SO_REUSEADDR: %s", std::strerror(errno));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    log_line("http relay: bind 127.0.0.1:%u: %s; the relay is off", port, std::strerror(errno));
    return;
  }
  if (::listen(fd.get(), 128) != 0) {
    log_line("http relay: listen: %s; the relay is off", std::strerror(errno));
    return;
  }
  listen_fd_ = std::move(fd);
}

void HttpRelay::poll_fds(std::vector<pollfd>& out) {
  polled_.clear();
  if (accept_paused_until_ && Clock::now() >= *accept_paused_until_) accept_paused_until_.reset();
  if (listen_fd_ && conns_.size() < kMaxConns && !accept_paused_until_) {
    out.push_back(pollfd{listen_fd_.get(), POLLIN, 0});
    polled_.push_back(nullptr);
  }
  for (const auto& c : conns_) {
    if (c->dead) continue;
    short events = 0;
    // Request body is read only as far as the daemon's credit goes; everything else (the
    // head, input after the request, a client going away) is always read.
    const bool credit_blocked = c->body_left > 0 && c->stream != 0 && c->credit == 0;
    if (!credit_blocked) events |= POLLIN;
    if (c->out_pos < c->out.size()) events |= POLLOUT;
    if (events == 0) continue;
    out.push_back(pollfd{c->fd.get(), events, 0});
    polled_.push_back(c.get());
  }
}

void HttpRelay::on_poll(const pollfd* pfds, size_t n) {
  for (size_t i = 0; i < n && i < polled_.size(); ++i) {
    const short rev = pfds[i].revents;
    if (rev == 0) continue;
    Conn* c = polled_[i];
    if (c == nullptr) {
      accept_all();
      continue;
    }
    if (c->dead) continue;
    if ((pfds[i].events & POLLOUT) && (rev & (POLLOUT | POLLERR | POLLHUP))) write_out(*c);
    if (!c->dead && (pfds[i].events & POLLIN) && (rev & (POLLIN | POLLERR | POLLHUP))) {
      on_readable(*c);
    }
  }
}

void HttpRelay::accept_all() {
  // A bounded batch per turn, so that a burst of connections cannot starve the channel.
  for (int i = 0; i < 16 && conns_.size() < kMaxConns; ++i) {
    const int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      log_line("http relay: accept: %s", std::strerror(errno));
      accept_paused_until_ = Clock::now() + kAcceptPause;
      return;
    }
    // Server-sent events are small writes that must go out at once.
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    c->head_deadline = Clock::now() + kHeadTimeout;
    conns_.push_back(std::move(c));
  }
}

void HttpRelay::on_readable(Conn& c) {
  static char buf[protocol::kMaxData];
  size_t want = sizeof(buf);
  if (c.reading_head) {
    // One byte beyond the limit is enough to know the head is too large.
    want = std::min(want, kMaxRequestHead + 1 - c.in.size());
  } else if (c.body_left > 0 && c.stream != 0) {
    want = static_cast<size_t>(std::min<uint64_t>({want, c.body_left, c.credit}));
    if (want == 0) return;
  }
  const ssize_t n = ::read(c.fd.get(), buf, want);
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) return;
    client_gone(c, std::strerror(errno));
    return;
  }
  if (n == 0) {
    client_gone(c, "closed the connection");
    return;
  }
  const size_t got = static_cast<size_t>(n);
  if (c.linger_until) {
    c.lingered += got;
    if (c.lingered > kMaxLingerBytes) close_conn(c);
    return;
  }
  if (c.reading_head) {
    c.in.append(buf, got);
    on_head_bytes(c);
    return;
  }
  if (c.body_left > 0) {
    const size_t body = static_cast<size_t>(std::min<uint64_t>(got, c.body_left));
    c.body_left -= body;
    forward_body(c, buf, body);
  }
  // Bytes after the request (one request per connection) are dropped.
}

void HttpRelay::on_head_bytes(Conn& c) {
  const auto end = find_head_end(c.in, c.head_scanned);
  c.head_scanned = c.in.size();
  if ((end && *end > kMaxRequestHead) || (!end && c.in.size() > kMaxRequestHead)) {
    reply_error(c, HttpError{431, "request_header_fields_too_large",
                             "the request head is larger than " +
                                 std::to_string(kMaxRequestHead) + " bytes"});
    return;
  }
  if (end) start_request(c, *end);
}

void HttpRelay::start_request(Conn& c, size_t head_size) {
  c.reading_head = false;
  const std::string in = std::move(c.in);
  c.in = std::string();
  auto head = parse_request_head(std::string_view(in).substr(0, head_size));
  if (!head) {
    reply_error(c, head.error());
    return;
  }
  // A body must fit one window: the agent never holds more than that of a request.
  auto body = request_body_length(*head, protocol::kInitialWindow);
  if (!body) {
    reply_error(c, body.error());
    return;
  }
  if (!channel_.readable()) {
    reply_error(c, HttpError{503, "node_unavailable", "the agent has lost its channel to b3osd"});
    return;
  }
  if (next_stream_ >= kAgentStreamBit) {
    reply_error(c, HttpError{503, "internal", "the agent ran out of stream ids on this channel"});
    return;
  }
  c.stream = kAgentStreamBit | next_stream_++;
  streams_[c.stream] = &c;
  channel_.send(FrameType::kOpen, c.stream,
                dump_json(Json{{"op", "http"},
                               {"method", head->method},
                               {"path", head->path},
                               {"query", head->query},
                               {"headers", relayed_request_headers(*head)}}));
  c.body_left = *body;
  const std::string_view rest = std::string_view(in).substr(head_size);
  // A client that waits for "100 Continue" before sending its body (curl does, for large
  // ones) is told to go ahead: the body's size was checked above.
  const std::string* expect = head->find("expect");
  if (expect && ::strcasecmp(expect->c_str(), "100-continue") == 0 && head->http11 &&
      c.body_left > rest.size()) {
    queue_out(c, kContinue, /*from_daemon=*/false);
  }
  const size_t first = static_cast<size_t>(std::min<uint64_t>(rest.size(), c.body_left));
  c.body_left -= first;
  forward_body(c, rest.data(), first);
  write_out(c);
}

void HttpRelay::forward_body(Conn& c, const char* data, size_t n) {
  if (c.stream != 0) {
    for (size_t off = 0; off < n;) {
      const size_t k = std::min<size_t>(n - off, protocol::kMaxData);
      channel_.send(FrameType::kData, c.stream, std::string_view(data + off, k));
      off += k;
    }
    c.credit -= std::min<uint64_t>(c.credit, n);
    if (c.body_left == 0) channel_.send(FrameType::kEof, c.stream, {});
  }
  if (c.body_left == 0) c.request_read = true;
}

void HttpRelay::on_frame(const protocol::Frame& f) {
  const auto it = streams_.find(f.stream);
  if (it == streams_.end()) return;
  Conn& c = *it->second;
  switch (f.type) {
    case FrameType::kWindow:
      if (auto n = protocol::decode_u32(f.payload)) c.credit = std::min(c.credit + *n, kMaxCredit);
      break;
    case FrameType::kHeader:
      on_header(c, f);
      break;
    case FrameType::kData:
      if (!c.head_written) {
        gateway_failed(c, "DATA before HEADER");
        break;
      }
      queue_out(c, f.payload, /*from_daemon=*/true);
      write_out(c);
      break;
    case FrameType::kEnd:
      on_end(c, f);
      break;
    case FrameType::kCancel:
      // The daemon gave up on the request; it expects nothing more on the stream.
      log_line("http relay: stream %#x cancelled by the daemon", f.stream);
      forget_stream(c);
      abort_response(c, "the request was cancelled");
      break;
    case FrameType::kEof:
      break;  // the response ends with END; an EOF before it changes nothing
    default:
      log_line("http relay: stream %#x: unexpected frame type 0x%02x; ignored", f.stream,
               static_cast<unsigned>(f.type));
      break;
  }
}

void HttpRelay::on_header(Conn& c, const protocol::Frame& f) {
  if (c.head_written) {
    gateway_failed(c, "a second HEADER");
    return;
  }
  auto j = parse_request(f.payload);
  if (!j) {
    gateway_failed(c, "HEADER: " + j.error().message);
    return;
  }
  auto head = response_head(*j);
  if (!head) {
    gateway_failed(c, "HEADER: " + head.error());
    return;
  }
  c.head_written = true;
  queue_out(c, *head, /*from_daemon=*/false);
  write_out(c);
}

void HttpRelay::on_end(Conn& c, const protocol::Frame& f) {
  forget_stream(c);
  auto j = parse_request(f.payload);
  const Json* ok = nullptr;
  if (j) {
    const auto it = j->find("ok");
    if (it != j->end() && it->is_boolean()) ok = &*it;
  }
  if (c.head_written) {
    // ok:false here means the upstream broke mid-body. What the daemon sent is still written;
    // the relay adds nothing and closes, as it does after a complete body.
    if (!ok || !ok->get<bool>()) {
      log_line("http relay: stream %#x ended with an error mid-body: %s", f.stream,
               f.payload.c_str());
    }
    c.response_done = true;
    write_out(c);
    return;
  }
  // END with no HEADER: the daemon's error becomes the reply; its code picks the status.
  HttpError e{502, "bad_gateway", "the model gateway ended the request without a response"};
  if (ok && !ok->get<bool>()) {
    const auto err = j->find("error");
    if (err != j->end() && err->is_object()) {
      const auto code = get_string(*err, "code", std::string("internal"));
      const auto msg = get_string(*err, "message", std::string());
      if (code) {
        e.status = error_http_status(error_code_from_name(*code));
        e.code = *code;
      }
      if (msg && !msg->empty()) e.message = *msg;
    }
  }
  reply_error(c, e);
}

void HttpRelay::gateway_failed(Conn& c, const std::string& why) {
  log_line("http relay: stream %#x: %s; cancelling", c.stream, why.c_str());
  channel_.send(FrameType::kCancel, c.stream, {});
  forget_stream(c);
  abort_response(c, why);
}

void HttpRelay::abort_response(Conn& c, const std::string& why) {
  if (!c.head_written) {
    reply_error(c, HttpError{502, "bad_gateway", "model gateway: " + why});
    return;
  }
  // The head is out: the client sees the body end where the daemon stopped.
  c.response_done = true;
  write_out(c);
}

void HttpRelay::reply_error(Conn& c, const HttpError& e) {
  if (c.response_done || c.head_written) return;
  log_line("http relay: answering %d %s: %s", e.status, e.code.c_str(), e.message.c_str());
  c.reading_head = false;
  c.in = std::string();
  queue_out(c, error_response(e), /*from_daemon=*/false);
  c.response_done = true;
  write_out(c);
}

void HttpRelay::queue_out(Conn& c, std::string_view bytes, bool from_daemon) {
  if (c.dead || bytes.empty()) return;
  // Bytes that were not the daemon's DATA (100 Continue, a head, the relay's own reply) are
  // always queued before any that were, so counting them from the front is enough.
  if (!from_daemon) c.out_uncredited += bytes.size();
  c.out.append(bytes.data(), bytes.size());
}

void HttpRelay::write_out(Conn& c) {
  while (!c.dead && c.out_pos < c.out.size()) {
    const ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
    if (n > 0) {
      const size_t w = static_cast<size_t>(n);
      const size_t k = std::min(w, c.out_uncredited);
      c.out_pos += w;
      c.out_uncredited -= k;
      c.to_grant += w - k;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    client_gone(c, n < 0 ? std::strerror(errno) : "write returned 0");
    return;
  }
  if (c.dead) return;
  const bool drained = c.out_pos == c.out.size();
  // Drop the written prefix: at once when all went out, otherwise only when it is large.
  if (drained) {
    c.out.clear();
    c.out_pos = 0;
  } else if (c.out_pos >= (1u << 20)) {
    c.out.erase(0, c.out_pos);
    c.out_pos = 0;
  }
  // The daemon gets its credit back as its bytes reach the client, not when they arrive here.
  if (c.stream != 0 && c.to_grant > 0 && (drained || c.to_grant >= kGrantBatch)) {
    while (c.to_grant > 0) {
      const auto piece = static_cast<uint32_t>(std::min<uint64_t>(c.to_grant, UINT32_MAX));
      channel_.send(FrameType::kWindow, c.stream, protocol::encode_u32(piece));
      c.to_grant -= piece;
    }
  }
  if (drained && c.response_done) finish_response(c);
}

void HttpRelay::finish_response(Conn& c) {
  if (c.linger_until) return;
  if (c.request_read) {
    close_conn(c);
    return;
  }
  // Part of the request is still unread: say we are done, then drop what the client sends
  // until it closes (it reads the answer once it has sent everything).
  ::shutdown(c.fd.get(), SHUT_WR);
  c.linger_until = Clock::now() + kLingerTime;
}

void HttpRelay::client_gone(Conn& c, const char* why) {
  if (c.stream != 0) {
    log_line("http relay: stream %#x: client gone (%s) before the response was complete; "
             "cancelling", c.stream, why);
    channel_.send(FrameType::kCancel, c.stream, {});
    forget_stream(c);
  }
  close_conn(c);
}

void HttpRelay::forget_stream(Conn& c) {
  if (c.stream == 0) return;
  streams_.erase(c.stream);
  c.stream = 0;
  c.to_grant = 0;
}

void HttpRelay::close_conn(Conn& c) {
  forget_stream(c);
  c.fd.reset();
  c.dead = true;
  c.out = std::string();
  c.in = std::string();
}

std::optional<Clock::time_point> HttpRelay::deadline() const {
  std::optional<Clock::time_point> next = accept_paused_until_;
  for (const auto& c : conns_) {
    if (c->dead) continue;
    std::optional<Clock::time_point> d;
    if (c->reading_head) d = c->head_deadline;
    if (c->linger_until) d = c->linger_until;
    if (d && (!next || *d < *next)) next = d;
  }
  return next;
}

void HttpRelay::on_deadline(Clock::time_point now) {
  for (const auto& c : conns_) {
    if (c->dead) continue;
    if (c->reading_head && now >= c->head_deadline) {
      reply_error(*c, HttpError{408, "request_timeout", "no complete request head within 30 s"});
    } else if (c->linger_until && now >= *c->linger_until) {
      close_conn(*c);
    }
  }
}

void HttpRelay::drop_all_streams(const char* why) {
  if (streams_.empty()) return;
  log_line("http relay: %s: dropping %zu streams and their connections", why, streams_.size());
  std::vector<Conn*> conns;
  for (const auto& [id, c] : streams_) conns.push_back(c);
  for (Conn* c : conns) close_conn(*c);
}

void HttpRelay::sweep() {
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const auto& c) { return c->dead; }),
               conns_.end());
}

}  // namespace b3os::agent
