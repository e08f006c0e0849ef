#pragma once
// The REST API's configuration: body limits, rate and concurrency limits, and the limits on
// create fields.

#include <cstddef>
#include <cstdint>

#include "daemon/sandbox/spec.h"

namespace b3os::api {

struct Config {
  sandbox::SpecLimits limits;
  size_t max_json_body = 1 << 20;                          // 413 above this
  uint64_t max_upload_bytes = 16ULL * 1024 * 1024 * 1024;  // 413 above this
  double rate_per_second = 50;                             // per API key
  double rate_burst = 100;
  // Requests in flight at once (429 concurrency_limited above): well under the server's
  // request workers (http::Config::max_requests), so one tenant never takes the node.
  int max_requests_per_key = 64;
  int max_requests_per_project = 128;
  // The output ring of a background process when its start does not say (output_bytes).
  uint64_t process_output_bytes = 1u << 20;
};

}  // namespace b3os::api
