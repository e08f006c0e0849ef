#include "daemon/http/server.h"

#include "daemon/http/proxy.h"
#include "daemon/http/websocket.h"

#include "daemon/sys/deadline_stream.h"

#include "common/fair_share.h"
#include "common/metrics.h"
#include "common/request_id.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <fmt/format.h>
#include <list>
#include <mutex>
#include <optional>
#include <sstream>
#include <spdlog/spdlog.h>
#include <thread>

namespace b3os::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bh = boost::beast::http;
using tcp = asio::ip::tcp;

std::string client_key(std::string addr) {
  if (addr.find(':') == std::string::npos || addr.rfind("::ffff:", 0) == 0) return addr;
  boost::system::error_code ec;
  auto a6 = asio::ip::make_address_v6(addr, ec);
  if (ec) return addr;
  auto bytes = a6.to_bytes();
  std::fill(bytes.begin() + 8, bytes.end(), 0);
  return asio::ip::address_v6(bytes).to_string() + "/64";
}

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr auto kWriteStall = std::chrono::seconds(60);  // a response write that makes no progress
constexpr auto kWorkerIdle = std::chrono::seconds(60);  // an idle worker thread ends after this
constexpr size_t kBodyReadSize = 256 * 1024;  // what one read of a request body may take
// What a connection's read buffer may hold: a head (kHeaderLimit) and a read of body with room.
constexpr size_t kConnBufferLimit = 1 << 20;
// A request that finds every worker busy waits up to 20 x 10 ms for one before its 503.
constexpr auto kWorkerWaitStep = std::chrono::milliseconds(10);
constexpr int kWorkerWaitSteps = 20;

/// Why a request head frames its body in a way b3osd does not take (RFC 9112 6.1 and 6.3),
/// or nullopt. Only `Transfer-Encoding: chunked` is taken: Beast reads any other coding as no
/// body, so the body's bytes would be parsed as the next request, and a front end that framed
/// it the other way would be desynchronised from b3osd. Both a Transfer-Encoding and a
/// Content-Length, or either twice, is the shape of request smuggling: refused too.
std::optional<std::string> framing_error(const bh::request<bh::buffer_body>& req) {
  size_t te_fields = 0, cl_fields = 0;
  std::string te;
  for (const auto& f : req) {
    if (f.name() == bh::field::transfer_encoding) {
      ++te_fields;
      te = std::string(f.value());
    } else if (f.name() == bh::field::content_length) {
      ++cl_fields;
    }
  }
  if (te_fields == 0) return cl_fields > 1 ? std::optional<std::string>("a request has at most one Content-Length") : std::nullopt;
  if (te_fields > 1) return "a request has at most one Transfer-Encoding";
  if (cl_fields > 0) return "a request has a Transfer-Encoding or a Content-Length, not both";
  const auto first = te.find_first_not_of(" \t"), last = te.find_last_not_of(" \t");
  const std::string coding = first == std::string::npos ? std::string() : te.substr(first, last - first + 1);
  if (!beast::iequals(coding, "chunked"))
    return "Transfer-Encoding \"" + coding.substr(0, 40) + "\" is not taken: only \"chunked\"";
  return std::nullopt;
}

tl::unexpected<Error> too_large(uint64_t limit) {
  return fail(ErrorCode::kPayloadTooLarge, "the request body is larger than this operation's limit of " +
                                               std::to_string(limit) + " bytes");
}

class BeastExchange final : public Exchange {
 public:
  using StreamHold = std::function<Result<void>(std::string_view tenant)>;
  BeastExchange(tcp::socket& sock, beast::flat_buffer& buf, bh::request_parser<bh::buffer_body>& parser,
                std::chrono::milliseconds body_timeout, StreamHold hold = {})
      : sock_(sock),
        buf_(buf),
        parser_(parser),
        body_timeout_(body_timeout),
        request_id_(request_id_for(header("X-Request-Id"))),
        hold_(std::move(hold)) {}

