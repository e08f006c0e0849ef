#include "common/error.h"

#include <cstring>
#include <iterator>

namespace b3os {

namespace {
struct CodeInfo {
  ErrorCode code;
  std::string_view name;
  int status;
  std::string_view openai_type;
};

// OpenAI's error types, as its API and SDKs use them: a request the client must change, a
// credential, a permission, money (402 here: OpenAI SDKs retry 429 and 5xx, which a cap must
// not invite), a rate, and the server's own side.
constexpr std::string_view kInvalidRequestError = "invalid_request_error";
constexpr std::string_view kAuthenticationError = "authentication_error";
constexpr std::string_view kPermissionError = "permission_error";
constexpr std::string_view kInsufficientQuota = "insufficient_quota";
constexpr std::string_view kRateLimitError = "rate_limit_error";
constexpr std::string_view kServerError = "server_error";

// The one table from error code to wire name, HTTP status and OpenAI error type, in the
// order of the enum (checked below).
constexpr CodeInfo kCodes[] = {
    {ErrorCode::kInvalidRequest, "invalid_request", 400, kInvalidRequestError},
    {ErrorCode::kInvalidUrl, "invalid_url", 400, kInvalidRequestError},
    {ErrorCode::kUnauthorized, "unauthorized", 401, kAuthenticationError},
    {ErrorCode::kPaymentRequired, "spend_cap_reached", 402, kInsufficientQuota},
    {ErrorCode::kForbidden, "forbidden", 403, kPermissionError},
    {ErrorCode::kEgressDenied, "egress_denied", 403, kPermissionError},
    {ErrorCode::kNotFound, "not_found", 404, kInvalidRequestError},
    {ErrorCode::kSandboxNotFound, "sandbox_not_found", 404, kInvalidRequestError},
    {ErrorCode::kTemplateNotFound, "template_not_found", 404, kInvalidRequestError},
    {ErrorCode::kFileNotFound, "file_not_found", 404, kInvalidRequestError},
    {ErrorCode::kSnapshotNotFound, "snapshot_not_found", 404, kInvalidRequestError},
    {ErrorCode::kModelNotFound, "model_not_found", 404, kInvalidRequestError},
    {ErrorCode::kProcessNotFound, "process_not_found", 404, kInvalidRequestError},
    {ErrorCode::kMethodNotAllowed, "method_not_allowed", 405, kInvalidRequestError},
    {ErrorCode::kRequestTimeout, "request_timeout", 408, kInvalidRequestError},
    {ErrorCode::kConflict, "conflict", 409, kInvalidRequestError},
    {ErrorCode::kSandboxNotRunning, "sandbox_not_running", 409, kInvalidRequestError},
    {ErrorCode::kForkUnavailable, "fork_unavailable", 409, kInvalidRequestError},
    {ErrorCode::kIdempotencyKeyConflict, "idempotency_key_conflict", 409, kInvalidRequestError},
    {ErrorCode::kPayloadTooLarge, "payload_too_large", 413, kInvalidRequestError},
    {ErrorCode::kUnsupportedMediaType, "unsupported_media_type", 415, kInvalidRequestError},
    {ErrorCode::kRateLimited, "rate_limited", 429, kRateLimitError},
    {ErrorCode::kConcurrencyLimited, "concurrency_limited", 429, kRateLimitError},
    {ErrorCode::kQuotaExceeded, "quota_exceeded", 429, kInsufficientQuota},
    {ErrorCode::kInternal, "internal", 500, kServerError},
    {ErrorCode::kNotImplemented, "not_implemented", 501, kServerError},
    {ErrorCode::kUpstreamError, "upstream_error", 502, kServerError},
    {ErrorCode::kUpstreamUnavailable, "upstream_unavailable", 502, kServerError},
    {ErrorCode::kNodeUnavailable, "node_unavailable", 503, kServerError},
    {ErrorCode::kProductUnavailable, "product_unavailable", 503, kServerError},
    {ErrorCode::kCapacityUnavailable, "capacity_unavailable", 503, kServerError},
    {ErrorCode::kUpstreamTimeout, "upstream_timeout", 504, kServerError},
};

constexpr bool table_is_complete_and_in_order() {
  if (std::size(kCodes) != static_cast<size_t>(kLastErrorCode) + 1) return false;
  for (size_t i = 0; i < std::size(kCodes); ++i)
    if (static_cast<size_t>(kCodes[i].code) != i) return false;
  return true;
}
static_assert(table_is_complete_and_in_order(), "kCodes must list every ErrorCode once, in the enum's order");

const CodeInfo& info(ErrorCode code) {
  const auto i = static_cast<size_t>(code);
  return i < std::size(kCodes) ? kCodes[i] : kCodes[static_cast<size_t>(ErrorCode::kInternal)];
}
}  // namespace

Error& Error::wrap(std::string_view context) {
  message = std::string(context) + ": " + message;
  return *this;
}

std::string_view error_code_name(ErrorCode code) { return info(code).name; }
int error_http_status(ErrorCode code) { return info(code).status; }
std::string_view error_openai_type(ErrorCode code) { return info(code).openai_type; }

ErrorCode error_code_from_name(std::string_view name) {
  for (const auto& c : kCodes) {
    if (c.name == name) return c.code;
  }
  return ErrorCode::kInternal;
}

Error errno_error(ErrorCode code, std::string_view context, int err_no) {
  return Error{code, std::string(context) + ": " + std::strerror(err_no), err_no};
}

}  // namespace b3os
