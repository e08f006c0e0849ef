#include "daemon/api/rate_limit.h"

#include <algorithm>

namespace b3os::api {

bool RateLimiter::take(const std::string& key, double* retry_after_s) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  auto [it, fresh] = buckets_.try_emplace(key, Bucket{burst_, now});
  Bucket& b = it->second;
  if (!fresh) {
    double dt = std::chrono::duration<double>(now - b.at).count();
    b.tokens = std::min(burst_, b.tokens + dt * rate_);
    b.at = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  if (retry_after_s) *retry_after_s = (1 - b.tokens) / rate_;
  return false;
}

}  // namespace b3os::api
