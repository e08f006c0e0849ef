#include "daemon/gateway/upstream.h"

#include <poll.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace b3os::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bh = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {
constexpr const char* kUnreachable = "upstream unreachable: ";
constexpr const char* kTimedOut = "upstream timed out: ";
constexpr const char* kCancelled = "cancelled: ";
constexpr const char* kBroken = "upstream broke the connection: ";

Error upstream_error(const char* kind, const std::string& what) {
  return Error{ErrorCode::kNodeUnavailable, std::string(kind) + what, 0};
}
}  // namespace

UpstreamFailure classify(const Error& e) {
  if (e.message.rfind(kTimedOut, 0) == 0) return UpstreamFailure::kTimeout;
  if (e.message.rfind(kCancelled, 0) == 0) return UpstreamFailure::kCancelled;
  if (e.message.rfind(kUnreachable, 0) == 0) return UpstreamFailure::kUnreachable;
  return UpstreamFailure::kBroken;
}

struct UpstreamCall::Impl {
  asio::io_context io;
  tcp::socket sock{io};
  beast::flat_buffer buf;
  bh::response_parser<bh::buffer_body> parser;
  char chunk[64 * 1024];

  /// Waits until the socket is readable (or has buffered bytes), polling `cancelled`.
  Result<void> wait_readable(Deadline deadline, const std::function<bool()>& cancelled) {
    // A backstop for reads that block on a partial frame already buffered: the socket
    // itself gives up at the deadline.
    auto left_us = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    timeval tv{static_cast<time_t>(std::max<int64_t>(left_us, 1000) / 1000000),
               static_cast<suseconds_t>(std::max<int64_t>(left_us, 1000) % 1000000)};
    ::setsockopt(sock.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (buf.size() > 0) return {};
    for (;;) {
      if (cancelled && cancelled()) return fail(upstream_error(kCancelled, "the caller went away"));
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return fail(upstream_error(kTimedOut, "no answer in time"));
      pollfd p{sock.native_handle(), POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100)));
      if (r > 0) return {};
      if (r < 0 && errno != EINTR) return fail(upstream_error(kBroken, "poll failed"));
    }
  }
};

UpstreamCall::UpstreamCall(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UpstreamCall::~UpstreamCall() {
  if (impl_) {
    beast::error_code ec;
    impl_->sock.shutdown(tcp::socket::shutdown_both, ec);
    impl_->sock.close(ec);
  }
}

Result<std::unique_ptr<UpstreamCall>> UpstreamCall::start(const UpstreamRequest& req, Deadline deadline,
                                                          const std::function<bool()>& cancelled) {
  auto impl = std::make_unique<Impl>();
  beast::error_code ec;
  // Numeric addresses need no resolver; names are resolved by the system (the operator's
  // configuration names the upstream, never a sandbox).
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(req.host, req.port, ec);
  if (ec) return fail(upstream_error(kUnreachable, "resolving " + req.host + ": " + ec.message()));
  // A connect with a deadline: non-blocking connect, then poll for writability.
  bool connected = false;
  for (auto& ep : endpoints) {
    impl->sock.open(ep.endpoint().protocol(), ec);
    if (ec) continue;
    impl->sock.non_blocking(true, ec);
    impl->sock.connect(ep.endpoint(), ec);
    if (ec == asio::error::would_block || ec == asio::error::in_progress) {
      for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return fail(upstream_error(kTimedOut, "connecting to " + req.host + ":" + req.port));
        if (cancelled && cancelled()) return fail(upstream_error(kCancelled, "the caller went away"));
        pollfd p{impl->sock.native_handle(), POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 100))) > 0) break;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(impl->sock.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
      ec = err ? beast::error_code(err, boost::system::system_category()) : beast::error_code();
    }
    if (!ec) {
      connected = true;
      break;
    }
    impl->sock.close(ec);
  }
  if (!connected)
    return fail(upstream_error(kUnreachable, "connecting to " + req.host + ":" + req.port + ": " +
                                                 (ec ? ec.message() : std::string("no address"))));
  impl->sock.non_blocking(false, ec);
  impl->sock.set_option(tcp::no_delay(true), ec);

  bh::request<bh::string_body> r;
  r.method(bh::string_to_verb(req.method));
  r.target(req.target);
  r.version(11);
  r.set(bh::field::host, req.host + ":" + req.port);
  r.set(bh::field::user_agent, "b3osd-gateway");
  for (auto& [k, v] : req.headers) r.set(k, v);
  r.body() = req.body;
  r.prepare_payload();
  r.keep_alive(false);
  bh::write(impl->sock, r, ec);
  if (ec) return fail(upstream_error(kBroken, "sending the request: " + ec.message()));

  impl->parser.body_limit(boost::none);
  impl->parser.header_limit(64 * 1024);
  while (!impl->parser.is_header_done()) {
    if (auto w = impl->wait_readable(deadline, cancelled); !w) return fail(w.error());
    bh::read_header(impl->sock, impl->buf, impl->parser, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) return fail(upstream_error(kBroken, "reading the response head: " + ec.message()));
  }
  return std::unique_ptr<UpstreamCall>(new UpstreamCall(std::move(impl)));
}

int UpstreamCall::status() const { return static_cast<int>(impl_->parser.get().result_int()); }

std::string UpstreamCall::header(const std::string& name) const {
  auto it = impl_->parser.get().find(name);
  return it == impl_->parser.get().end() ? std::string() : std::string(it->value());
}

Result<std::optional<std::string>> UpstreamCall::read(Deadline deadline, const std::function<bool()>& cancelled) {
  auto& p = impl_->parser;
  while (!p.is_done()) {
    p.get().body().data = impl_->chunk;
    p.get().body().size = sizeof impl_->chunk;
    if (auto w = impl_->wait_readable(deadline, cancelled); !w) return fail(w.error());
    beast::error_code ec;
    bh::read_some(impl_->sock, impl_->buf, p, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec == bh::error::end_of_stream || ec == asio::error::eof) {
      if (p.is_done()) break;
      return fail(upstream_error(kBroken, "the body ended early"));
    }
    if (ec) return fail(upstream_error(kBroken, ec.message()));
    size_t n = sizeof impl_->chunk - p.get().body().size;
    if (n > 0) return std::optional<std::string>(std::string(impl_->chunk, n));
  }
  return std::optional<std::string>();
}

}  // namespace b3os::gateway
