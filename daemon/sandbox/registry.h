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
  Result<void> reserve(const std::string& project_id, int n);
  void unreserve(const std::string& project_id, int n);
  /// Pool members count against the node's capacity while they wait.
  void pooled(int delta);
  /// Called (outside the lock) when a reservation does not fit the node: ends up to `n`
  /// members that give way to requests (fork-ahead's spares) and says how many went.
  void set_reclaimer(std::function<int(int n)> reclaim) { reclaim_ = std::move(reclaim); }

  /// The node's capacity as the limits see it: live sandboxes, launches reserved, pool
  /// members, and the node's maximum.
  struct Usage {
    int live = 0, starting = 0, pooled = 0, max = 0;
  };
  Usage usage() const;

 private:
  void unreserve_here(const std::string& project_id, int n);

  std::function<int(int)> reclaim_;
  const int max_per_project_, max_per_node_;
  store::SandboxStore* const store_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<LiveSandbox>> live_;
  int starting_ = 0;
  int pooled_ = 0;
  std::map<std::string, int> starting_by_project_;
  std::map<std::string, int> live_by_project_;
};

/// A reservation of capacity that is given back unless kept.
class Reservation {
 public:
  Reservation(Registry& r, std::string project_id, int n) : r_(r), project_(std::move(project_id)), n_(n) {}
  ~Reservation() { r_.unreserve(project_, n_); }
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;

 private:
  Registry& r_;
  std::string project_;
  int n_;
};

}  // namespace b3os::sandbox
