#include "daemon/sandbox/registry.h"

#include <spdlog/spdlog.h>

namespace b3os::sandbox {

std::shared_ptr<LiveSandbox> Registry::find(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = live_.find(id);
  return it == live_.end() ? nullptr : it->second;
}

std::shared_ptr<LiveSandbox> Registry::find(const std::string& project_id, const std::string& id) const {
  auto s = find(id);
  if (!s) return nullptr;
  std::lock_guard lk(s->mu);
  return s->rec.project_id == project_id ? s : nullptr;
}

std::vector<std::shared_ptr<LiveSandbox>> Registry::all() const {
  std::lock_guard lk(mu_);
  std::vector<std::shared_ptr<LiveSandbox>> out;
  out.reserve(live_.size());
  for (auto& [id, s] : live_) out.push_back(s);
  return out;
}

void Registry::add(const std::shared_ptr<LiveSandbox>& s) {
  std::string project;
  {
    std::lock_guard g(s->mu);
    project = s->rec.project_id;
  }
  std::lock_guard lk(mu_);
  if (live_.emplace(s->id, s).second) ++live_by_project_[project];
}

bool Registry::remove(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  // The project of a live sandbox never changes once it is registered.
  const std::string project = it->second->rec.project_id;
  live_.erase(it);
  if (--live_by_project_[project] <= 0) live_by_project_.erase(project);
  return true;
}

Result<void> Registry::reserve(const std::string& project_id, int n) {
  // kOk, the project's limit, or the node's; a full node may ask spares to give way once.
  enum class Fit { kOk, kProject, kNode };
  int mine = 0, over = 0;
  auto try_take = [&] {
    std::lock_guard lk(mu_);
    mine = 0;
    if (auto it = starting_by_project_.find(project_id); it != starting_by_project_.end()) mine += it->second;
    if (auto it = live_by_project_.find(project_id); it != live_by_project_.end()) mine += it->second;
    if (!project_id.empty() && mine + n > max_per_project_) return Fit::kProject;
    over = static_cast<int>(live_.size()) + starting_ + pooled_ + n - max_per_node_;
    if (over > 0) return Fit::kNode;
    starting_ += n;
    starting_by_project_[project_id] += n;
    return Fit::kOk;
  };
  Fit fit = try_take();
  // Only for a user's request that fits its project and the node without pool members (never
  // for the pools' own refills, project ""): spares are the node's to give back, not a way for
  // a request that cannot fit anyway to end other tenants' spares.
  if (fit == Fit::kNode && reclaim_ && !project_id.empty() && n <= max_per_node_ && reclaim_(over) > 0) fit = try_take();
  if (fit == Fit::kProject)
    return fail(ErrorCode::kConcurrencyLimited, "this project has " + std::to_string(mine) + " sandboxes running and " +
                                                    std::to_string(n) + " more would pass its limit of " +
                                                    std::to_string(max_per_project_) + "; delete some first");
  if (fit == Fit::kNode)
    return fail(ErrorCode::kCapacityUnavailable, "this node is at its limit of " + std::to_string(max_per_node_) + " sandboxes");
  // The cluster's count, outside the lock (a store round trip): every node's sandboxes of the
  // project and the starts they hold.
  if (store_ && !project_id.empty()) {
    auto held = store_->hold_project_starts(project_id, n, max_per_project_);
    if (!held || !held->held) {
      unreserve_here(project_id, n);
      if (!held) return fail(held.error());
      return fail(ErrorCode::kConcurrencyLimited,
                  "this project has " + std::to_string(held->used) + " sandboxes running or starting on the cluster's " +
                      "nodes and " + std::to_string(n) + " more would pass its limit of " +
                      std::to_string(max_per_project_) + "; delete some first");
    }
  }
  return {};
}

void Registry::unreserve_here(const std::string& project_id, int n) {
  std::lock_guard lk(mu_);
  starting_ -= n;
  if ((starting_by_project_[project_id] -= n) <= 0) starting_by_project_.erase(project_id);
}

void Registry::unreserve(const std::string& project_id, int n) {
  unreserve_here(project_id, n);
  if (store_ && !project_id.empty()) {
    // Once more if the store failed the first time; else the starts stay counted until the
    // node restarts or is marked down (both release every start it held).
    auto r = store_->release_project_starts(project_id, n);
    if (!r) r = store_->release_project_starts(project_id, n);
    if (!r) spdlog::warn("project {}: {} starts stay held in the store: {}", project_id, n, r.error().message);
  }
}

void Registry::pooled(int delta) {
  std::lock_guard lk(mu_);
  pooled_ += delta;
}

Registry::Usage Registry::usage() const {
  std::lock_guard lk(mu_);
  return Usage{static_cast<int>(live_.size()), starting_, pooled_, max_per_node_};
}

}  // namespace b3os::sandbox
