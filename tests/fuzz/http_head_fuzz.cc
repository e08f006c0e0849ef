// libFuzzer target for the in-sandbox relay's HTTP heads (agent/http_head.h), whose bytes are
// written by untrusted code inside a sandbox. Requests: the head is found in reads of arbitrary
// sizes (the resumed search must agree with one search of the whole buffer), parsed, framed and
// turned into the OPEN's headers; whatever is accepted must hold the parser's promises and
// parse back the same when written out again. Responses: whatever JSON the daemon's HEADER
// carries, a relayed head is one well-formed head that no field can split or reframe.

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "agent/http_head.h"

namespace {

using b3os::agent::HttpRequestHead;
using b3os::agent::Json;

void require(bool ok) {
  if (!ok) std::abort();
}

bool is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

bool all_tchars(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(c); });
}

bool has_ctl(std::string_view s, bool allow_tab) {
  return std::any_of(s.begin(), s.end(), [&](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && !(allow_tab && u == '\t')) || u == 0x7f;
  });
}

// The head as a careful client would write it.
std::string write_head(const HttpRequestHead& h) {
  std::string out = h.method + " " + h.path;
  if (!h.query.empty()) out += "?" + h.query;
  out += h.http11 ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n";
  for (const auto& [name, value] : h.headers) out += name + ": " + value + "\r\n";
  out += "\r\n";
  return out;
}

void check_request_head(const HttpRequestHead& h) {
  require(all_tchars(h.method));
  require(!h.path.empty() && h.path[0] == '/');
  require(h.path.find('?') == std::string::npos);
  for (std::string_view part : {std::string_view(h.path), std::string_view(h.query)}) {
    require(!has_ctl(part, /*allow_tab=*/false) && part.find(' ') == std::string_view::npos);
  }
  for (const auto& [name, value] : h.headers) {
    require(all_tchars(name));
    require(std::none_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }));
    require(!has_ctl(value, /*allow_tab=*/true));
    if (!value.empty()) {
      require(value.front() != ' ' && value.front() != '\t');
      require(value.back() != ' ' && value.back() != '\t');
    }
  }
}

void fuzz_request(std::string_view in, uint32_t seed, uint64_t max_body) {
  // The relay's reads: each search resumes where the previous one stopped.
  std::optional<size_t> end;
  size_t have = 0;
  while (have < in.size() && !end) {
    seed = seed * 1103515245u + 12345u;
    const size_t prev = have;
    have = std::min(in.size(), have + 1 + (seed >> 16) % 61);
    end = b3os::agent::find_head_end(in.substr(0, have), prev);
    require(end == b3os::agent::find_head_end(in.substr(0, have)));
  }
  if (end) require(*end >= 2 && *end <= in.size() && in[*end - 1] == '\n');

  // Parse the head found, or, with none, the whole input (parse takes any bytes).
  const std::string_view head = end ? in.substr(0, *end) : in;
  auto parsed = b3os::agent::parse_request_head(head);
  if (!parsed) {
    require(parsed.error().status == 400 && !parsed.error().message.empty());
    return;
  }
  check_request_head(*parsed);

  // Written out again, it is one complete head that parses to the same request.
  const std::string again = write_head(*parsed);
  require(b3os::agent::find_head_end(again) == again.size());
  auto reparsed = b3os::agent::parse_request_head(again);
  require(reparsed.has_value());
  require(reparsed->method == parsed->method && reparsed->path == parsed->path &&
          reparsed->query == parsed->query && reparsed->http11 == parsed->http11 &&
          reparsed->headers == parsed->headers);

  // Framing: one answer, and never a body without a Content-Length that says so.
  auto body = b3os::agent::request_body_length(*parsed, max_body);
  const bool has_te = parsed->find("transfer-encoding") != nullptr;
  const bool has_cl = parsed->find("content-length") != nullptr;
  if (body) {
    require(!has_te && *body <= max_body);
    if (!has_cl) require(*body == 0);
  } else {
    const int st = body.error().status;
    require(st == 400 || st == 411 || st == 413);
    require(has_te == (st == 411));
    if (st != 411) require(has_cl);
  }
  auto body_again = b3os::agent::request_body_length(*reparsed, max_body);
  require(body.has_value() == body_again.has_value());
  require(body ? *body == *body_again : body.error().status == body_again.error().status);

  // The OPEN's headers: never the connection's, the framing's or a credential.
  const Json relayed = b3os::agent::relayed_request_headers(*parsed);
  for (const char* dropped : {"host", "connection", "content-length", "transfer-encoding",
                              "authorization", "proxy-authorization", "expect", "upgrade"}) {
    require(!relayed.contains(dropped));
  }
  for (auto it = relayed.begin(); it != relayed.end(); ++it) {
    require(parsed->find(it.key()) != nullptr);
  }
  (void)b3os::agent::dump_json(relayed);
}

// A relayed response head: a status line, fields that are each one CRLF-terminated line, and
// the relay's own Connection: close; no field of the daemon's may frame the body.
void check_response_head(const std::string& out) {
  require(out.rfind("HTTP/1.1 ", 0) == 0);
  const std::string_view tail = "\r\nConnection: close\r\n\r\n";
  require(out.size() > tail.size() && out.compare(out.size() - tail.size(), tail.size(), tail) == 0);
  require(out.find("\r\n\r\n") == out.size() - 4);
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\r') require(i + 1 < out.size() && out[i + 1] == '\n');
    if (out[i] == '\n') require(i > 0 && out[i - 1] == '\r');
    require(out[i] != '\0');
  }
  size_t line_start = out.find("\r\n") + 2;
  const size_t fields_end = out.size() - tail.size() + 2;  // the Connection line
  while (line_start < fields_end) {
    const size_t eol = out.find("\r\n", line_start);
    const std::string_view line(out.data() + line_start, eol - line_start);
    const size_t colon = line.find(':');
    require(colon != std::string_view::npos && all_tchars(line.substr(0, colon)));
    std::string name(line.substr(0, colon));
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    require(name != "content-length" && name != "transfer-encoding" && name != "connection");
    line_start = eol + 2;
  }
}

void fuzz_response(std::string_view in) {
  const Json header = Json::parse(in.begin(), in.end(), nullptr, /*allow_exceptions=*/false);
  if (!header.is_discarded() && header.is_object()) {
    auto out = b3os::agent::response_head(header);
    if (out) check_response_head(*out);
  }
  // The relay's own error replies carry any message as valid JSON of the stated length.
  const int status = 400 + static_cast<int>(in.size() % 200);
  const std::string r = b3os::agent::error_response(
      b3os::agent::HttpError{status, "invalid_request", std::string(in)});
  const size_t end = r.find("\r\n\r\n");
  require(end != std::string::npos);
  const std::string body = r.substr(end + 4);
  require(r.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") < end);
  require(Json::accept(body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first byte picks requests or responses (low bit) and the body limit; the second
  // seeds the read sizes.
  const uint8_t mode = data[0];
  const uint32_t seed = data[1] | 1u;
  const std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  if (mode & 1) {
    fuzz_response(in);
  } else {
    const uint64_t limits[] = {0, 2, 4u << 20, UINT64_MAX};
    fuzz_request(in, seed, limits[(mode >> 1) & 3]);
  }
  return 0;
}
