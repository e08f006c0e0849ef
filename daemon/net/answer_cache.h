#pragma once
// The resolver's cache of A answers (resolver.h): name -> addresses, each kept until its TTL
// ends. Bounded: when it is full, the entries that expire first (the expired ones first of
// all) make room, one for each new name, so a sandbox that asks for many new names (an
// allowed "*.name" lets it make them up) costs the others only their oldest answers, never
// the whole cache. Not thread-safe: the resolver keeps it on the network thread.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace b3os::net {

class AnswerCache {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hit {
    std::vector<uint32_t> addrs;
    Clock::duration left;  // until the entry expires
  };

  explicit AnswerCache(size_t capacity) : capacity_(capacity) {}

  /// The entry of `name` if it has not expired at `now`.
  std::optional<Hit> get(const std::string& name, Clock::time_point now) const {
    auto it = entries_.find(name);
    if (it == entries_.end() || it->second.until <= now) return std::nullopt;
    return Hit{it->second.addrs, it->second.until - now};
  }

  /// Keeps `addrs` for `name` until `until`, replacing what the name had.
  void put(const std::string& name, std::vector<uint32_t> addrs, Clock::time_point until) {
    if (capacity_ == 0) return;
    if (auto it = entries_.find(name); it != entries_.end()) {
      by_expiry_.erase(it->second.pos);
      entries_.erase(it);
    }
    while (entries_.size() >= capacity_) {
      auto first = by_expiry_.begin();
      entries_.erase(first->second);
      by_expiry_.erase(first);
    }
    auto pos = by_expiry_.emplace(until, name);
    entries_.emplace(name, Entry{std::move(addrs), until, pos});
  }

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<uint32_t> addrs;
    Clock::time_point until;
    std::multimap<Clock::time_point, std::string>::iterator pos;
  };
  size_t capacity_;
  std::map<std::string, Entry> entries_;
  std::multimap<Clock::time_point, std::string> by_expiry_;
};

}  // namespace b3os::net