  Result<void> hold_stream(std::string_view tenant) override {
    if (held_ || !hold_) return {};
    if (auto r = hold_(tenant); !r) return r;
    held_ = true;
    return {};
  }

  std::string_view request_id() const override { return request_id_; }
  void set_route(std::string_view route) override { route_ = route; }
  const std::string& route() const { return route_; }
  /// The status of the answer sent (0 when none was).
  int status() const { return status_; }

  std::string_view method() const override { return req().method_string(); }
  std::string_view target() const override { return req().target(); }
  std::string_view header(std::string_view name) const override {
    auto it = req().find(beast::string_view(name.data(), name.size()));
    return it == req().end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
  }
  std::string peer_address() const override {
    boost::system::error_code ec;
    const auto ep = sock_.remote_endpoint(ec);
    return ec ? std::string() : ep.address().to_string();
  }
  std::optional<uint64_t> content_length() const override {
    auto l = parser_.content_length();
    return l ? std::optional<uint64_t>(*l) : std::nullopt;
  }
  bool has_body() const override { return parser_.chunked() || (parser_.content_length() && *parser_.content_length() > 0); }

  Result<std::string> read_body(size_t limit) override {
    std::string out;
    char tmp[16 * 1024];
    for (;;) {
      auto n = read_chunk(tmp, sizeof tmp, limit);
      if (!n) return fail(n.error());
      if (*n == 0) return out;
      out.append(tmp, *n);
    }
  }

