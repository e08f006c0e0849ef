#pragma once
// The HTTP/1.1 pieces of the in-sandbox relay (http_relay.h): parsing a request head,
// checking its body framing, and writing response heads and the relay's own error replies.
// Pure functions over bytes; no sockets here.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/request.h"

namespace b3os::agent {

/// Largest request head (request line and headers, with the blank line) the relay accepts.
inline constexpr size_t kMaxRequestHead = 64u * 1024;

/// A reply the relay writes itself: status, an API error code and a message for the body.
struct HttpError {
  int status = 400;
  std::string code;
  std::string message;
};

struct HttpRequestHead {
  std::string method;
  std::string path;   // the target up to '?'
  std::string query;  // after '?', without it; empty when absent
  bool http11 = true;  // false for HTTP/1.0
  /// Header fields in order, names lower-cased, values with surrounding blanks trimmed.
  std::vector<std::pair<std::string, std::string>> headers;

  /// The value of the first header named `name` (lower case), if any.
  const std::string* find(std::string_view name) const;
};

/// The size of the head at the start of `buf` (through the blank line that ends it), or
/// nullopt while the blank line has not arrived. Lines may end in CRLF or a bare LF. `from`
/// is how much of `buf` an earlier call already searched, so that a head arriving in many
/// small reads is not searched from the start each time.
std::optional<size_t> find_head_end(std::string_view buf, size_t from = 0);

/// Parses a complete head; anything malformed is a 400.
tl::expected<HttpRequestHead, HttpError> parse_request_head(std::string_view head);

/// The request's headers as the relay's OPEN carries them: {"name": "value"}, repeated fields
/// joined with ", ", and without the fields about this connection, the body's framing or
/// credentials (host, connection, content-length, transfer-encoding, authorization, ...).
Json relayed_request_headers(const HttpRequestHead& head);

/// What the head says about the body: its Content-Length (0 when absent), or the error to
/// answer: 411 for a Transfer-Encoding (chunked bodies are not relayed), 413 above `max_body`,
/// 400 for a malformed or contradictory Content-Length.
tl::expected<uint64_t, HttpError> request_body_length(const HttpRequestHead& head,
                                                      uint64_t max_body);

/// The status line and headers of a relayed response (from the daemon's HEADER JSON
/// {"status":N,"headers":{...}}), ending in "Connection: close" and the blank line. Header
/// fields that would frame the body or break the head (CR, LF, bad names) are left out.
tl::expected<std::string, std::string> response_head(const Json& header);

/// A complete response with an OpenAI-shaped JSON error body, closing the connection.
std::string error_response(const HttpError& e);

/// The standard reason phrase of `status` ("OK", "Not Found"); a class name when unknown.
std::string_view reason_phrase(int status);

}  // namespace b3os::agent
