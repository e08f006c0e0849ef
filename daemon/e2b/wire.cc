#include "daemon/e2b/wire.h"

#include <algorithm>
#include <cctype>

#include "common/json.h"
#include "daemon/sys/codec.h"

namespace b3os::e2b {

using nlohmann::json;

std::string_view connect_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidRequest:
    case ErrorCode::kInvalidUrl:
    case ErrorCode::kUnsupportedMediaType:
      return "invalid_argument";
    case ErrorCode::kUnauthorized:
      return "unauthenticated";
    case ErrorCode::kForbidden:
    case ErrorCode::kEgressDenied:
      return "permission_denied";
    case ErrorCode::kNotFound:
    case ErrorCode::kSandboxNotFound:
    case ErrorCode::kTemplateNotFound:
    case ErrorCode::kFileNotFound:
    case ErrorCode::kSnapshotNotFound:
    case ErrorCode::kModelNotFound:
    case ErrorCode::kProcessNotFound:
      return "not_found";
    case ErrorCode::kConflict:
    case ErrorCode::kSandboxNotRunning:
    case ErrorCode::kForkUnavailable:
      return "failed_precondition";
    case ErrorCode::kIdempotencyKeyConflict:
      return "already_exists";
    case ErrorCode::kPayloadTooLarge:
    case ErrorCode::kRateLimited:
    case ErrorCode::kConcurrencyLimited:
    case ErrorCode::kQuotaExceeded:
    case ErrorCode::kPaymentRequired:
      return "resource_exhausted";
    case ErrorCode::kRequestTimeout:
    case ErrorCode::kUpstreamTimeout:
      return "deadline_exceeded";
    case ErrorCode::kNotImplemented:
    case ErrorCode::kMethodNotAllowed:
      return "unimplemented";
    case ErrorCode::kNodeUnavailable:
    case ErrorCode::kProductUnavailable:
    case ErrorCode::kCapacityUnavailable:
    case ErrorCode::kUpstreamUnavailable:
      return "unavailable";
    case ErrorCode::kUpstreamError:
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

int connect_http_status(std::string_view c) {
  // The Connect protocol's table (connectrpc.com/docs/protocol, "Error codes").
  if (c == "canceled") return 499;
  if (c == "invalid_argument" || c == "failed_precondition" || c == "out_of_range") return 400;
  if (c == "deadline_exceeded") return 504;
  if (c == "not_found") return 404;
  if (c == "already_exists" || c == "aborted") return 409;
  if (c == "permission_denied") return 403;
  if (c == "resource_exhausted") return 429;
  if (c == "unimplemented") return 501;
  if (c == "unavailable") return 503;
  if (c == "unauthenticated") return 401;
  return 500;  // unknown, internal, data_loss
}

json connect_error(const Error& e) { return {{"code", std::string(connect_code(e.code))}, {"message", e.message}}; }

std::string envelope(uint8_t flags, std::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  const auto n = static_cast<uint32_t>(payload.size());
  out.push_back(static_cast<char>(flags));
  out.push_back(static_cast<char>(n >> 24));
  out.push_back(static_cast<char>(n >> 16));
  out.push_back(static_cast<char>(n >> 8));
  out.push_back(static_cast<char>(n));
  out.append(payload);
  return out;
}

std::string end_stream(const std::optional<Error>& error) {
  json end = json::object();
  if (error) end["error"] = connect_error(*error);
  return envelope(kFlagEndStream, end.dump(-1, ' ', false, json::error_handler_t::replace));
}

namespace {
Result<json> json_object(std::string_view text, std::string_view what) {
  // Copying or dumping deep JSON recurses: a body nested a million levels would take the
  // daemon's stack (the holder of one sandbox's token could take the node down).
  if (json_depth(text) > 64) return fail(ErrorCode::kInvalidRequest, std::string(what) + " nests deeper than 64 levels");
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return fail(ErrorCode::kInvalidRequest, std::string(what) + ": not valid JSON");
  if (!j.is_object()) return fail(ErrorCode::kInvalidRequest, std::string(what) + ": a JSON object is expected");
  return j;
}
}  // namespace

Result<json> parse_stream_request(std::string_view body, size_t limit) {
  if (body.size() < 5) return fail(ErrorCode::kInvalidRequest, "a streaming request is one Connect envelope (5-byte prefix, then the message)");
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(body[i])); };
  const uint8_t flags = static_cast<uint8_t>(b(0));
  const uint32_t n = (b(1) << 24) | (b(2) << 16) | (b(3) << 8) | b(4);
  if (flags & kFlagCompressed) return fail(ErrorCode::kInvalidRequest, "compressed envelopes are not accepted (send Connect-Content-Encoding: identity)");
  if (flags & ~kFlagCompressed) return fail(ErrorCode::kInvalidRequest, "the request's envelope has unknown flags");
  if (n > limit) return fail(ErrorCode::kPayloadTooLarge, "the request message is over " + std::to_string(limit) + " bytes");
  if (body.size() != 5 + static_cast<size_t>(n))
    return fail(ErrorCode::kInvalidRequest, "a server-streaming request is exactly one envelope (" + std::to_string(body.size()) +
                                                " bytes for a message of " + std::to_string(n) + ")");
  return json_object(body.substr(5), "the request message");
}

Result<json> parse_unary_request(std::string_view body) {
  if (body.empty()) return json::object();
  return json_object(body, "the request message");
}

json api_error(const Error& e) { return {{"code", error_http_status(e.code)}, {"message", e.message}}; }

std::optional<std::string> unbase64(std::string_view text) {
  std::string s(text);
  for (char& c : s) {
    if (c == '-') c = '+';
    else if (c == '_') c = '/';
  }
  if (s.size() % 4 == 1) return std::nullopt;
  while (s.size() % 4) s.push_back('=');
  return sys::base64_decode(s);
}

namespace {
/// lowerCamelCase of a snake_case name ("exit_code" -> "exitCode").
std::string camel(std::string_view snake) {
  std::string out;
  bool up = false;
  for (char c : snake) {
    if (c == '_') {
      up = true;
      continue;
    }
    out.push_back(up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    up = false;
  }
  return out;
}
}  // namespace

Result<void> only_fields(const json& msg, std::initializer_list<std::string_view> known, std::string_view what) {
  for (const auto& item : msg.items()) {
    const std::string& k = item.key();
    const bool ok = std::any_of(known.begin(), known.end(), [&](std::string_view f) { return k == f || k == camel(f); });
    if (!ok) return fail(ErrorCode::kInvalidRequest, std::string(what) + ": unknown field \"" + k.substr(0, 64) + "\"");
  }
  return {};
}

}  // namespace b3os::e2b
