#pragma once
// One HTTP/1.1 call to a model upstream (plain http), with the response body read piece by
// piece as it arrives (server-sent events are relayed, not buffered). Beast stays in here.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace b3os::gateway {

using Deadline = std::chrono::steady_clock::time_point;

struct UpstreamRequest {
  std::string host, port;
  std::string method = "POST";
  std::string target;  // path and query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class UpstreamCall {
 public:
  /// Connects, sends the request and reads the response head. Fails with kNodeUnavailable
  /// (cannot connect / broken) or kInternal with "timed out" when `deadline` passes.
  /// `cancelled` is polled while waiting; when it turns true the call fails at once.
  /// `*sent` turns true once the whole request was written (the upstream may then be working).
  static Result<std::unique_ptr<UpstreamCall>> start(const UpstreamRequest& req, Deadline deadline,
                                                     const std::function<bool()>& cancelled, bool* sent = nullptr);
  ~UpstreamCall();

  int status() const;
  /// The next piece of the body; nullopt at its end. Same failures as start().
  Result<std::optional<std::string>> read(Deadline deadline, const std::function<bool()>& cancelled);

  struct Impl;

 private:
  explicit UpstreamCall(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Failure kinds of an upstream call, told apart by the gateway to pick a status.
enum class UpstreamFailure { kUnreachable, kTimeout, kCancelled, kBroken };
/// Classifies an error returned by UpstreamCall.
UpstreamFailure classify(const Error& e);

}  // namespace b3os::gateway
