#include "cli/http_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "common/unique_fd.h"

namespace b3os::cli {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::string_view kUserAgent = "b3os-cli/0.1";
// How much of an error body (or a non-JSON reply) is kept and quoted.
constexpr size_t kMaxErrorBody = 1 << 20;
constexpr size_t kQuotedBodyChars = 200;

Error net_error(std::string_view what, const std::string& url, const boost::system::error_code& ec) {
  std::string reason = ec == http::error::partial_message || ec == http::error::end_of_stream
                           ? "the connection closed before the reply was complete"
                           : ec.message();
  return Error{ErrorCode::kNodeUnavailable, std::string(what) + " " + url + ": " + reason,
               ec.value()};
}

// One open connection to the daemon, with its read buffer.
struct Connection {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  boost::beast::flat_buffer buffer;
};

Result<void> connect(Connection& conn, const ApiUrl& url) {
  boost::system::error_code ec;
  tcp::resolver resolver(conn.ioc);
  auto endpoints = resolver.resolve(url.host, std::to_string(url.port), ec);
  if (ec) {
    return fail(ErrorCode::kNodeUnavailable,
                "cannot resolve host \"" + url.host + "\" of " + url.original + ": " + ec.message());
  }
  asio::connect(conn.socket, endpoints, ec);
  if (ec) {
    return fail(ErrorCode::kNodeUnavailable, "cannot connect to b3osd at " + url.original + ": " +
                                                 ec.message() + " (is b3osd running?)");
  }
  return {};
}

template <typename Body>
void set_common_headers(http::request<Body>& req, const ApiUrl& url, const std::string& api_key) {
  req.set(http::field::host, url.host_header());
  req.set(http::field::user_agent, kUserAgent);
  req.set(http::field::accept, "application/json");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
}

HttpResponse to_response(const http::response<http::string_body>& res) {
  HttpResponse out;
  out.status = res.result_int();
  out.content_type = std::string(res[http::field::content_type]);
  out.body = res.body();
  return out;
}

// Reads a whole reply into memory, bounded by kMaxJsonBody.
Result<HttpResponse> read_reply(Connection& conn, const std::string& url) {
  http::response_parser<http::string_body> parser;
  parser.body_limit(HttpClient::kMaxJsonBody);
  boost::system::error_code ec;
  http::read(conn.socket, conn.buffer, parser, ec);
  if (ec) return fail(net_error("reading the reply from", url, ec));
  return to_response(parser.get());
}

bool is_2xx(int status) { return status >= 200 && status < 300; }

}  // namespace

HttpClient::HttpClient(ApiUrl url, std::string api_key)
    : url_(std::move(url)), api_key_(std::move(api_key)) {}

Result<HttpResponse> HttpClient::request(std::string_view method, const std::string& path,
                                         const Json* body) {
  if (body == nullptr) return exchange(method, path, "", {}, {}, nullptr);
  auto text = dump_json(*body);
  if (!text) return fail(text.error());
  return exchange(method, path, *text, {{"Content-Type", "application/json"}}, {}, nullptr);
}

Result<HttpResponse> HttpClient::exchange(std::string_view method, const std::string& path, const std::string& body,
                                          const std::vector<std::pair<std::string, std::string>>& headers,
                                          const std::vector<std::string>& want_headers,
                                          std::vector<std::pair<std::string, std::string>>* headers_out,
                                          const std::function<void(const HttpResponse&, std::string_view)>& on_body) {
  http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) return fail(ErrorCode::kInvalidRequest, "unknown HTTP method " + std::string(method));
  http::request<http::string_body> req{verb, url_.target(path), 11};
  set_common_headers(req, url_, api_key_);
  for (auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  Connection conn;
  if (auto ok = connect(conn, url_); !ok) return fail(ok.error());
  boost::system::error_code ec;
  http::write(conn.socket, req, ec);
  if (ec) return fail(net_error("sending the request to", url_.original, ec));
  http::response_parser<http::string_body> parser;
  parser.body_limit(HttpClient::kMaxJsonBody);
  if (on_body) {
    http::read_header(conn.socket, conn.buffer, parser, ec);
    if (ec) return fail(net_error("reading the reply from", url_.original, ec));
    HttpResponse head;
    head.status = parser.get().result_int();
    head.content_type = std::string(parser.get()[http::field::content_type]);
    size_t seen = 0;
    while (!parser.is_done()) {
      http::read_some(conn.socket, conn.buffer, parser, ec);
      if (ec) return fail(net_error("reading the reply from", url_.original, ec));
      const std::string& b = parser.get().body();
      if (b.size() > seen) {
        on_body(head, std::string_view(b).substr(seen));
        seen = b.size();
      }
    }
  } else {
    http::read(conn.socket, conn.buffer, parser, ec);
    if (ec) return fail(net_error("reading the reply from", url_.original, ec));
  }
  if (headers_out)
    for (auto& name : want_headers)
      if (auto it = parser.get().find(name); it != parser.get().end())
        headers_out->emplace_back(name, std::string(it->value()));
  return to_response(parser.get());
}

