#include "daemon/net/http_guard.h"

#include <algorithm>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>

#include "daemon/net/peek.h"

namespace b3os::net {

namespace http = boost::beast::http;
using boost::system::error_code;

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x - 'A' + 'a' : x) == (y >= 'A' && y <= 'Z' ? y - 'A' + 'a' : y);
         });
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The comma-separated tokens of a header value, blanks around each trimmed.
template <class F>
void for_each_token(std::string_view v, F f) {
  while (true) {
    const size_t comma = v.find(',');
    std::string_view t = v.substr(0, comma);
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    f(t);
    if (comma == std::string_view::npos) return;
    v.remove_prefix(comma + 1);
  }
}

std::string_view as_text(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

}  // namespace

// One request as Beast reads it: the head's facts the guard judges, the body skipped. A
// callback that finds something to refuse says why in `fault` and stops the parse.
class HttpGuard::RequestParser : public http::basic_parser<true> {
 public:
  RequestParser() {
    header_limit(static_cast<std::uint32_t>(kMaxPeek));
    body_limit(boost::none);  // bodies are counted, never stored
  }
  int version = 0;
  bool header_done = false;
  int content_lengths = 0, transfer_encodings = 0, upgrades = 0;
  bool h2c = false, http2_settings = false;
  std::string upgrade;  // the Upgrade header's value
  std::string fault;

 private:
  void stop(error_code& ec, std::string why) {
    fault = std::move(why);
    ec = http::error::bad_value;
  }
  void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int v, error_code&) override {
    version = v;
  }
  void on_response_impl(int, boost::beast::string_view, int, error_code&) override {}
  void on_field_impl(http::field f, boost::beast::string_view name, boost::beast::string_view value,
                     error_code& ec) override {
    const std::string_view val(value.data(), value.size());
    // Fields after the head are a chunked body's trailer: some servers merge them into the
    // head, where a Host among them would be a second one the guard never judged.
    if (header_done) return stop(ec, "trailer fields after a chunked body");
    switch (f) {
      case http::field::content_length:
        // Beast also takes "5, 5" and repeats of one value; a server may not.
        if (++content_lengths > 1) return stop(ec, "two Content-Length headers");
        if (!all_digits(val)) return stop(ec, "Content-Length is not a plain number");
        break;
      case http::field::transfer_encoding:
        // Anything but plain chunked is framing a server may read otherwise than Beast does
        // (gzip alone has no framing at all).
        if (++transfer_encodings > 1) return stop(ec, "two Transfer-Encoding headers");
        if (!iequals(val, "chunked")) return stop(ec, "Transfer-Encoding other than chunked");
        break;
      case http::field::upgrade:
        if (++upgrades > 1) return stop(ec, "two Upgrade headers");
        upgrade = std::string(val);
        for_each_token(val, [&](std::string_view t) {
          if (iequals(t.substr(0, 3), "h2c")) h2c = true;
        });
        break;
      case http::field::http2_settings:
        http2_settings = true;
        break;
      default:
        (void)name;
        break;
    }
  }
  void on_header_impl(error_code&) override { header_done = true; }
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  size_t on_body_impl(boost::beast::string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code&) override {
    return body.size();
  }
  void on_finish_impl(error_code&) override {}
};

// The server's answer to a websocket Upgrade: only its status line matters.
class HttpGuard::ResponseParser : public http::basic_parser<false> {
 public:
  ResponseParser() { header_limit(static_cast<std::uint32_t>(kMaxPeek)); }
  int status = 0;

 private:
  void on_request_impl(http::verb, boost::beast::string_view, boost::beast::string_view, int, error_code&) override {}
  void on_response_impl(int code, boost::beast::string_view, int, error_code&) override { status = code; }
  void on_field_impl(http::field, boost::beast::string_view, boost::beast::string_view, error_code&) override {}
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  size_t on_body_impl(boost::beast::string_view body, error_code&) override { return body.size(); }
  void on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) override {}
  size_t on_chunk_body_impl(std::uint64_t, boost::beast::string_view body, error_code&) override {
    return body.size();
  }
  void on_finish_impl(error_code&) override {}
};

HttpGuard::HttpGuard(std::string host) : host_(std::move(host)) {}
HttpGuard::~HttpGuard() = default;

void HttpGuard::refuse(std::string why) {
  state_ = State::kRefused;
  why_ = std::move(why);
  request_.reset();
  response_.reset();
}

