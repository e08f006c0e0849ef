#include "daemon/http/proxy.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "daemon/sys/deadline_stream.h"

namespace b3os::http::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bh = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kChunk = 64 * 1024;
constexpr size_t kHeadLimit = 64 * 1024;
constexpr auto kSlice = std::chrono::milliseconds(500);   // how often a wait looks at the client
constexpr auto kWriteStall = std::chrono::seconds(60);    // a client write that makes no progress

/// Headers of one hop only (RFC 9110 7.6.1), never passed on; framing is set anew.
bool hop_by_hop(bh::field f, beast::string_view name) {
  switch (f) {
    case bh::field::connection:
    case bh::field::keep_alive:
    case bh::field::proxy_connection:
    case bh::field::te:
    case bh::field::trailer:
    case bh::field::transfer_encoding:
    case bh::field::content_length:
    case bh::field::upgrade:
      return true;
    default:
      return beast::iequals(name, "proxy-authenticate") || beast::iequals(name, "proxy-authorization");
  }
}

/// A header of the server's answer that the caller wants left out.
template <class Field>
bool dropped(const ProxyOptions& opts, const Field& f) {
  if (!opts.drop_response_header) return false;
  const auto name = f.name_string();
  const auto value = f.value();
  return opts.drop_response_header(std::string_view(name.data(), name.size()), std::string_view(value.data(), value.size()));
}

/// Copies the server's head fields into `res`: hop-by-hop ones (when `skip_hop`) and dropped
/// ones left out, rewritten ones changed.
template <class Head, class Res>
void copy_fields(const ProxyOptions& opts, const Head& head, Res& res, bool skip_hop) {
  for (const auto& f : head) {
    if ((skip_hop && hop_by_hop(f.name(), f.name_string())) || dropped(opts, f)) continue;
    if (opts.rewrite_response_header) {
      const auto name = f.name_string();
      const auto value = f.value();
      if (auto v = opts.rewrite_response_header(std::string_view(name.data(), name.size()),
                                                std::string_view(value.data(), value.size()))) {
        res.insert(name, *v);
        continue;
      }
    }
    res.insert(f.name_string(), f.value());
  }
}

/// The upstream as Beast's SyncWriteStream.
struct UpWriter {
  Upstream& up;
  std::chrono::milliseconds timeout;
  std::optional<Error> error;
  std::string joined;
  /// One upstream write per call: a head is a sequence of many small buffers (each field
  /// one), and each write is a frame to the agent and a send to the app.
  template <class Buffers>
  size_t write_some(const Buffers& buffers, beast::error_code& ec) {
    const size_t total = beast::buffer_bytes(buffers);
    std::string_view bytes;
    auto range = beast::buffers_range_ref(buffers);
    if (auto first = range.begin(); first != range.end() && std::next(first) == range.end()) {
      bytes = std::string_view(static_cast<const char*>((*first).data()), (*first).size());
    } else {
      joined.resize(total);
      asio::buffer_copy(asio::buffer(joined), buffers);
      bytes = joined;
    }
    if (auto r = up.write(bytes, Clock::now() + timeout); !r) {
      error = r.error();
      ec = asio::error::broken_pipe;
      return 0;
    }
    return total;
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = write_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
};

/// The upstream as Beast's SyncReadStream: waits in slices, giving up when the client went
/// away or nothing came for the idle timeout.
struct UpReader {
  Upstream& up;
  Exchange& ex;
  std::chrono::milliseconds idle;
  std::optional<Error> error;
  const std::function<bool()>* abandon = nullptr;
  template <class Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    auto b = *asio::buffer_sequence_begin(buffers);
    const auto until = Clock::now() + idle;
    for (;;) {
      auto r = up.read(static_cast<char*>(b.data()), b.size(), std::min(until, Clock::now() + kSlice));
      if (r) {
        if (*r == 0) ec = asio::error::eof;
        return *r;
      }
      const bool abandoned = abandon && *abandon && (*abandon)();
      if (r.error().code == ErrorCode::kUpstreamTimeout && Clock::now() < until && !ex.client_gone() && !abandoned)
        continue;
      error = r.error().code == ErrorCode::kUpstreamTimeout && Clock::now() >= until
                  ? Error{ErrorCode::kUpstreamTimeout,
                          "the app sent nothing for " + std::to_string(idle.count() / 1000) + " s", 0}
                  : r.error();
      ec = asio::error::timed_out;
      return 0;
    }
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }
};

