#pragma once
// The API error model: one enum of codes from the spec, each with exactly one HTTP status and
// one OpenAI error type (the model gateway answers OpenAI-shaped errors from the same codes).

#include <string>
#include <string_view>

namespace b3os {

/// Error codes as the API names them (`{"error": {"code": ...}}`).
enum class ErrorCode {
  kInvalidRequest,          // 400
  kInvalidUrl,              // 400
  kUnauthorized,            // 401
  kPaymentRequired,         // 402 (spend cap / credits)
  kForbidden,               // 403
  kEgressDenied,            // 403
  kNotFound,                // 404 (route)
  kSandboxNotFound,         // 404
  kTemplateNotFound,        // 404
  kFileNotFound,            // 404
  kSnapshotNotFound,        // 404
  kModelNotFound,           // 404 (model gateway: no such model)
  kProcessNotFound,         // 404 (a background process of a sandbox)
  kMethodNotAllowed,        // 405
  kRequestTimeout,          // 408 (a request body that stopped coming)
  kConflict,                // 409 (state conflicts: sandbox not running, ...)
  kSandboxNotRunning,       // 409
  kForkUnavailable,         // 409
  kIdempotencyKeyConflict,  // 409
  kPayloadTooLarge,         // 413
  kUnsupportedMediaType,    // 415
  kRateLimited,             // 429
  kConcurrencyLimited,      // 429
  kQuotaExceeded,           // 429
  kInternal,                // 500
  kNotImplemented,          // 501
  kUpstreamError,           // 502 (model gateway: the upstream failed the call or answered unusably)
  kUpstreamUnavailable,     // 502 (model gateway: the upstream cannot be reached)
  kNodeUnavailable,         // 503
  kProductUnavailable,      // 503
  kCapacityUnavailable,     // 503
  kUpstreamTimeout,         // 504 (model gateway: no answer within the model's timeout)
};
/// The last code: codes are numbered 0 to kLastErrorCode (keep it the last enumerator).
inline constexpr ErrorCode kLastErrorCode = ErrorCode::kUpstreamTimeout;

/// An error a user can act on: a code, a message with context, and the errno if any.
struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int err_no = 0;

  /// Prefixes context as the error rises: `e.wrap("creating veth b3-12")`.
  Error& wrap(std::string_view context);
};

/// The wire name of a code, e.g. "sandbox_not_found".
std::string_view error_code_name(ErrorCode code);
/// The code with this wire name; kInternal for a name it does not know.
ErrorCode error_code_from_name(std::string_view name);
/// The HTTP status of a code: the one table that maps codes to statuses.
int error_http_status(ErrorCode code);
/// The OpenAI error `type` of a code ("invalid_request_error", "insufficient_quota",
/// "server_error", ...), for the OpenAI-shaped answers of the model gateway.
std::string_view error_openai_type(ErrorCode code);
/// Builds an error from errno with context: "open /x: No such file or directory".
Error errno_error(ErrorCode code, std::string_view context, int err_no);

}  // namespace b3os
