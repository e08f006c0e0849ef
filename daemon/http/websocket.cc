#include "daemon/http/websocket.h"

#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <spdlog/spdlog.h>

namespace b3os::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bh = boost::beast::http;
namespace ws = boost::beast::websocket;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxMessage = 1u << 20;

// One connection: Beast's stream and everything it does run on `ioc`, which only the request's
// thread runs; other threads reach it through send() and close(), which post to it.
class Session final : public WebSocketPeer, public std::enable_shared_from_this<Session> {
 public:
  Session(asio::io_context& ioc, tcp::socket sock, const WebSocketHandler& h)
      : ioc_(ioc), ws_(std::move(sock)), h_(h) {}

  bool send(std::string message, bool binary) override {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return closed_ || queued_ < kMaxQueued; });
    if (closed_) return false;
    queued_ += message.size();
    queue_.push_back({std::move(message), binary});
    lk.unlock();
    asio::post(ioc_, [self = shared_from_this()] { self->write_next(); });
    return true;
  }

  void close(uint16_t code, std::string reason) override {
    asio::post(ioc_, [self = shared_from_this(), code, reason = std::move(reason)] {
      if (self->closing_) return;
      self->closing_ = true;
      // Once what is queued has gone (write_next closes when the queue is empty).
      self->close_code_ = code;
      self->close_reason_ = reason;
      self->write_next();
    });
  }

  void start(const bh::request<bh::buffer_body>& req, std::chrono::milliseconds idle) {
    ws::stream_base::timeout t{};
    t.handshake_timeout = std::chrono::seconds(15);
    t.idle_timeout = idle;
    t.keep_alive_pings = true;  // a ping at half the idle time; no answer closes it
    ws_.set_option(t);
    ws_.set_option(ws::stream_base::decorator([](ws::response_type& res) { res.set(bh::field::server, "b3osd"); }));
    ws_.read_message_max(kMaxMessage);
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish(ec);
      self->open_ = true;
      if (self->h_.opened) self->h_.opened(*self);
      self->read_next();
    });
  }

  void resume_reading() override {
    asio::post(ioc_, [self = shared_from_this()] {
      if (!self->paused_ || self->done_) return;
      self->paused_ = false;
      self->read_next();
    });
  }

  bool was_open() const { return open_; }

 private:
  void read_next() {
    ws_.async_read(buf_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->finish(ec);
      const auto data = self->buf_.data();
      bool more = true;
      if (self->h_.message)
        more = self->h_.message(std::string_view(static_cast<const char*>(data.data()), data.size()),
                                self->ws_.got_binary());
      self->buf_.consume(self->buf_.size());
      if (more) self->read_next();
      else self->paused_ = true;  // resume_reading() reads on
    });
  }

  void write_next() {
    if (writing_ || done_) return;
    std::unique_lock lk(mu_);
    if (queue_.empty()) {
      lk.unlock();
      if (closing_ && !close_sent_) {
        close_sent_ = true;
        writing_ = true;
        ws_.async_close(ws::close_reason(static_cast<ws::close_code>(close_code_), close_reason_), [self = shared_from_this()](beast::error_code ec) {
          self->writing_ = false;
          // The client's close frame (or the time-out) ends the read loop, which finishes.
          if (ec) self->finish(ec);
        });
      }
      return;
    }
    Msg& m = queue_.front();  // stays put: a deque's push_back moves no element
    lk.unlock();
    writing_ = true;
    ws_.binary(m.binary);
    ws_.async_write(asio::buffer(m.data), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      {
        std::lock_guard g(self->mu_);
        self->queued_ -= self->queue_.front().data.size();
        self->queue_.pop_front();
      }
      self->cv_.notify_all();
      if (ec) return self->finish(ec);
      self->write_next();
    });
  }

  void finish(beast::error_code ec) {
    if (done_) return;
    done_ = true;
    if (ec && ec != ws::error::closed && ec != asio::error::operation_aborted && ec != beast::error::timeout &&
        ec != asio::error::eof && ec != asio::error::connection_reset)
      spdlog::debug("websocket: {}", ec.message());
    {
      std::lock_guard g(mu_);
      closed_ = true;
    }
    cv_.notify_all();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(ws_).close(ignored);
    if (open_ && h_.closed) h_.closed();
  }

  struct Msg {
    std::string data;
    bool binary;
  };
  asio::io_context& ioc_;
  ws::stream<tcp::socket> ws_;
  const WebSocketHandler& h_;
  beast::flat_buffer buf_;
  // The queue is shared with sending threads; the rest belongs to ioc_'s thread.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Msg> queue_;
  size_t queued_ = 0;
  bool closed_ = false;
  bool writing_ = false;
  bool closing_ = false;
  bool close_sent_ = false;
  bool done_ = false;
  bool open_ = false;
  bool paused_ = false;
  uint16_t close_code_ = 1000;
  std::string close_reason_;
};

}  // namespace

bool is_websocket_upgrade(const bh::request<bh::buffer_body>& req) { return ws::is_upgrade(req); }

Result<void> run_websocket(int fd, const bh::request<bh::buffer_body>& req, const WebSocketHandler& handler,
                           std::chrono::milliseconds idle_timeout) {
  // A duplicate of the server's socket, on an io_context of this thread's own: the server's
  // asio thread never sees this connection again (it is closed, not reused, after).
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (dup < 0) return fail(errno_error(ErrorCode::kInternal, "dup", errno));
  asio::io_context ioc;
  beast::error_code ec;
  tcp::socket sock(ioc);
  sock.assign(tcp::v4(), dup, ec);  // the family only names the protocol for asio
  if (ec) {
    ::close(dup);
    return fail(ErrorCode::kInternal, "websocket: " + ec.message());
  }
  auto s = std::make_shared<Session>(ioc, std::move(sock), handler);
  s->start(req, idle_timeout);
  ioc.run();
  if (!s->was_open()) return fail(ErrorCode::kInvalidRequest, "the WebSocket handshake failed");
  return {};
}

}  // namespace b3os::http::detail
