#pragma once
// FairShare: admission of units (connections, DNS questions, requests in flight) that many
// tenants (sandboxes) take from one node-wide pool, so that a few tenants cannot take it all.
//
// A per-tenant cap alone is not enough: with a node pool of N and a tenant cap of C, N / C
// hostile tenants fill the pool and every other tenant is refused. So the pool is split in two:
//
//   - a tenant's first `floor` units are floor units; they come out of the whole pool;
//   - the units it takes beyond its floor (up to `per_tenant`) are extra units; all tenants'
//     extra units together may hold at most `node - reserve`.
//
// So at least `reserve` units are always left for floor units: `reserve / floor` tenants can
// each hold their floor whatever the others do, and a quiet tenant (one below its floor) is
// refused only when that many tenants sit at their floors at once. Everything above the
// floors is first come, first served, up to `per_tenant` each.
//
// Not thread-safe: each user keeps it on one thread (the network's asio thread) or under its
// own mutex. Keys are whatever names a tenant (its source address, its sandbox id).

#include <algorithm>
#include <cstddef>
#include <map>

namespace b3os {

template <class Key>
class FairShare {
 public:
  struct Limits {
    size_t node = 0;        // every unit of every tenant
    size_t per_tenant = 0;  // every unit of one tenant
    size_t floor = 0;       // units a tenant can count on (below per_tenant)
    size_t reserve = 0;     // units extra units may never take (at least floor)
  };

  /// Limits for a node pool of `node` units: half of it reserved for floors, the floor
  /// lowered so that at least 64 tenants' floors fit in the reserve, the tenant cap at most
  /// the node's.
  static Limits for_node(size_t node, size_t per_tenant, size_t floor) {
    const size_t reserve = node / 2;
    return {node, std::min(per_tenant, node), std::min(floor, std::max<size_t>(1, reserve / 64)), reserve};
  }

  explicit FairShare(Limits l) : l_(l) {
    l_.floor = std::min(l_.floor, l_.per_tenant);
    l_.reserve = std::clamp(l_.reserve, l_.floor, l_.node);
  }

  /// Takes one unit for `k`, or answers false (and takes nothing) when the node is full, `k`
  /// is at its cap, or `k` is above its floor and the extra units are all taken.
  bool try_take(const Key& k) {
    if (total_ >= l_.node) return false;
    auto it = held_.find(k);
    const size_t mine = it == held_.end() ? 0 : it->second;
    if (mine >= l_.per_tenant) return false;
    const bool extra = mine >= l_.floor;
    if (extra && extra_ >= l_.node - l_.reserve) return false;
    if (it == held_.end()) it = held_.emplace(k, 0).first;
    ++it->second;
    ++total_;
    if (extra) ++extra_;
    return true;
  }

  /// Gives back one unit `k` took (a key that holds none is ignored).
  void give(const Key& k) {
    auto it = held_.find(k);
    if (it == held_.end() || it->second == 0) return;
    // The unit given back is the tenant's highest: an extra one while it holds any.
    if (it->second > l_.floor) --extra_;
    --total_;
    if (--it->second == 0) held_.erase(it);
  }

  size_t total() const { return total_; }
  size_t extra() const { return extra_; }
  size_t tenants() const { return held_.size(); }
  size_t of(const Key& k) const {
    auto it = held_.find(k);
    return it == held_.end() ? 0 : it->second;
  }
  const Limits& limits() const { return l_; }

 private:
  Limits l_;
  size_t total_ = 0;
  size_t extra_ = 0;
  std::map<Key, size_t> held_;
};

}  // namespace b3os
