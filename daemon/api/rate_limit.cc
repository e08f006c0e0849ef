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

namespace {
int count(const std::map<std::string, int>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}
}  // namespace

Result<InFlightLimiter::Slot> InFlightLimiter::enter(const std::string& key, const std::string& project) {
  std::lock_guard lk(mu_);
  if (count(keys_, key) >= per_key_)
    return fail(ErrorCode::kConcurrencyLimited, "this API key has " + std::to_string(per_key_) +
                                                    " requests in flight, its maximum; retry when one has finished");
  if (count(projects_, project) >= per_project_)
    return fail(ErrorCode::kConcurrencyLimited, "this project has " + std::to_string(per_project_) +
                                                    " requests in flight, its maximum; retry when one has finished");
  ++keys_[key];
  ++projects_[project];
  return Slot(this, key, project);
}

void InFlightLimiter::leave(const std::string& key, const std::string& project) {
  std::lock_guard lk(mu_);
  if (--keys_[key] == 0) keys_.erase(key);
  if (--projects_[project] == 0) projects_.erase(project);
}

}  // namespace b3os::api
