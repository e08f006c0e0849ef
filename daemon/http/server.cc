#include "daemon/http/server.h"

#include "daemon/sys/deadline_stream.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>
#include <thread>

namespace b3os::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bh = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr auto kWriteStall = std::chrono::seconds(60);  // a response write that makes no progress

tl::unexpected<Error> too_large(uint64_t limit) {
  return fail(ErrorCode::kPayloadTooLarge, "the request body is larger than this operation's limit of " +
                                               std::to_string(limit) + " bytes");
}

class BeastExchange final : public Exchange {
 public:
  BeastExchange(tcp::socket& sock, beast::flat_buffer& buf, bh::request_parser<bh::buffer_body>& parser)
      : sock_(sock), buf_(buf), parser_(parser) {}

  std::string_view method() const override { return req().method_string(); }
  std::string_view target() const override { return req().target(); }
  std::string_view header(std::string_view name) const override {
    auto it = req().find(beast::string_view(name.data(), name.size()));
    return it == req().end() ? std::string_view() : std::string_view(it->value().data(), it->value().size());
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
    beast::error_code ec;
    bh::read(sock_, buf_, parser_, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) return fail(ErrorCode::kInvalidRequest, "reading the request body: " + ec.message());
    size_t n = cap - body.size;
    read_ += n;
    if (read_ > limit) return too_large(limit);
    return n;
  }

  void respond(int status, std::string_view content_type, std::string body, const Headers& headers) override {
    bh::response<bh::string_body> res{static_cast<bh::status>(status), 11};
    res.set(bh::field::server, "b3osd");
    if (!content_type.empty()) res.set(bh::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    for (auto& [k, v] : headers) res.set(k, v);
    res.body() = std::move(body);
    res.keep_alive(keep_alive());
    res.prepare_payload();
    beast::error_code ec;
    auto out = writer();
    bh::write(out, res, ec);
    responded_ = true;
    if (ec) broken_ = true;
  }

  Result<void> begin_stream(int status, std::string_view content_type, uint64_t length, const Headers& headers) override {
    stream_res_.result(static_cast<bh::status>(status));
    stream_res_.version(11);
    stream_res_.set(bh::field::server, "b3osd");
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
  bool keep_alive() const { return parser_.get().keep_alive(); }

  void send_continue() {
    if (continued_) return;
    continued_ = true;
    auto e = req().find(bh::field::expect);
    if (e != req().end() && beast::iequals(e->value(), "100-continue")) {
      static constexpr char k100[] = "HTTP/1.1 100 Continue\r\n\r\n";
      beast::error_code ec;
      asio::write(sock_, asio::buffer(k100, sizeof k100 - 1), ec);
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
  bool continued_ = false;
  bool responded_ = false;
  bool broken_ = false;
  uint64_t read_ = 0;
  uint64_t remaining_ = 0;
  bh::response<bh::buffer_body> stream_res_;
  std::optional<bh::response_serializer<bh::buffer_body>> serializer_;
};

void serve_connection(tcp::socket sock, const Handler& handler) {
  beast::error_code ec;
  sock.set_option(tcp::no_delay(true), ec);
  beast::flat_buffer buf;
  for (;;) {
    bh::request_parser<bh::buffer_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(boost::none);  // limits are per operation, enforced by read_chunk
    bh::read_header(sock, buf, parser, ec);
    if (ec == bh::error::end_of_stream || ec == asio::error::connection_reset || ec == asio::error::eof) return;
    if (ec) {
      // A request we cannot parse: answer 400 in the API's error shape and close.
      std::string body = R"({"error":{"code":"invalid_request","message":"malformed HTTP request: )" + ec.message() + "\"}}";
      bh::response<bh::string_body> res{bh::status::bad_request, 11};
      res.set(bh::field::content_type, "application/json");
      res.body() = body;
      res.keep_alive(false);
      res.prepare_payload();
      bh::write(sock, res, ec);
      return;
    }
    BeastExchange ex(sock, buf, parser);
    try {
      handler(ex);
    } catch (const std::exception& e) {
      spdlog::error("handler threw: {}", e.what());
      if (!ex.responded())
        ex.respond(error_http_status(ErrorCode::kInternal), "application/json",
                   std::string(R"({"error":{"code":")") + std::string(error_code_name(ErrorCode::kInternal)) +
                       R"(","message":"unexpected error in b3osd"}})",
                   {});
      return;
    }
    if (!ex.reusable()) return;
  }
}

}  // namespace

std::string_view status_reason(int status) {
  auto r = bh::obsolete_reason(static_cast<bh::status>(status));
  return std::string_view(r.data(), r.size());
}

struct Server::Impl {
  asio::io_context io;
  std::optional<tcp::acceptor> acceptor;
  std::atomic<int> active{0};
  std::atomic<bool> stopping{false};
};

Server::Server(std::string host, int port, int max_connections, Handler handler)
    : impl_(std::make_unique<Impl>()), host_(std::move(host)), port_(port), max_connections_(max_connections),
      handler_(std::move(handler)) {}

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
  while (!impl_->stopping) {
    tcp::socket sock(impl_->io);
    beast::error_code ec;
    impl_->acceptor->accept(sock, ec);
    if (ec) {
      if (impl_->stopping) return;
      continue;
    }
    // Children (runsc, shims) must not inherit client connections.
    ::fcntl(sock.native_handle(), F_SETFD, FD_CLOEXEC);
    if (impl_->active.load() >= max_connections_) {
      static constexpr char k503[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
          "Content-Length: 85\r\n\r\n{\"error\":{\"code\":\"node_unavailable\",\"message\":\"too many connections; retry shortly\"}}";
      asio::write(sock, asio::buffer(k503, sizeof k503 - 1), ec);
      continue;
    }
    ++impl_->active;
    std::thread([this, s = std::move(sock)]() mutable {
      serve_connection(std::move(s), handler_);
      --impl_->active;
    }).detach();
  }
}

void Server::stop() {
  impl_->stopping = true;
  if (impl_->acceptor && impl_->acceptor->is_open()) {
    beast::error_code ec;
    impl_->acceptor->close(ec);
  }
}

}  // namespace b3os::http