  Result<size_t> read_chunk(char* out, size_t cap, uint64_t limit) override {
    if (parser_.is_done()) return size_t{0};
    if (auto l = parser_.content_length(); l && *l > limit) return too_large(limit);
    send_continue();
    auto& body = parser_.get().body();
    body.data = out;
    body.size = cap;
    // Each read waits at most body_timeout for a byte: a client that stops sending mid-body
    // must not hold a worker (and its key's requests in flight) for ever.
    sys::DeadlineStream in(sock_.native_handle(), sock_.get_executor());
    // Beast reads at most the buffer's free capacity (at least 512 bytes) per read_some, and
    // the buffer is as small as the request head left it: without room, a body came through
    // in 512-byte pieces, each one a frame to the agent (an upload ran at 50 MB/s).
    if (buf_.capacity() - buf_.size() < kBodyReadSize)
      buf_.reserve(std::min(buf_.size() + kBodyReadSize, buf_.max_size()));
    beast::error_code ec;
    while (!ec && body.size == cap && !parser_.is_done()) {
      in.arm(std::chrono::steady_clock::now() + body_timeout_, nullptr);
      bh::read_some(in, buf_, parser_, ec);
    }
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) broken_ = true;
    if (in.timed_out())
      return fail(ErrorCode::kRequestTimeout, fmt::format("no byte of the request body came for {:g} s",
                                                          body_timeout_.count() / 1000.0));
    if (ec) return fail(ErrorCode::kInvalidRequest, "reading the request body: " + ec.message());
    size_t n = cap - body.size;
    read_ += n;
    if (read_ > limit) return too_large(limit);
    return n;
  }

  void respond(int status, std::string_view content_type, std::string body, const Headers& headers) override {
    bh::response<bh::string_body> res{static_cast<bh::status>(status), 11};
    res.set(bh::field::server, "b3osd");
    res.set("X-Request-Id", request_id_);
    if (!content_type.empty()) res.set(bh::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (auto& [k, v] : headers) res.set(k, v);
    res.body() = std::move(body);
    res.keep_alive(keep_alive());
    res.prepare_payload();
    beast::error_code ec;
    auto out = writer();
    bh::write(out, res, ec);
    responded_ = true;
    status_ = status;
    if (ec) broken_ = true;
  }

  Result<void> begin_stream(int status, std::string_view content_type, uint64_t length, const Headers& headers) override {
    stream_res_.result(static_cast<bh::status>(status));
    stream_res_.version(11);
    stream_res_.set(bh::field::server, "b3osd");
    stream_res_.set("X-Request-Id", request_id_);
    stream_res_.set(bh::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (auto& [k, v] : headers) stream_res_.set(k, v);
    if (length == kUnknownLength)
      stream_res_.chunked(true);
    else
      stream_res_.content_length(length);
    stream_res_.keep_alive(keep_alive());
    stream_res_.body().data = nullptr;
    stream_res_.body().more = true;
    serializer_.emplace(stream_res_);
    beast::error_code ec;
    auto out = writer();
    bh::write_header(out, *serializer_, ec);
    responded_ = true;
    status_ = status;
    remaining_ = length;
    if (ec) {
      broken_ = true;
      return fail(ErrorCode::kInternal, "writing the response: " + ec.message());
    }
    if (length == 0) return finish_stream();
    return {};
  }

  Result<void> write(std::string_view bytes) override {
    if (!serializer_ || bytes.size() > remaining_) return fail(ErrorCode::kInternal, "response body longer than declared");
    if (bytes.empty()) return {};
    if (remaining_ != kUnknownLength) remaining_ -= bytes.size();
    stream_res_.body().data = const_cast<char*>(bytes.data());
    stream_res_.body().size = bytes.size();
    stream_res_.body().more = true;
    beast::error_code ec;
    auto out = writer();
    bh::write(out, *serializer_, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) {
      broken_ = true;
      return fail(ErrorCode::kInternal, "the client went away: " + ec.message());
    }
    if (remaining_ == 0) return finish_stream();
    return {};
  }

  Result<void> end_stream() override {
    if (!serializer_ || remaining_ != kUnknownLength) return {};
    remaining_ = 0;
    return finish_stream();
  }

  void abort_stream() override {
    broken_ = true;
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_both, ec);
  }

  bool responded() const override { return responded_; }

  Result<void> proxy(Upstream& up, const ProxyOptions& opts) override {
    detail::ProxyState st;
    auto r = detail::relay(*this, sock_, buf_, parser_, up, opts, st);
    if (st.responded) {
      responded_ = true;
      status_ = st.status;
      if (!st.reusable) broken_ = true;
    }
    return r;
  }

  bool is_websocket_upgrade() const override { return detail::is_websocket_upgrade(req()); }

  Result<void> websocket(const WebSocketHandler& handler, std::chrono::milliseconds idle_timeout) override {
    responded_ = true;
    status_ = 101;
    broken_ = true;  // the connection is the WebSocket's now: never another request on it
    return detail::run_websocket(sock_.native_handle(), req(), handler, idle_timeout);
  }

  bool client_gone() const override {
    pollfd p{const_cast<tcp::socket&>(sock_).native_handle(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }

  /// Whether the connection can carry another request.
  bool reusable() const { return !broken_ && keep_alive() && parser_.is_done() && (!serializer_ || remaining_ == 0); }

 private:
  const bh::request<bh::buffer_body>& req() const { return parser_.get(); }
  /// Every response write gives up when the client has taken nothing for kWriteStall: a
  /// client that stops reading must not hold a thread (and a model call) for ever.
  sys::DeadlineStream writer() {
    sys::DeadlineStream out(sock_.native_handle(), sock_.get_executor());
    out.arm(std::chrono::steady_clock::now() + kWriteStall, nullptr);
    return out;
  }
  // An answer given before the body was read (a 429, a 401) closes the connection and says
  // so: the unread body would otherwise be parsed as the next request.
  bool keep_alive() const { return parser_.get().keep_alive() && parser_.is_done(); }

  void send_continue() {
    if (continued_) return;
    continued_ = true;
    auto e = req().find(bh::field::expect);
    if (e != req().end() && beast::iequals(e->value(), "100-continue")) {
      static constexpr char k100[] = "HTTP/1.1 100 Continue\r\n\r\n";
      beast::error_code ec;
      auto out = writer();
      asio::write(out, asio::buffer(k100, sizeof k100 - 1), ec);
    }
  }

  Result<void> finish_stream() {
    stream_res_.body().data = nullptr;
    stream_res_.body().size = 0;
    stream_res_.body().more = false;
    beast::error_code ec;
    auto out = writer();
    bh::write(out, *serializer_, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) {
      broken_ = true;
      return fail(ErrorCode::kInternal, "the client went away: " + ec.message());
    }
    return {};
  }

  tcp::socket& sock_;
  beast::flat_buffer& buf_;
  bh::request_parser<bh::buffer_body>& parser_;
  const std::chrono::milliseconds body_timeout_;
  bool continued_ = false;
  bool responded_ = false;
  bool broken_ = false;
  uint64_t read_ = 0;
  uint64_t remaining_ = 0;
  const std::string request_id_;
  StreamHold hold_;    // Workers::become_stream for this request's worker
  bool held_ = false;  // it became a stream
  std::string route_ = "unmatched";
  int status_ = 0;
  bh::response<bh::buffer_body> stream_res_;
  std::optional<bh::response_serializer<bh::buffer_body>> serializer_;
};

/// A response the server answers itself, before any handler: an error in the API's shape, on
/// a connection that then closes. Its 503s say when to retry, as every 503 of b3osd does.
std::string own_error(ErrorCode code, const std::string& message) {
  bh::response<bh::string_body> res{static_cast<bh::status>(error_http_status(code)), 11};
  res.set(bh::field::server, "b3osd");
  res.set("X-Request-Id", request_id_for({}));
  res.set(bh::field::content_type, "application/json");
  if (error_http_status(code) == 503) res.set(bh::field::retry_after, "1");
  res.body() = R"({"error":{"code":")" + std::string(error_code_name(code)) + R"(","message":")" + message + "\"}}";
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream out;
  out << res;
  return out.str();
}

/// Sends a short answer without waiting: the socket's buffer takes it whole unless the client
/// has stopped reading, and then it would not read this either.
void send_now(tcp::socket& sock, const std::string& bytes) {
  (void)::send(sock.native_handle(), bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

/// Threads that run requests: started as needed up to a cap, gone after a minute idle, so a
/// burst does not leave hundreds of threads behind.
// The tenant whose stream the job on this thread became (Workers::become_stream), if it did.
thread_local std::optional<std::string> t_stream_tenant;

class Workers : public std::enable_shared_from_this<Workers> {
 public:
  Workers(int max, int max_streams, int per_tenant)
      : max_(max),
        // Floors of 8 for 16 tenants kept out of the extra units, the rest first come.
        streams_(FairShare<std::string>::Limits{static_cast<size_t>(max_streams), static_cast<size_t>(per_tenant),
                                                8, static_cast<size_t>(max_streams) / 2}) {}

  /// The job on this thread becomes a long-lived stream of `tenant`: it stops counting against
  /// `max` and counts against the streams' fair share instead, until it ends.
  Result<void> become_stream(std::string_view tenant) {
    if (t_stream_tenant) return {};
    std::lock_guard lk(mu_);
    const std::string t(tenant);
    if (!streams_.try_take(t)) {
      if (streams_.total() >= streams_.limits().node)
        return fail(ErrorCode::kNodeUnavailable, "this node holds its most long-lived requests (" +
                                                     std::to_string(streams_.limits().node) +
                                                     " terminals, watches, follows and commands); retry shortly");
      return fail(ErrorCode::kConcurrencyLimited,
                  "this project holds " + std::to_string(streams_.of(t)) + " long-lived requests on this node "
                  "(terminals, watches, follows and commands running), its share; end some first");
    }
    --busy_;
    t_stream_tenant = t;
    return {};
  }
  /// Runs `job` on a worker; false when `max` jobs are already running (or no thread can start).
  bool submit(std::function<void()> job) {
    std::lock_guard lk(mu_);
    if (busy_ >= max_) return false;
    jobs_.push_back(std::move(job));
    ++busy_;
    if (static_cast<int>(jobs_.size()) <= idle_) {
      cv_.notify_one();
      return true;
    }
    try {
      std::thread([self = shared_from_this()] { self->loop(); }).detach();
    } catch (const std::system_error& e) {
      jobs_.pop_back();
      --busy_;
      spdlog::warn("http: no thread for a request: {}", e.what());
      return false;
    }
    return true;
  }
  int max() const { return max_; }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      ++idle_;
      const bool got = cv_.wait_for(lk, kWorkerIdle, [&] { return !jobs_.empty(); });
      --idle_;
      if (!got) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lk.unlock();
      job();
      job = nullptr;  // its captures go before the next wait
      lk.lock();
      if (t_stream_tenant) {
        streams_.give(*t_stream_tenant);
        t_stream_tenant.reset();
      } else {
        --busy_;
      }
    }
  }

  const int max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int busy_ = 0;  // jobs submitted and not finished, less those that became streams
  int idle_ = 0;  // threads waiting for a job
  FairShare<std::string> streams_;  // jobs that became streams, by tenant
};

/// One client connection. Between requests it belongs to the asio thread (waiting for a head,
/// in the line of waiters); while a request runs, to that request's worker.
struct Conn {
  explicit Conn(tcp::socket s) : sock(std::move(s)), timer(sock.get_executor()), buf(kConnBufferLimit) {}
  tcp::socket sock;
  asio::steady_timer timer;
  // Bounded: Beast holds a chunk's header line (its extensions) whole in it before parsing,
  // with no limit of its own, so a client sending one without end would grow it without end.
  beast::flat_buffer buf;
  std::optional<bh::request_parser<bh::buffer_body>> parser;
  std::list<std::shared_ptr<Conn>>::iterator in_line;
  bool waiting = false;  // in the line of connections waiting for a request head
  bool closed = false;
};

using ConnPtr = std::shared_ptr<Conn>;

}  // namespace

