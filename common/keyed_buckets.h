#pragma once
// A token bucket per key (a client's address), bounded in how many keys it keeps: when full, the
// buckets that have refilled (their clients idle) are dropped to make room, and a new key finds
// no room only while that many clients are all active. Not thread-safe: the caller locks.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

namespace b3os {

class KeyedBuckets {
 public:
  enum class Take { kTaken, kEmpty, kNoRoom };

  KeyedBuckets(double per_second, size_t max_keys) : rate_(per_second), max_keys_(max_keys) {}

  /// Takes one token of `key`'s bucket (full at first: `per_second` tokens) at `now_ms`.
  Take take(const std::string& key, int64_t now_ms) {
    if (buckets_.size() >= max_keys_ && !buckets_.count(key)) {
      for (auto it = buckets_.begin(); it != buckets_.end();)
        it = refilled(it->second, now_ms) >= rate_ ? buckets_.erase(it) : std::next(it);
      if (buckets_.size() >= max_keys_) return Take::kNoRoom;
    }
    Bucket& b = buckets_.try_emplace(key, Bucket{rate_, now_ms}).first->second;
    b.tokens = refilled(b, now_ms);
    b.at_ms = now_ms;
    if (b.tokens < 1) return Take::kEmpty;
    b.tokens -= 1;
    return Take::kTaken;
  }

  /// Gives back a token taken at `now_ms` (the request it was for was refused elsewhere).
  void give_back(const std::string& key) {
    if (auto it = buckets_.find(key); it != buckets_.end()) it->second.tokens = std::min(rate_, it->second.tokens + 1);
  }

  size_t size() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens;
    int64_t at_ms;
  };
  double refilled(const Bucket& b, int64_t now_ms) const {
    return std::min(rate_, b.tokens + static_cast<double>(now_ms - b.at_ms) * rate_ / 1000.0);
  }

  double rate_;
  size_t max_keys_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace b3os