Result<HttpResponse> HttpClient::upload(const std::string& path, const std::string& local_path,
                                        std::string_view method, std::string_view content_type) {
  http::verb verb = http::string_to_verb(method);
  if (verb == http::verb::unknown) return fail(ErrorCode::kInvalidRequest, "unknown HTTP method " + std::string(method));
  UniqueFd fd(::open(local_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(errno_error(ErrorCode::kInvalidRequest, "open " + local_path, errno));
  struct stat st{};
  if (::fstat(fd.get(), &st) != 0) {
    return fail(errno_error(ErrorCode::kInvalidRequest, "stat " + local_path, errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(ErrorCode::kInvalidRequest, local_path + " is not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);

  http::request<http::empty_body> req{verb, url_.target(path), 11};
  set_common_headers(req, url_, api_key_);
  req.set(http::field::content_type, content_type);
  req.content_length(size);

  Connection conn;
  if (auto ok = connect(conn, url_); !ok) return fail(ok.error());
  boost::system::error_code ec;
  http::request_serializer<http::empty_body> serializer{req};
  http::write_header(conn.socket, serializer, ec);

  std::vector<char> chunk(kChunkSize);
  uint64_t sent = 0;
  while (!ec && sent < size) {
    ssize_t n = ::read(fd.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_error(ErrorCode::kInvalidRequest, "read " + local_path, errno));
    if (n == 0) {
      return fail(ErrorCode::kConflict, local_path + " shrank while it was being uploaded");
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(n), size - sent));
    asio::write(conn.socket, asio::buffer(chunk.data(), take), ec);
    sent += take;
  }
  // The daemon may reject the upload early (401, 413, ...) and close: its reply explains more
  // than a broken pipe does, so try to read it either way.
  auto reply = read_reply(conn, url_.original);
  if (!ec) return reply;
  if (reply) return reply;
  return fail(net_error("sending the file to", url_.original, ec));
}

Result<HttpResponse> HttpClient::download(const std::string& path, ByteSink& sink) {
  http::request<http::empty_body> req{http::verb::get, url_.target(path), 11};
  set_common_headers(req, url_, api_key_);
  req.set(http::field::accept, "application/octet-stream, application/json");

  Connection conn;
  if (auto ok = connect(conn, url_); !ok) return fail(ok.error());
  boost::system::error_code ec;
  http::write(conn.socket, req, ec);
  if (ec) return fail(net_error("sending the request to", url_.original, ec));

  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  http::read_header(conn.socket, conn.buffer, parser, ec);
  if (ec) return fail(net_error("reading the reply from", url_.original, ec));

  HttpResponse out;
  out.status = parser.get().result_int();
  out.content_type = std::string(parser.get()[http::field::content_type]);
  const bool streaming = is_2xx(out.status);
  if (streaming) {
    if (auto ok = sink.open(); !ok) return fail(ok.error());
  }

  std::vector<char> chunk(kChunkSize);
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    // read_some, not read: read would wait for a full chunk, and a followed build log comes a
    // line at a time.
    http::read_some(conn.socket, conn.buffer, parser, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail(net_error("reading the download from", url_.original, ec));
    size_t n = chunk.size() - parser.get().body().size;
    if (n == 0) continue;
    if (streaming) {
      if (auto ok = sink.write(chunk.data(), n); !ok) return fail(ok.error());
    } else if (out.body.size() < kMaxErrorBody) {
      out.body.append(chunk.data(), std::min(n, kMaxErrorBody - out.body.size()));
    }
  }
  return out;
}

ErrorCode error_code_from_name(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kCapacityUnavailable); ++i) {
    auto code = static_cast<ErrorCode>(i);
    if (error_code_name(code) == name) return code;
  }
  return ErrorCode::kInternal;
}

Error api_error(const HttpResponse& resp) {
  auto doc = Json::parse(resp.body, nullptr, false);
  if (!doc.is_discarded() && doc.is_object() && doc.contains("error") && doc["error"].is_object()) {
    const auto& e = doc["error"];
    std::string code = e.value("code", std::string("unknown"));
    std::string message = e.value("message", std::string("(no message)"));
    return Error{error_code_from_name(code), code + ": " + message};
  }
  std::string quoted = resp.body.substr(0, kQuotedBodyChars);
  while (!quoted.empty() && (quoted.back() == '\n' || quoted.back() == '\r')) quoted.pop_back();
  std::string message = "http_" + std::to_string(resp.status) + ": unexpected reply";
  if (!quoted.empty()) message += " \"" + quoted + (resp.body.size() > kQuotedBodyChars ? "...\"" : "\"");
  return Error{ErrorCode::kInternal, message};
}

Result<Json> json_reply(const HttpResponse& resp) {
  if (!is_2xx(resp.status)) return fail(api_error(resp));
  if (resp.body.empty()) return Json::object();
  auto doc = Json::parse(resp.body, nullptr, false);
  if (doc.is_discarded()) {
    return fail(ErrorCode::kInternal,
                "the daemon answered " + std::to_string(resp.status) + " with a body that is not JSON");
  }
  return doc;
}

Result<std::string> dump_json(const Json& body) {
  try {
    return body.dump();
  } catch (const nlohmann::json::type_error& e) {
    return fail(ErrorCode::kInvalidRequest,
                "the request contains text that is not valid UTF-8 (use upload for binary data)");
  }
}

}  // namespace b3os::cli
