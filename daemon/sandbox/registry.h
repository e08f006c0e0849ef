#pragma once
// Registry: the live sandboxes of this node, and its capacity (per project and per node).
// Every method takes the registry's lock briefly and does nothing else under it.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/sandbox/live.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// What one sandbox commits of the node: its limits, not what it uses.
struct Size {
  int64_t memory_mib = 0, vcpu = 0, disk_gib = 0;
  Size& operator+=(const Size& o) {
    memory_mib += o.memory_mib, vcpu += o.vcpu, disk_gib += o.disk_gib;
    return *this;
  }
  Size& operator-=(const Size& o) {
    memory_mib -= o.memory_mib, vcpu -= o.vcpu, disk_gib -= o.disk_gib;
    return *this;
  }
  Size times(int n) const { return Size{memory_mib * n, vcpu * n, disk_gib * n}; }
};

/// What the node admits (docs/configuration.md, "Admission"): the sums of its sandboxes'
/// limits against the host's memory, CPUs and disk times the operator's overcommit ratios, one
/// sandbox's memory and disk against what the host has at all, and a project's sums against
/// the operator's quotas. A field of 0 is no limit.
struct Capacity {
  Size node;                       // the sums the node admits
  int64_t max_memory_mib = 0;      // one sandbox's memory_mib (the host's memory less its reserve)
  Size per_project;                // a project's sums (its quota)
  /// The data disk's free GiB beyond the reserve, read at each reservation (a disk_gib larger
  /// is a promise the disk cannot keep); null: not checked.
  std::function<int64_t()> disk_free_gib;
};

class Registry {
 public:
  /// `store`, when given, counts a project's sandboxes across a cluster too (a shared store's
  /// hold_project_starts; a single node's store holds nothing and this node's count decides).
  Registry(int max_per_project, int max_per_node, store::SandboxStore* store = nullptr)
      : max_per_project_(max_per_project), max_per_node_(max_per_node), store_(store) {}

  /// The live sandbox `id` of any project (nullptr if none).
  std::shared_ptr<LiveSandbox> find(const std::string& id) const;
  /// The live sandbox `id` if it belongs to `project_id`.
  std::shared_ptr<LiveSandbox> find(const std::string& project_id, const std::string& id) const;
  std::vector<std::shared_ptr<LiveSandbox>> all() const;
  void add(const std::shared_ptr<LiveSandbox>& s);
  /// Removes `id`; false when it was not there (someone else removed it first).
  bool remove(const std::string& id);

  /// Counts `n` sandboxes about to start against the project's and the node's limits (in a
  /// cluster, the project's limit counts every node's sandboxes: one store transaction).
  /// `each` is what one of them commits (zero for the pools' members: spares that give way).
  Result<void> reserve(const std::string& project_id, int n, Size each = {});
  void unreserve(const std::string& project_id, int n, Size each = {});
  void set_capacity(Capacity c);
  /// Pool members count against the node's capacity while they wait.
  void pooled(int delta);
  /// Called (outside the lock) when a reservation does not fit the node: ends up to `n`
  /// members that give way to requests (fork-ahead's spares) and says how many went.
  void set_reclaimer(std::function<int(int n)> reclaim) { reclaim_ = std::move(reclaim); }

  /// The node's capacity as the limits see it: live sandboxes, launches reserved, pool
  /// members, and the node's maximum.
  struct Usage {
    int live = 0, starting = 0, pooled = 0, max = 0;
    Size committed, capacity;  // live and starting sandboxes' limits; what the node admits
  };
  Usage usage() const;

 private:
  void unreserve_here(const std::string& project_id, int n, Size each);
  static Size size_of(LiveSandbox& s);

  std::function<int(int)> reclaim_;
  const int max_per_project_, max_per_node_;
  store::SandboxStore* const store_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<LiveSandbox>> live_;
  int starting_ = 0;
  int pooled_ = 0;
  std::map<std::string, int> starting_by_project_;
  std::map<std::string, int> live_by_project_;
  Capacity capacity_;
  Size committed_;                                // live and starting, the node's
  std::map<std::string, Size> committed_by_project_;
  std::map<std::string, Size> live_size_;         // by sandbox id, as added
};

/// A reservation of capacity that is given back unless kept.
class Reservation {
 public:
  Reservation(Registry& r, std::string project_id, int n, Size each = {})
      : r_(r), project_(std::move(project_id)), n_(n), each_(each) {}
  ~Reservation() { r_.unreserve(project_, n_, each_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  Registry& r_;
  std::string project_;
  int n_;
  Size each_;
};

}  // namespace b3os::sandbox