std::string_view status_reason(int status) {
  auto r = bh::obsolete_reason(static_cast<bh::status>(status));
  return std::string_view(r.data(), r.size());
}

// Everything but `workers` and the connections lent to them is touched by the asio thread only.
struct Server::Impl {
  Impl(Config c, Handler h)
      : cfg(c),
        handler(std::move(h)),
        workers(std::make_shared<Workers>(
            c.max_requests, c.max_streams > 0 ? c.max_streams : std::max(1, c.max_requests / 2),
            c.max_streams_per_tenant > 0 ? c.max_streams_per_tenant
                                         : std::max(1, (c.max_streams > 0 ? c.max_streams : c.max_requests / 2) / 2))),
        accept_retry(io) {}

  void accept();
  void admit(tcp::socket sock);
  bool evict_oldest();
  void wait_head(const ConnPtr& c);
  void read_head(const ConnPtr& c);
  void arm(const ConnPtr& c, std::chrono::milliseconds after);
  /// Hands the request to a worker; with none free, looks again every kWorkerWaitStep up to
  /// kWorkerWaitSteps times, then answers 503 (`waited`: the looks so far).
  void dispatch(const ConnPtr& c, int waited = 0);
  void serve(ConnPtr c);
  bool run_handler(Conn& c);
  void leave_line(Conn& c);
  void close(const ConnPtr& c);

