#include "agent/http_head.h"

#include <algorithm>
#include <cctype>

namespace b3os::agent {

namespace {

HttpError bad_request(std::string message) {
  return HttpError{400, "invalid_request", std::move(message)};
}

// RFC 9110 token characters (method and header names). Not strchr for the symbols: it finds
// the terminating NUL too, and a NUL in a name ("authorization\0") would pass the relay's
// filters for a reader that stops at it.
bool is_tchar(unsigned char c) {
  static constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  return std::isalnum(c) != 0 || kSymbols.find(static_cast<char>(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(c); });
}

// Field values may hold any byte but the controls other than tab.
bool is_field_value(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7f;
  });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits the head into lines without their CRLF (or LF); leading blank lines are dropped, as
// RFC 9112 2.2 allows, and so is the blank line that ends the head.
std::vector<std::string_view> head_lines(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {
      if (lines.empty()) continue;
      break;
    }
    lines.push_back(line);
  }
  return lines;
}

// The request target in origin form ("/p?q"); an absolute form ("http://host:port/p?q", as a
// client configured with a proxy sends it) is reduced to that.
std::optional<std::string_view> origin_form(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() > scheme.size() && lower(target.substr(0, scheme.size())) == scheme) {
      target.remove_prefix(scheme.size());
      const size_t slash = target.find_first_of("/?");
      if (slash == std::string_view::npos) return std::string_view("/");
      target.remove_prefix(slash);
      break;
    }
  }
  if (target.empty() || target.front() != '/') return std::nullopt;
  return target;
}

// Headers that describe this connection or the framing of its body, not the request: the
// relay frames both directions itself. authorization and proxy-authorization are left out too:
// the daemon's gateway decides who pays, never a credential from inside the sandbox.
bool is_dropped_request_header(std::string_view name) {
  static constexpr std::string_view kDropped[] = {
      "host", "connection", "content-length", "transfer-encoding", "authorization",
      "proxy-authorization", "proxy-connection", "keep-alive", "expect", "te", "trailer",
      "upgrade"};
  return std::find(std::begin(kDropped), std::end(kDropped), name) != std::end(kDropped);
}

bool is_dropped_response_header(std::string_view name) {
  static constexpr std::string_view kDropped[] = {
      "connection", "content-length", "transfer-encoding", "keep-alive", "proxy-connection",
      "te", "trailer", "upgrade"};
  return std::find(std::begin(kDropped), std::end(kDropped), name) != std::end(kDropped);
}

}  // namespace

const std::string* HttpRequestHead::find(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::optional<size_t> find_head_end(std::string_view buf, size_t from) {
  const size_t start = buf.find_first_not_of("\r\n");
  if (start == std::string_view::npos) return std::nullopt;
  // A blank line ends the head: "\n\n" or "\n\r\n". Resume a little before `from`, where an
  // earlier search may have seen only part of one.
  size_t i = std::max(start, from >= 2 ? from - 2 : 0);
  for (;;) {
    i = buf.find('\n', i);
    if (i == std::string_view::npos) return std::nullopt;
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
    ++i;
  }
}

tl::expected<HttpRequestHead, HttpError> parse_request_head(std::string_view head) {
  const auto lines = head_lines(head);
  if (lines.empty()) return tl::unexpected(bad_request("empty request"));

  // request-line = method SP request-target SP HTTP-version
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    return tl::unexpected(bad_request("malformed request line"));
  }
  HttpRequestHead req;
  const std::string_view method = rl.substr(0, sp1);
  const std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = rl.substr(sp2 + 1);
  if (!is_token(method)) return tl::unexpected(bad_request("malformed request method"));
  if (version == "HTTP/1.1") {
    req.http11 = true;
  } else if (version == "HTTP/1.0") {
    req.http11 = false;
  } else {
    return tl::unexpected(bad_request("unsupported HTTP version"));
  }
  const auto origin = origin_form(target);
  if (!origin || !is_field_value(*origin) || origin->find_first_of(" \t") != std::string::npos) {
    return tl::unexpected(bad_request("malformed request target"));
  }
  req.method = std::string(method);
  const size_t q = origin->find('?');
  req.path = std::string(origin->substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(origin->substr(q + 1));

  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line.front() == ' ' || line.front() == '\t') {
      return tl::unexpected(bad_request("folded header lines are not supported"));
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
      return tl::unexpected(bad_request("malformed header line"));
    }
    const std::string_view value = trim(line.substr(colon + 1));
    if (!is_field_value(value)) {
      return tl::unexpected(bad_request("control character in a header value"));
    }
    req.headers.emplace_back(lower(line.substr(0, colon)), std::string(value));
  }
  return req;
}

