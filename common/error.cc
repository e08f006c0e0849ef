#include "common/error.h"

#include <cstring>

namespace b3os {

namespace {
struct CodeInfo {
  ErrorCode code;
  std::string_view name;
  int status;
};
// The one table from error code to wire name and HTTP status.
constexpr CodeInfo kCodes[] = {
    {ErrorCode::kInvalidRequest, "invalid_request", 400},
    {ErrorCode::kInvalidUrl, "invalid_url", 400},
    {ErrorCode::kUnauthorized, "unauthorized", 401},
    {ErrorCode::kPaymentRequired, "spend_cap_reached", 402},
    {ErrorCode::kForbidden, "forbidden", 403},
    {ErrorCode::kEgressDenied, "egress_denied", 403},
    {ErrorCode::kNotFound, "not_found", 404},
    {ErrorCode::kSandboxNotFound, "sandbox_not_found", 404},
    {ErrorCode::kTemplateNotFound, "template_not_found", 404},
    {ErrorCode::kFileNotFound, "file_not_found", 404},
    {ErrorCode::kSnapshotNotFound, "snapshot_not_found", 404},
    {ErrorCode::kMethodNotAllowed, "method_not_allowed", 405},
    {ErrorCode::kConflict, "conflict", 409},
    {ErrorCode::kSandboxNotRunning, "sandbox_not_running", 409},
    {ErrorCode::kForkUnavailable, "fork_unavailable", 409},
    {ErrorCode::kIdempotencyKeyConflict, "idempotency_key_conflict", 409},
    {ErrorCode::kPayloadTooLarge, "payload_too_large", 413},
    {ErrorCode::kUnsupportedMediaType, "unsupported_media_type", 415},
    {ErrorCode::kRateLimited, "rate_limited", 429},
    {ErrorCode::kConcurrencyLimited, "concurrency_limited", 429},
    {ErrorCode::kQuotaExceeded, "quota_exceeded", 429},
    {ErrorCode::kInternal, "internal", 500},
    {ErrorCode::kNotImplemented, "not_implemented", 501},
    {ErrorCode::kNodeUnavailable, "node_unavailable", 503},
    {ErrorCode::kProductUnavailable, "product_unavailable", 503},
    {ErrorCode::kCapacityUnavailable, "capacity_unavailable", 503},
};

const CodeInfo& info(ErrorCode code) {
  for (const auto& c : kCodes) {
    if (c.code == code) return c;
  }
  return kCodes[0];  // unreachable: every enumerator is in the table (unit-tested)
}
}  // namespace

Error& Error::wrap(std::string_view context) {
  message = std::string(context) + ": " + message;
  return *this;
}

std::string_view error_code_name(ErrorCode code) { return info(code).name; }
int error_http_status(ErrorCode code) { return info(code).status; }

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