sys::DeadlineStream client_writer(tcp::socket& sock) {
  sys::DeadlineStream out(sock.native_handle(), sock.get_executor());
  out.arm(Clock::now() + kWriteStall, nullptr);
  return out;
}

bool send_all(int fd, const char* p, size_t n) {
  const auto until = Clock::now() + kWriteStall;
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    if (Clock::now() >= until) return false;
    pollfd pfd{fd, POLLOUT, 0};
    (void)::poll(&pfd, 1, 100);
  }
  return true;
}

/// After a 101: bytes both ways until either side ends, or nothing moved for `idle`.
void tunnel(tcp::socket& sock, beast::flat_buffer& client_buf, beast::flat_buffer& up_buf, Upstream& up,
            std::chrono::milliseconds idle) {
  const int fd = sock.native_handle();
  std::atomic<int64_t> last{steady_ms()};
  std::atomic<bool> done{false};
  const auto idle_passed = [&] { return steady_ms() - last.load() >= idle.count(); };
  std::thread from_client([&] {
    if (client_buf.size() > 0) {
      auto d = client_buf.data();
      if (!up.write(std::string_view(static_cast<const char*>(d.data()), d.size()), Clock::now() + idle)) {
        done = true;
        return;
      }
      client_buf.consume(client_buf.size());
    }
    char tmp[kChunk];
    while (!done) {
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(kSlice.count()));
      if (r == 0) {
        if (idle_passed()) break;
        continue;
      }
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, MSG_DONTWAIT);
      if (n > 0) {
        last = steady_ms();
        if (!up.write(std::string_view(tmp, static_cast<size_t>(n)), Clock::now() + idle)) break;
        continue;
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n == 0) up.close_write();  // the client's half-close goes on to the app
      break;
    }
    done = true;
  });
  if (up_buf.size() > 0) {
    auto d = up_buf.data();
    if (!send_all(fd, static_cast<const char*>(d.data()), d.size())) done = true;
    up_buf.consume(up_buf.size());
  }
  char tmp[kChunk];
  // The client's half-close ends the thread above; the app's answer may still come.
  while (!(done && idle_passed())) {
    auto r = up.read(tmp, sizeof tmp, Clock::now() + kSlice);
    if (!r) {
      if (r.error().code == ErrorCode::kUpstreamTimeout && !idle_passed()) continue;
      break;
    }
    if (*r == 0) break;
    last = steady_ms();
    if (!send_all(fd, tmp, *r)) break;
  }
  done = true;
  ::shutdown(fd, SHUT_RDWR);
  from_client.join();
}

}  // namespace

