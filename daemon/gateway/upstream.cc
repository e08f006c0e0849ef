#include "daemon/gateway/upstream.h"

#include "daemon/sys/deadline_stream.h"

#include <poll.h>
#include <sys/socket.h>

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
tl::unexpected<UpstreamError> failed(UpstreamFailure kind, std::string what) {
  return tl::unexpected<UpstreamError>(UpstreamError{kind, std::move(what)});
}
}  // namespace

using sys::DeadlineStream;

struct UpstreamCall::Impl {
  asio::io_context io;
  tcp::socket sock{io};
  std::optional<DeadlineStream> stream;
  beast::flat_buffer buf;
  bh::response_parser<bh::buffer_body> parser;
  char chunk[64 * 1024];

  /// Turns a Beast error into ours, telling time-outs and cancellations apart.
  tl::unexpected<UpstreamError> failure(const char* doing, const beast::error_code& ec) {
    if (stream->was_cancelled()) return failed(UpstreamFailure::kCancelled, "the caller went away");
    if (stream->timed_out()) return failed(UpstreamFailure::kTimeout, std::string("no answer in time while ") + doing);
    return failed(UpstreamFailure::kBroken, std::string(doing) + ": " + ec.message());
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

UpstreamResult<std::unique_ptr<UpstreamCall>> UpstreamCall::start(const UpstreamRequest& req, Deadline deadline,
                                                                  const std::function<bool()>& cancelled, bool* sent) {
  auto impl = std::make_unique<Impl>();
  beast::error_code ec;
  // Numeric addresses need no resolver; names are resolved by the system (the operator's
  // configuration names the upstream, never a sandbox).
  tcp::resolver resolver(impl->io);
  auto endpoints = resolver.resolve(req.host, req.port, ec);
  if (ec) return failed(UpstreamFailure::kUnreachable, "resolving " + req.host + ": " + ec.message());
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
        if (left <= 0) return failed(UpstreamFailure::kTimeout, "connecting to " + req.host + ":" + req.port);
        if (cancelled && cancelled()) return failed(UpstreamFailure::kCancelled, "the caller went away");
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
    return failed(UpstreamFailure::kUnreachable,
                  "connecting to " + req.host + ":" + req.port + ": " + (ec ? ec.message() : std::string("no address")));
  impl->sock.set_option(tcp::no_delay(true), ec);
  // The socket stays non-blocking: every read and write below waits through DeadlineStream.
  impl->stream.emplace(impl->sock.native_handle(), impl->io.get_executor());
  impl->stream->arm(deadline, &cancelled);

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
  bh::write(*impl->stream, r, ec);
  if (ec) return impl->failure("sending the request", ec);
  if (sent) *sent = true;

  impl->parser.body_limit(boost::none);
  impl->parser.header_limit(64 * 1024);
  bh::read_header(*impl->stream, impl->buf, impl->parser, ec);
  if (ec) return impl->failure("reading the response head", ec);
  return std::unique_ptr<UpstreamCall>(new UpstreamCall(std::move(impl)));
}

int UpstreamCall::status() const { return static_cast<int>(impl_->parser.get().result_int()); }

UpstreamResult<std::optional<std::string>> UpstreamCall::read(Deadline deadline, const std::function<bool()>& cancelled) {
  auto& p = impl_->parser;
  impl_->stream->arm(deadline, &cancelled);
  while (!p.is_done()) {
    p.get().body().data = impl_->chunk;
    p.get().body().size = sizeof impl_->chunk;
    beast::error_code ec;
    bh::read_some(*impl_->stream, impl_->buf, p, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec == bh::error::end_of_stream || ec == asio::error::eof) {
      if (p.is_done()) break;
      return failed(UpstreamFailure::kBroken, "the body ended early");
    }
    if (ec) return impl_->failure("reading the answer", ec);
    size_t n = sizeof impl_->chunk - p.get().body().size;
    if (n > 0) return std::optional<std::string>(std::string(impl_->chunk, n));
  }
  return std::optional<std::string>();
}

}  // namespace b3os::gateway
