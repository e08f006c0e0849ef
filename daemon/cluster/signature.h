#pragma once
// Requests inside a cluster (router to node, node to node) carry a signature made with the
// cluster secret: HMAC-SHA256 over a version tag, the method (with its cluster route), the
// request target, the time, a nonce, the SHA-256 of the body (or "unsigned" for a body a router
// streams through) and the SHA-256 of every header that carries a credential (Authorization,
// X-API-Key, X-Access-Token, E2b-Sandbox-Id, Cookie, e2b-traffic-access-token). A node's
// internal listener serves only signed requests that are fresh (within 30 s of its clock) and
// not seen before (each signature once: a replay within the window is refused), so nothing
// without the secret (a sandbox, anything else on the network) can use that port, or reuse or
// alter what a router sent; the API key still authorizes the request itself, as on the public
// port. docs/cluster.md.

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/result.h"

namespace b3os::cluster {

inline constexpr std::string_view kTimeHeader = "X-B3os-Cluster-Time";
inline constexpr std::string_view kSignatureHeader = "X-B3os-Cluster-Signature";
inline constexpr std::string_view kNonceHeader = "X-B3os-Cluster-Nonce";
inline constexpr std::string_view kBodyHeader = "X-B3os-Cluster-Body";  // sha256 hex, or "unsigned"
inline constexpr std::string_view kUnsignedBody = "unsigned";
inline constexpr int64_t kMaxSkewMs = 30'000;
/// Set to "preview" on a preview request a router relays to a node's internal listener (the
/// node's preview server answers it). The signature covers it: such a request is signed with
/// "preview:" before its method.
inline constexpr std::string_view kRouteHeader = "X-B3os-Route";

/// The headers that carry a credential, in the order they are signed.
inline constexpr std::string_view kCredentialHeaders[] = {"Authorization", "X-API-Key", "X-Access-Token",
                                                          "E2b-Sandbox-Id", "Cookie", "e2b-traffic-access-token"};

/// What a signature covers. `header` answers a header's value ("" when absent).
struct Signed {
  std::string_view method;  // "ROUTE:" before it for a cluster route
  std::string_view target;
  int64_t time_ms = 0;
  std::string_view nonce;
  std::string_view body;  // the body's sha256 hex, or kUnsignedBody
  std::function<std::string_view(std::string_view)> header;
};

/// The lowercase hex SHA-256 of `data` (a body's digest for kBodyHeader).
std::string sha256_hex(std::string_view data);
/// A fresh nonce (32 hex characters).
std::string new_nonce();

/// The signature (lowercase hex) of a request.
std::string sign_request(std::string_view secret, const Signed& s);

/// Signatures seen within the window, each accepted once. Thread-safe; bounded (past
/// kMaxRemembered within one window, a new one is refused rather than forgotten early).
class ReplayGuard {
 public:
  static constexpr size_t kMaxRemembered = 1'000'000;  // a hash-set node and a queue entry each (not measured)
  enum class Seen { kFirst, kReplay, kFull };
  /// kFirst (and remembered) the first time `signature` (hex) is seen, kReplay after; kFull
  /// when the window already holds kMaxRemembered (refused, not forgotten early).
  Seen first(std::string_view signature, int64_t now_ms);

 private:
  // 128 bits of the HMAC are enough to tell signatures apart: stored once, as two words.
  struct Key {
    uint64_t a = 0, b = 0;
    bool operator==(const Key& o) const { return a == o.a && b == o.b; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const { return static_cast<size_t>(k.a ^ (k.b * 0x9E3779B97F4A7C15ull)); }
  };
  std::mutex mu_;
  std::unordered_set<Key, KeyHash> seen_;
  std::deque<std::pair<int64_t, Key>> order_;  // (forget after, key)
};

/// Checks a request's time, nonce and signature headers against `now_ms`, in constant time,
/// and that it was not seen before (`replay`, when given). kUnauthorized (naming what is wrong,
/// never the expected value) otherwise.
Result<void> verify_request(std::string_view secret, std::string_view method, std::string_view target,
                            const std::function<std::string_view(std::string_view)>& header, int64_t now_ms,
                            ReplayGuard* replay);

/// Reads the cluster secret from `path`: at least 32 bytes once trailing whitespace is cut,
/// readable by its owner and at most its group (a secret everyone can read, or its group can
/// write, is refused, as ssh refuses such a key).
Result<std::string> read_cluster_secret(const std::string& path);

}  // namespace b3os::cluster
