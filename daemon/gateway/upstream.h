#pragma once
// One HTTP/1.1 call to a model upstream (plain http), with the response body read piece by
// piece as it arrives (server-sent events are relayed, not buffered). Beast stays in here.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tl/expected.hpp>

namespace b3os::gateway {

using Deadline = std::chrono::steady_clock::time_point;

/// How an upstream call failed; the gateway picks the caller's answer and the charge from it.
enum class UpstreamFailure {
  kUnreachable,  // could not connect (or resolve): the request never left
  kTimeout,      // the deadline passed (connecting, sending, or waiting for the answer)
  kCancelled,    // the caller went away
  kBroken,       // the connection failed or the answer ended early
};

/// A failed upstream call: its kind, and what happened ("connecting to 10.0.0.5:8080:
/// Connection refused").
struct UpstreamError {
  UpstreamFailure kind = UpstreamFailure::kBroken;
  std::string message;
};

template <typename T>
using UpstreamResult = tl::expected<T, UpstreamError>;

struct UpstreamRequest {
  std::string host, port;
  std::string method = "POST";
  std::string target;  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class UpstreamCall {
 public:
  /// Connects, sends the request and reads the response head, or says how that failed.
  /// `cancelled` is polled while waiting; when it turns true the call fails (kCancelled) at once.
  /// `*sent` turns true once the whole request was written (the upstream may then be working).
  static UpstreamResult<std::unique_ptr<UpstreamCall>> start(const UpstreamRequest& req, Deadline deadline,
                                                             const std::function<bool()>& cancelled,
                                                             bool* sent = nullptr);
  ~UpstreamCall();

  int status() const;
  /// The next piece of the body; nullopt at its end. Same failures as start().
  UpstreamResult<std::optional<std::string>> read(Deadline deadline, const std::function<bool()>& cancelled);

  struct Impl;

 private:
  explicit UpstreamCall(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace b3os::gateway