  asio::io_context io;
  std::optional<tcp::acceptor> acceptor;
  Config cfg;
  Handler handler;
  std::shared_ptr<Workers> workers;
  asio::steady_timer accept_retry;
  std::list<ConnPtr> line;  // connections waiting for a request head, longest-waiting first
  int open = 0;
};

void Server::Impl::accept() {
  acceptor->async_accept([this](beast::error_code ec, tcp::socket sock) {
    if (!acceptor->is_open()) return;
    if (!ec) {
      admit(std::move(sock));
      return accept();
    }
    // Out of file descriptors (or another passing failure): try again shortly, not in a spin.
    spdlog::warn("http: accept: {}", ec.message());
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([this](beast::error_code) { accept(); });
  });
}

void Server::Impl::admit(tcp::socket sock) {
  // Children (runsc, shims) must not inherit client connections.
  ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
  // At the cap the longest wait for a request head gives way: a client churning idle sockets
  // cannot keep out one that sends its request at once.
  if (open >= cfg.max_connections && !evict_oldest())
    return send_now(sock, own_error(ErrorCode::kNodeUnavailable, "too many connections; retry shortly"));
  beast::error_code ec;
  sock.set_option(tcp::no_delay(true), ec);
  ++open;
  wait_head(std::make_shared<Conn>(std::move(sock)));
}

