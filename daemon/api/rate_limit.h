#pragma once
// Per-tenant limits: a token bucket per API key (`rate` requests a second, bursts up to
// `burst`), and a cap on the requests of each key and each project in flight at once.

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "common/result.h"

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

/// Requests in flight per API key and per project. The rate limit alone let one key hold every
/// request worker with slow requests (long execs, slow uploads) and the node answered 503 to
/// everyone else; with both caps well under the workers, other tenants always get one.
class InFlightLimiter {
 public:
  InFlightLimiter(int per_key, int per_project) : per_key_(per_key), per_project_(per_project) {}

  /// A request's place, given back when it is destroyed (on every way out of the request).
  class Slot {
   public:
    Slot(Slot&& o) noexcept : owner_(o.owner_), key_(std::move(o.key_)), project_(std::move(o.project_)) {
      o.owner_ = nullptr;
    }
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (owner_) owner_->leave(key_, project_);
    }

   private:
    friend class InFlightLimiter;
    Slot(InFlightLimiter* owner, std::string key, std::string project)
        : owner_(owner), key_(std::move(key)), project_(std::move(project)) {}
    InFlightLimiter* owner_;
    std::string key_, project_;
  };

  /// A place for a request of `key` in `project`; 429 concurrency_limited, saying which cap,
  /// when the key or the project already has its maximum in flight.
  Result<Slot> enter(const std::string& key, const std::string& project);

 private:
  void leave(const std::string& key, const std::string& project);

  const int per_key_, per_project_;
  std::mutex mu_;
  std::map<std::string, int> keys_, projects_;  // only non-zero counts are kept
};

}  // namespace b3os::api
