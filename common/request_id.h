#pragma once
// The id of the API request a thread is working for, so a log line can name the request
// that caused it (the X-Request-Id of its answer). Set by the HTTP server around its
// handler; work handed to other threads (pools, reapers) logs without one.

#include <string>
#include <string_view>

namespace b3os {

/// The current thread's request id, "" outside a request.
const std::string& current_request_id();

/// Sets the thread's request id for its lifetime, then restores the previous one.
class RequestIdScope {
 public:
  explicit RequestIdScope(std::string id);
  ~RequestIdScope();
  RequestIdScope(const RequestIdScope&) = delete;
  RequestIdScope& operator=(const RequestIdScope&) = delete;

 private:
  std::string previous_;
};

/// A client's X-Request-Id when it is 1-128 characters of A-Z a-z 0-9 . _ : - (so it can
/// neither forge log fields nor grow them); otherwise a new one, "req_" and 20 base32
/// characters.
std::string request_id_for(std::string_view client_supplied);

}  // namespace b3os