bool Server::Impl::evict_oldest() {
  if (line.empty()) return false;
  close(ConnPtr(line.front()));
  return true;
}

void Server::Impl::wait_head(const ConnPtr& c) {
  c->parser.emplace();
  c->parser->header_limit(kHeaderLimit);
  c->parser->body_limit(boost::none);  // limits are per operation, enforced by read_chunk
  c->in_line = line.insert(line.end(), c);
  c->waiting = true;
  if (c->buf.size() > 0) return read_head(c);  // the next request came with the last one
  // A body read with room to spare (read_chunk) leaves the buffer large; a connection that
  // waits idle gives it back.
  if (c->buf.capacity() > kHeaderLimit) c->buf.shrink_to_fit();
  arm(c, cfg.idle_timeout);
  c->sock.async_wait(tcp::socket::wait_read, [this, c](beast::error_code ec) {
    if (c->closed) return;
    if (ec) return close(c);
    read_head(c);
  });
}

void Server::Impl::read_head(const ConnPtr& c) {
  arm(c, cfg.head_timeout);
  bh::async_read_header(c->sock, c->buf, *c->parser, [this, c](beast::error_code ec, size_t) {
    if (c->closed) return;
    if (!ec) {
      if (auto bad = framing_error(c->parser->get())) {
        send_now(c->sock, own_error(ErrorCode::kInvalidRequest, *bad));
        return close(c);
      }
      return dispatch(c);
    }
    if (ec != bh::error::end_of_stream && ec != asio::error::eof && ec != asio::error::connection_reset)
      send_now(c->sock, own_error(ErrorCode::kInvalidRequest, "malformed HTTP request: " + ec.message()));
    close(c);
  });
}

void Server::Impl::arm(const ConnPtr& c, std::chrono::milliseconds after) {
  c->timer.expires_after(after);
  c->timer.async_wait([this, c](beast::error_code ec) {
    // A handler whose expiry passed just before the timer was re-armed (or the head came)
    // still runs without error: only a connection still waiting, past its expiry, closes.
    if (ec || !c->waiting || c->timer.expiry() > std::chrono::steady_clock::now()) return;
    close(c);
  });
}

