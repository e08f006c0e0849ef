#include "daemon/sandbox/registry.h"

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
  std::lock_guard lk(mu_);
  int mine = 0;
  if (auto it = starting_by_project_.find(project_id); it != starting_by_project_.end()) mine += it->second;
  if (auto it = live_by_project_.find(project_id); it != live_by_project_.end()) mine += it->second;
  if (!project_id.empty() && mine + n > max_per_project_)
    return fail(ErrorCode::kConcurrencyLimited, "this project has " + std::to_string(mine) + " sandboxes running and " +
                                                    std::to_string(n) + " more would pass its limit of " +
                                                    std::to_string(max_per_project_) + "; delete some first");
  if (static_cast<int>(live_.size()) + starting_ + pooled_ + n > max_per_node_)
    return fail(ErrorCode::kCapacityUnavailable,
                "this node is at its limit of " + std::to_string(max_per_node_) + " sandboxes");
  starting_ += n;
  starting_by_project_[project_id] += n;
  return {};
}

void Registry::unreserve(const std::string& project_id, int n) {
  std::lock_guard lk(mu_);
  starting_ -= n;
  if ((starting_by_project_[project_id] -= n) <= 0) starting_by_project_.erase(project_id);
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