bool HttpGuard::judge_head(std::span<const uint8_t> head) {
  const RequestParser& p = *request_;
  const std::string label = "request " + std::to_string(requests_ + 1) + ": ";
  // The same strict reading as the first request's (peek.h): CRLF only, no obs-fold or
  // control bytes, exactly one Host, an absolute-form target agreeing with it, no CONNECT.
  const Peek pk = peek_http(head);
  if (pk.status != PeekStatus::kDone) {
    refuse(label + (pk.status == PeekStatus::kInvalid ? pk.why : "unreadable head"));
    return false;
  }
  if (pk.host != host_) {
    refuse(label + "names " + pk.host + ", but the connection was allowed for " + host_);
    return false;
  }
  if (p.h2c || p.http2_settings) {
    refuse(label + "an upgrade to HTTP/2 (h2c)");
    return false;
  }
  if (p.upgrades > 0) {
    if (!iequals(p.upgrade, "websocket")) {
      refuse(label + "an Upgrade to " + p.upgrade + " (only websocket is allowed)");
      return false;
    }
    if (requests_ > 0) {
      refuse(label + "a websocket Upgrade after the connection's first request");
      return false;
    }
    if (p.version != 11 || p.transfer_encodings > 0 || (p.content_lengths > 0 && !request_->is_done())) {
      refuse(label + "a websocket Upgrade must be an HTTP/1.1 request without a body");
      return false;
    }
  }
  if (p.transfer_encodings > 0 && p.version != 11) {
    refuse(label + "Transfer-Encoding in an HTTP/1.0 request");
    return false;
  }
  ++requests_;
  if (p.upgrades > 0) state_ = State::kAwaitStatus;
  return true;
}

size_t HttpGuard::on_client(std::span<const uint8_t> data) {
  if (state_ == State::kTunnel) return data.size();
  if (state_ != State::kRequests) return 0;
  size_t cleared = 0;
  // pending_: bytes of the current head Beast has consumed (its request line) that are not
  // cleared yet; they stay at the start of what the caller presents.
  while (state_ == State::kRequests && cleared + pending_ < data.size()) {
    if (!request_) request_ = std::make_unique<RequestParser>();
    RequestParser& p = *request_;
    const bool in_head = !p.is_header_done();
    const auto rest = data.subspan(cleared + pending_);
    error_code ec;
    const size_t n = p.put(boost::asio::const_buffer(rest.data(), rest.size()), ec);
    const std::string label = "request " + std::to_string(requests_ + (in_head ? 1 : 0)) + ": ";
    // Refused: what is counted as cleared ends where the refused part begins (a body's bytes
    // before a bad chunk are counted; the proxy sends none of the read anyway).
    if (!p.fault.empty()) {
      refuse(label + p.fault);
      return in_head ? cleared : cleared + n;
    }
    if (ec == http::error::need_more) {
      if (in_head) {
        pending_ += n;
      } else {
        cleared += n;  // body bytes; a chunk-size line or trailer still incomplete is held
      }
      break;
    }
    if (ec) {
      const std::string_view start = as_text(data.subspan(cleared));
      refuse(label + (in_head && start.substr(0, 4) == "PRI " ? "the HTTP/2 connection preface (prior knowledge)"
                                                                : "not HTTP/1.x: " + ec.message()));
      return in_head ? cleared : cleared + n;
    }
    if (in_head) {
      const size_t head = pending_ + n;
      pending_ = 0;
      if (!judge_head(data.subspan(cleared, head))) return cleared;
      cleared += head;
      p.eager(true);  // the body in as few calls as the bytes allow
    } else {
      cleared += n;
    }
    if (p.is_done()) request_.reset();
  }
  if (state_ == State::kRequests && data.size() - cleared >= kMaxPeek) {
    refuse("request " + std::to_string(requests_ + 1) +
           ": more than 16 KiB without a complete request head or chunk-size line");
  }
  return cleared;
}

size_t HttpGuard::on_server(std::span<const uint8_t> data) {
  if (state_ == State::kRefused) return 0;
  if (state_ != State::kAwaitStatus) return data.size();
  size_t cleared = 0;
  while (state_ == State::kAwaitStatus && cleared + resp_pending_ < data.size()) {
    if (!response_) response_ = std::make_unique<ResponseParser>();
    const auto rest = data.subspan(cleared + resp_pending_);
    error_code ec;
    const size_t n = response_->put(boost::asio::const_buffer(rest.data(), rest.size()), ec);
    if (ec == http::error::need_more) {
      resp_pending_ += n;
      break;
    }
    if (ec) {
      refuse("the answer to the websocket Upgrade is not an HTTP/1.x response: " + ec.message());
      return cleared;
    }
    cleared += resp_pending_ + n;
    resp_pending_ = 0;
    const int status = response_->status;
    response_.reset();
    if (status == 101) {
      state_ = State::kTunnel;  // a websocket to the allowed host: nothing more to read
      return data.size();
    }
    if (status >= 200) {
      state_ = State::kRequests;  // no upgrade: requests again, the answer's body goes on as it is
      return data.size();
    }
    // 1xx other than 101 (100 Continue, 103 Early Hints): the final status is still to come.
  }
  if (state_ == State::kAwaitStatus && data.size() - cleared >= kMaxPeek) {
    refuse("the answer to the websocket Upgrade has no complete status head in 16 KiB");
    return cleared;
  }
  return cleared;
}

}  // namespace b3os::net