namespace {
/// A method as a metric label: the standard ones, else "other" (a client picks the token).
std::string_view method_label(std::string_view m) {
  for (std::string_view known : {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
    if (m == known) return known;
  return "other";
}

// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_requests = metrics::metrics().counter(
    "b3os_http_requests_total", "HTTP requests answered, by listener, route pattern, method and status",
    {"listener", "route", "method", "status"});
static auto& m_latency = metrics::metrics().histogram(
    "b3os_http_request_duration_seconds",
    "time from a request's head to the end of its answer, by listener and route pattern", {"listener", "route"});

/// b3os_http_requests_total and b3os_http_request_duration_seconds for one answered request.
void count_request(const std::string& listener, const std::string& route, std::string_view method, int status,
                   double seconds, bool status_class) {
  std::string st = status ? std::to_string(status) : "none";
  if (status && (status_class || status < 100 || status > 599))
    st = status >= 100 && status <= 599 ? std::to_string(status / 100) + "xx" : "other";
  m_requests.with({listener, route, std::string(method_label(method)), st}).inc();
  m_latency.with({listener, route}).observe(seconds);
}
}  // namespace

void Server::Impl::dispatch(const ConnPtr& c, int waited) {
  leave_line(*c);
  c->timer.cancel();
  if (workers->submit([this, c]() mutable { serve(std::move(c)); })) return;
  // Every worker busy: most answers are quick (a refusal, a small GET), so the request waits a
  // little for one (on the asio thread's timer, holding no thread) before it is refused.
  if (waited < kWorkerWaitSteps) {
    c->timer.expires_after(kWorkerWaitStep);
    c->timer.async_wait([this, c, waited](beast::error_code) {
      if (!c->closed) dispatch(c, waited + 1);
    });
    return;
  }
  count_request(cfg.name, "refused", c->parser->get().method_string(), 503, 0, false);
  send_now(c->sock, own_error(ErrorCode::kNodeUnavailable, "all " + std::to_string(workers->max()) +
                                                               " request workers are busy; retry shortly"));
  close(c);
}

// On a worker: the request, then the connection goes back to the asio thread.
void Server::Impl::serve(ConnPtr c) {
  const bool again = run_handler(*c);
  asio::post(io, [this, c = std::move(c), again] { again ? wait_head(c) : close(c); });
}

bool Server::Impl::run_handler(Conn& c) {
  const auto began = std::chrono::steady_clock::now();
  BeastExchange ex(c.sock, c.buf, *c.parser, cfg.body_timeout,
                   [w = workers.get()](std::string_view tenant) { return w->become_stream(tenant); });
  // Log lines this request causes on this thread carry its id (common/request_id.h).
  RequestIdScope rid{std::string(ex.request_id())};
  bool again = false;
  try {
    handler(ex);
    again = ex.reusable();
  } catch (const std::exception& e) {
    spdlog::error("handler threw: {}", e.what());
    if (!ex.responded())
      ex.respond(error_http_status(ErrorCode::kInternal), "application/json",
                 std::string(R"({"error":{"code":")") + std::string(error_code_name(ErrorCode::kInternal)) +
                     R"(","message":"unexpected error in b3osd"}})",
                 {});
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  count_request(cfg.name, ex.route(), ex.method(), ex.status(), secs, cfg.status_classes);
  if (cfg.access_log)  // the route's pattern, not the target: a client cannot make the line long
    spdlog::info("{} {} {} {} {:.1f} ms", cfg.name, method_label(ex.method()), ex.route(), ex.status(), secs * 1000);
  return again;
}

void Server::Impl::leave_line(Conn& c) {
  if (!c.waiting) return;
  c.waiting = false;
  line.erase(c.in_line);
}

void Server::Impl::close(const ConnPtr& c) {
  if (c->closed) return;
  c->closed = true;
  leave_line(*c);
  beast::error_code ec;
  c->timer.cancel();
  c->sock.close(ec);
  --open;
}

Server::Server(std::string host, int port, Config cfg, Handler handler)
    : impl_(std::make_unique<Impl>(cfg, std::move(handler))), host_(std::move(host)), port_(port) {}

Server::~Server() { stop(); }

Result<void> Server::listen() {
  beast::error_code ec;
  auto addr = asio::ip::make_address(host_, ec);
  if (ec) return fail(ErrorCode::kInvalidRequest, "listen address \"" + host_ + "\": " + ec.message());
  tcp::endpoint ep(addr, static_cast<unsigned short>(port_));
  impl_->acceptor.emplace(impl_->io);
  impl_->acceptor->open(ep.protocol(), ec);
  if (!ec) impl_->acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor->bind(ep, ec);
  if (!ec) impl_->acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return fail(ErrorCode::kInternal, "listening on " + host_ + ":" + std::to_string(port_) + ": " + ec.message());
  port_ = impl_->acceptor->local_endpoint().port();
  ::fcntl(impl_->acceptor->native_handle(), F_SETFD, FD_CLOEXEC);
  return {};
}

void Server::run() {
  impl_->accept();
  impl_->io.run();
}

void Server::stop() { impl_->io.stop(); }

}  // namespace b3os::http
