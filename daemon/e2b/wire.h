#pragma once
// The E2B SDK's wire, without I/O (docs/e2b.md): the Connect protocol's JSON envelopes and
// errors that its in-sandbox API (envd) speaks, the shapes of its control plane's errors, and
// the proto3 JSON mapping of the few messages b3os answers with. Pure functions, fuzzed.
//
// Written here rather than generated: Debian 12 packages no Connect library for C++, and the
// JSON mapping of these messages is a few fields each. Their names are checked against the
// descriptors the pinned SDK carries (tests/e2b/proto_names.mjs).

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/result.h"

namespace b3os::e2b {

/// The Connect code of an error ("not_found", "invalid_argument", ...).
std::string_view connect_code(ErrorCode code);
/// The HTTP status the Connect protocol gives a code (a unary call's error answer).
int connect_http_status(std::string_view connect_code);
/// A Connect error body: {"code": "...", "message": "..."}.
nlohmann::json connect_error(const Error& e);

/// Envelope flags of Connect's streaming encoding.
inline constexpr uint8_t kFlagCompressed = 0x01;
inline constexpr uint8_t kFlagEndStream = 0x02;
/// One envelope: a flag byte, the payload's length (4 bytes, big-endian), the payload.
std::string envelope(uint8_t flags, std::string_view payload);
/// The end-of-stream envelope: {} or {"error": {...}}.
std::string end_stream(const std::optional<Error>& error);

/// A request of a server-streaming call is one envelope holding the JSON message. Returns
/// the message; 400 invalid_request when the body is not exactly one uncompressed envelope of
/// at most `limit` bytes holding a JSON object.
Result<nlohmann::json> parse_stream_request(std::string_view body, size_t limit);
/// A unary call's body: a JSON object (an empty body is {}).
Result<nlohmann::json> parse_unary_request(std::string_view body);

/// The control plane's error body: {"code": HTTP status, "message": "..."}.
nlohmann::json api_error(const Error& e);

/// proto3 JSON of bytes, read as its parsers read it: standard or URL-safe base64, padded or
/// not (written: standard with padding, sys::base64_encode). nullopt when it is not base64.
std::optional<std::string> unbase64(std::string_view text);

/// Checks that `msg` has only the fields in `known` (proto3 JSON names or their original
/// lowerCamel / snake_case forms); 400 naming the first other field.
Result<void> only_fields(const nlohmann::json& msg, std::initializer_list<std::string_view> known,
                         std::string_view what);

}  // namespace b3os::e2b