Json relayed_request_headers(const HttpRequestHead& head) {
  Json out = Json::object();
  for (const auto& [name, value] : head.headers) {
    if (is_dropped_request_header(name)) continue;
    auto it = out.find(name);
    if (it == out.end()) {
      out[name] = value;
    } else {
      it->get_ref<std::string&>() += ", " + value;
    }
  }
  return out;
}

tl::expected<uint64_t, HttpError> request_body_length(const HttpRequestHead& head,
                                                      uint64_t max_body) {
  if (head.find("transfer-encoding") != nullptr) {
    return tl::unexpected(HttpError{411, "length_required",
                                    "chunked request bodies are not supported; send the body "
                                    "with a Content-Length"});
  }
  // The value as its digits without leading zeros ("007" is 7), so that values are compared
  // whatever their size and a long run of zeros does not make a small length look huge.
  std::optional<std::string_view> length;
  for (const auto& [name, value] : head.headers) {
    if (name != "content-length") continue;
    // "Content-Length: 42, 42" (a list of one value repeated) is allowed; anything else not.
    std::string_view rest = value;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view item = trim(rest.substr(0, comma));
      const bool digits = std::all_of(item.begin(), item.end(),
                                      [](char c) { return c >= '0' && c <= '9'; });
      if (item.empty() || !digits) {
        return tl::unexpected(bad_request("malformed Content-Length"));
      }
      const size_t first = item.find_first_not_of('0');
      const std::string_view n = first == std::string_view::npos ? "0" : item.substr(first);
      if (length && *length != n) return tl::unexpected(bad_request("conflicting Content-Length"));
      length = n;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  if (!length) return 0;
  uint64_t n = 0;
  bool too_large = false;
  for (char c : *length) {
    const auto d = static_cast<uint64_t>(c - '0');
    if (n > (UINT64_MAX - d) / 10) {
      too_large = true;
      break;
    }
    n = n * 10 + d;
  }
  if (too_large || n > max_body) {
    return tl::unexpected(HttpError{
        413, "payload_too_large",
        "request body too large: at most " + std::to_string(max_body) + " bytes are accepted"});
  }
  return n;
}

tl::expected<std::string, std::string> response_head(const Json& header) {
  const auto st = header.find("status");
  if (st == header.end() || !st->is_number_integer()) {
    return tl::unexpected(std::string("no integer status"));
  }
  const int64_t status = st->get<int64_t>();
  // 1xx are not final answers and 101 would switch protocols: neither can be relayed.
  if (status < 200 || status > 599) {
    return tl::unexpected("status " + std::to_string(status) + " cannot be relayed");
  }
  std::string out = "HTTP/1.1 " + std::to_string(status) + " ";
  out += reason_phrase(static_cast<int>(status));
  out += "\r\n";
  const auto hs = header.find("headers");
  if (hs != header.end() && !hs->is_null()) {
    if (!hs->is_object()) return tl::unexpected(std::string("headers is not an object"));
    for (auto it = hs->begin(); it != hs->end(); ++it) {
      const std::string& name = it.key();
      const Json& v = it.value();
      if (!is_token(name) || is_dropped_response_header(lower(name))) continue;
      // A value is a string, or an array of them (one line each, e.g. set-cookie).
      const auto add = [&](const Json& item) {
        if (!item.is_string()) return;
        const std::string& value = item.get_ref<const std::string&>();
        if (!is_field_value(value)) return;
        out += name;
        out += ": ";
        out += value;
        out += "\r\n";
      };
      if (v.is_array()) {
        for (const auto& item : v) add(item);
      } else {
        add(v);
      }
    }
  }
  out += "Connection: close\r\n\r\n";
  return out;
}

std::string error_response(const HttpError& e) {
  const Json body = {{"error",
                      {{"message", e.message},
                       {"type", e.status >= 500 ? "server_error" : "invalid_request_error"},
                       {"param", nullptr},
                       {"code", e.code}}}};
  const std::string b = dump_json(body) + "\n";
  std::string out = "HTTP/1.1 " + std::to_string(e.status) + " ";
  out += reason_phrase(e.status);
  out += "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(b.size()) +
         "\r\nConnection: close\r\n\r\n";
  out += b;
  return out;
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: break;
  }
  if (status >= 200 && status < 300) return "Success";
  if (status >= 300 && status < 400) return "Redirection";
  if (status >= 400 && status < 500) return "Client Error";
  return "Server Error";
}

}  // namespace b3os::agent
