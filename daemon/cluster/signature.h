#pragma once
// Requests inside a cluster (router to node, node to node) carry a signature made with the
// cluster secret: HMAC-SHA256 over a version tag, the method, the request target, the time
// and the SHA-256 of the Authorization header. A node's internal listener serves only signed
// requests that are fresh (within 30 s of its clock), so nothing without the secret (a
// sandbox, anything else on the network) can use that port; the API key still authorizes the
// request itself, as on the public port. docs/cluster.md.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::cluster {

inline constexpr std::string_view kTimeHeader = "X-B3os-Cluster-Time";
inline constexpr std::string_view kSignatureHeader = "X-B3os-Cluster-Signature";
inline constexpr int64_t kMaxSkewMs = 30'000;
/// Set to "preview" on a preview request a router relays to a node's internal listener (the
/// node's preview server answers it). The signature covers it: such a request is signed with
/// "preview:" before its method.
inline constexpr std::string_view kRouteHeader = "X-B3os-Route";

/// The signature (lowercase hex) of a request made at `time_ms`.
std::string sign_request(std::string_view secret, std::string_view method, std::string_view target, int64_t time_ms,
                         std::string_view authorization);

/// Checks a request's time and signature headers against `now_ms`, in constant time.
/// kUnauthorized (naming what is wrong, never the expected value) otherwise.
Result<void> verify_request(std::string_view secret, std::string_view method, std::string_view target,
                            std::string_view time_header, std::string_view signature_header,
                            std::string_view authorization, int64_t now_ms);

/// Reads the cluster secret from `path`: at least 32 bytes once trailing whitespace is cut,
/// readable by its owner and at most its group (a secret everyone can read, or its group can
/// write, is refused, as ssh refuses such a key).
Result<std::string> read_cluster_secret(const std::string& path);

}  // namespace b3os::cluster