Result<void> relay(Exchange& ex, tcp::socket& sock, beast::flat_buffer& buf, bh::request_parser<bh::buffer_body>& parser,
                   Upstream& up, const ProxyOptions& opts, ProxyState& st) {
  const auto& in = parser.get();
  const bool upgrade = parser.upgrade();
  const bool head_request = in.method() == bh::verb::head;

  // ---- the request ----
  bh::request<bh::buffer_body> req;
  req.method_string(in.method_string());
  req.target(opts.target);
  req.version(11);
  for (const auto& f : in) {
    if (hop_by_hop(f.name(), f.name_string()) || f.name() == bh::field::cookie || f.name() == bh::field::expect) continue;
    const std::string_view name(f.name_string().data(), f.name_string().size());
    if (std::any_of(opts.drop_request_headers.begin(), opts.drop_request_headers.end(), [&](const std::string& d) {
          return beast::iequals(d, beast::string_view(name.data(), name.size()));
        }))
      continue;
    req.insert(f.name_string(), f.value());
  }
  if (!opts.cookie.empty()) req.set(bh::field::cookie, opts.cookie);
  for (const auto& [k, v] : opts.request_headers) req.set(k, v);
  if (upgrade) {
    req.set(bh::field::connection, "Upgrade");
    req.set(bh::field::upgrade, in[bh::field::upgrade]);
  } else {
    // One connection inside per request: the app may close once it answered.
    req.set(bh::field::connection, "close");
  }
  const bool body = opts.body ? !opts.body->empty() : ex.has_body();
  // A client that asked to be told before it sends its body (Expect: 100-continue) is told
  // by the server: an early answer (a 413, a 401) then reaches it before a byte is sent,
  // as when it talks to the server itself.
  bool expect_continue = false;
  if (body && !opts.body && !upgrade) {
    if (auto e = in.find(bh::field::expect); e != in.end() && beast::iequals(e->value(), "100-continue"))
      expect_continue = true;
    // A large or chunked body is asked for too (opts.expect_large_bodies): the server may refuse
    // it from its head alone (413 for a declared length past its limit), and then the client
    // must hear so instead of this relay waiting on a body the server will never read.
    const auto len = parser.content_length();
    if (opts.expect_large_bodies && (!len || *len > kChunk)) expect_continue = true;
  }
  if (expect_continue) req.set(bh::field::expect, "100-continue");
  if (opts.body) {
    if (body) req.content_length(opts.body->size());
  } else if (parser.chunked()) {
    req.chunked(true);
  } else if (auto len = parser.content_length(); len && *len > 0) {
    req.content_length(*len);
  }
  req.body().data = nullptr;
  req.body().more = body;
  UpWriter w{up, opts.idle_timeout, {}};
  bh::request_serializer<bh::buffer_body> rs(req);
  beast::error_code ec;
  bh::write_header(w, rs, ec);
  if (ec) return fail(w.error.value_or(Error{ErrorCode::kUpstreamError, "sending the request: " + ec.message(), 0}));

  UpReader r{up, ex, opts.idle_timeout, {}, &opts.abandon};
  beast::flat_buffer up_buf;
  std::optional<bh::response_parser<bh::buffer_body>> rp;
  // Reads one response head into rp; false when none came (r.error or ec say why).
  auto read_head = [&](UpReader& reader) {
    rp.emplace();
    rp->header_limit(kHeadLimit);
    rp->body_limit(boost::none);
    if (head_request) rp->skip(true);
    bh::read_header(reader, up_buf, *rp, ec);
    return !ec;
  };
  bool answered = false;  // the final response head is in rp: the body is not sent
  if (expect_continue) {
    // A server that says nothing for 3 s gets the body anyway (RFC 9110 10.1.1).
    UpReader quick{up, ex, std::chrono::milliseconds(3000), {}, &opts.abandon};
    if (read_head(quick)) {
      answered = rp->get().result_int() >= 200;
    } else if (quick.error && quick.error->code == ErrorCode::kUpstreamTimeout && up_buf.size() == 0) {
      ec = {};
    } else {
      if (quick.error) return fail(*quick.error);
      return fail(ErrorCode::kUpstreamError, "the server answered no HTTP response (" + ec.message() + ")");
    }
  }
  if (answered) {
    // Its body stays with the client; this connection cannot carry another request.
  } else if (body && opts.body) {
    req.body().data = const_cast<char*>(opts.body->data());  // only read: buffer_body takes void*
    req.body().size = opts.body->size();
    req.body().more = false;
    bh::write(w, rs, ec);
    if (ec == bh::error::need_buffer) ec = {};
    if (ec) return fail(w.error.value_or(Error{ErrorCode::kUpstreamError, "sending the request body: " + ec.message(), 0}));
  } else if (body) {
    char chunk[kChunk];
    for (;;) {
      auto n = ex.read_chunk(chunk, sizeof chunk, ~uint64_t{0});
      if (!n) return fail(n.error());
      req.body().data = *n ? chunk : nullptr;
      req.body().size = *n;
      req.body().more = *n != 0;
      bh::write(w, rs, ec);
      if (ec == bh::error::need_buffer) ec = {};
      if (ec) {
        // The server may have answered early and closed (a 413 for a body past its limit):
        // its answer is what the client should see.
        if (read_head(r) && rp->get().result_int() >= 200) {
          answered = true;
          break;
        }
        return fail(w.error.value_or(Error{ErrorCode::kUpstreamError, "sending the request body: " + ec.message(), 0}));
      }
      if (*n == 0) break;
    }
  }

  // ---- the response head (1xx other than 101 are the app's business, not the client's) ----
  while (!answered) {
    if (!read_head(r)) {
      if (r.error) return fail(*r.error);
      return fail(ErrorCode::kUpstreamError, "the app answered no HTTP response (" + ec.message() + ")");
    }
    const unsigned s = rp->get().result_int();
    if (s >= 200 || s == 101) break;
  }
  ec = {};
  const auto& head = rp->get();
  const unsigned status = head.result_int();

  if (status == 101) {
    if (!upgrade) return fail(ErrorCode::kUpstreamError, "the app switched protocols on a request that asked for no upgrade");
    bh::response<bh::empty_body> res{bh::status::switching_protocols, 11};
    copy_fields(opts, head, res, false);
    for (auto& [k, v] : opts.response_headers) res.insert(k, v);
    auto cw = client_writer(sock);
    bh::write(cw, res, ec);
    st.responded = true;
    st.status = 101;
    if (ec) return {};
    tunnel(sock, buf, up_buf, up, opts.idle_timeout);
    return {};  // an upgraded connection never carries another request
  }

  bh::response<bh::buffer_body> res;
  res.result(status);
  res.reason(head.reason());
  res.version(11);
  copy_fields(opts, head, res, true);
  for (auto& [k, v] : opts.response_headers) res.insert(k, v);
  const bool no_body = head_request || status == 204 || status == 304 || (status >= 100 && status < 200);
  bool close_after = false;
  if (no_body) {
    if (auto len = rp->content_length(); len && head_request) res.content_length(*len);
  } else if (rp->chunked()) {
    res.chunked(true);
  } else if (auto len = rp->content_length()) {
    res.content_length(*len);
  } else if (in.version() >= 11) {
    res.chunked(true);  // a body that ends when the app closes goes on chunked: keep-alive stays
  } else {
    close_after = true;
  }
  const bool keep_alive = in.keep_alive() && parser.is_done() && !close_after;
  res.keep_alive(keep_alive);
  res.body().data = nullptr;
  res.body().more = !no_body;
  bh::response_serializer<bh::buffer_body> sr(res);
  auto cw = client_writer(sock);
  bh::write_header(cw, sr, ec);
  st.responded = true;
  st.status = static_cast<int>(status);
  if (ec) return {};
  if (no_body) {
    st.reusable = keep_alive;
    return {};
  }
  // Beast reads at most what the buffer has room for: a buffer sized for the head alone made
  // every read of a large body a few KB, and each a send to the client (7 KB on average: 78
  // MB/s for 64 MiB; 400+ with room for 256 KiB). Short answers keep the small buffer.
  if (auto len = rp->content_length(); !len || *len > kChunk) up_buf.reserve(4 * kChunk);
  char chunk[kChunk];
  while (!rp->is_done()) {
    rp->get().body().data = chunk;
    rp->get().body().size = sizeof chunk;
    bh::read_some(r, up_buf, *rp, ec);
    if (ec == bh::error::need_buffer) ec = {};
    const size_t n = sizeof chunk - rp->get().body().size;
    if (n > 0) {
      res.body().data = chunk;
      res.body().size = n;
      res.body().more = true;
      auto out = client_writer(sock);
      beast::error_code wec;
      bh::write(out, sr, wec);
      if (wec == bh::error::need_buffer) wec = {};
      if (wec) return {};  // the client went away
    }
    if (ec) {
      // The app broke off mid-body: the client sees the body cut short, never complete.
      spdlog::debug("preview: the app's response broke off: {}", r.error ? r.error->message : ec.message());
      beast::error_code ignored;
      sock.shutdown(tcp::socket::shutdown_both, ignored);
      return {};
    }
  }
  res.body().data = nullptr;
  res.body().size = 0;
  res.body().more = false;
  auto out = client_writer(sock);
  bh::write(out, sr, ec);
  if (ec == bh::error::need_buffer) ec = {};
  st.reusable = keep_alive && !ec;
  return {};
}

}  // namespace b3os::http::detail
