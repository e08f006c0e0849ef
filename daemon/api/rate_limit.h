#pragma once
// A token bucket per API key: `rate` requests a second, bursts up to `burst`.

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace b3os::api {

class RateLimiter {
 public:
  RateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}
  /// Takes one token for `key`; false (with the seconds to wait) when the bucket is empty.
  bool take(const std::string& key, double* retry_after_s);

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  double rate_, burst_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace b3os::api
