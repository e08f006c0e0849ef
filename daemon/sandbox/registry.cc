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

Size Registry::size_of(LiveSandbox& s) {
  std::lock_guard g(s.mu);
  // The node's own (a build sandbox, a pool member becoming a sandbox counts from then on).
  return Size{s.rec.memory_mib, s.rec.vcpu, s.rec.disk_gib};
}

void Registry::add(const std::shared_ptr<LiveSandbox>& s) {
  std::string project;
  {
    std::lock_guard g(s->mu);
    project = s->rec.project_id;
  }
  const Size size = size_of(*s);
  std::lock_guard lk(mu_);
  if (live_.emplace(s->id, s).second) {
    ++live_by_project_[project];
    live_size_[s->id] = size;
    committed_ += size;
    committed_by_project_[project] += size;
  }
}

void Registry::set_capacity(Capacity c) {
  std::lock_guard lk(mu_);
  capacity_ = std::move(c);
}

bool Registry::remove(const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return false;
  // The project of a live sandbox never changes once it is registered.
  const std::string project = it->second->rec.project_id;
  live_.erase(it);
  if (--live_by_project_[project] <= 0) live_by_project_.erase(project);
  if (auto sz = live_size_.find(id); sz != live_size_.end()) {
    committed_ -= sz->second;
    committed_by_project_[project] -= sz->second;
    live_size_.erase(sz);
  }
  if (!live_by_project_.count(project) && !starting_by_project_.count(project)) committed_by_project_.erase(project);
  return true;
}

namespace {
// "memory_mib 4096 of 98304" for the error messages.
std::string figures(const char* what, int64_t used, int64_t want, int64_t cap) {
  return std::string(what) + ": " + std::to_string(used) + " committed, " + std::to_string(want) + " more asked, " +
         std::to_string(cap) + " allowed";
}
}  // namespace

Result<void> Registry::reserve(const std::string& project_id, int n, Size each) {
  // kOk, the project's limit, or the node's; a full node may ask spares to give way once.
  enum class Fit { kOk, kProject, kNode, kResource, kQuota };
  int mine = 0, over = 0;
  std::string why;  // which resource, with its figures (kResource, kQuota)
  // One sandbox larger than the host could ever hold is refused whatever else runs.
  {
    std::lock_guard lk(mu_);
    if (capacity_.max_memory_mib > 0 && each.memory_mib > capacity_.max_memory_mib)
      return fail(ErrorCode::kCapacityUnavailable,
                  "memory_mib " + std::to_string(each.memory_mib) + " is more than a sandbox on this node may have (" +
                      std::to_string(capacity_.max_memory_mib) + " MiB: the host's memory less its reserve)");
  }
  if (each.disk_gib > 0) {
    std::function<int64_t()> free_gib;
    {
      std::lock_guard lk(mu_);
      free_gib = capacity_.disk_free_gib;
    }
    if (free_gib) {
      const int64_t free = free_gib();
      if (each.disk_gib > free)
        return fail(ErrorCode::kCapacityUnavailable,
                    "disk_gib " + std::to_string(each.disk_gib) + " is more than this node's data disk has free beyond its "
                    "reserve (" + std::to_string(std::max<int64_t>(free, 0)) + " GiB, --disk-reserve-gib)");
    }
  }
  auto try_take = [&] {
    std::lock_guard lk(mu_);
    mine = 0;
    if (auto it = starting_by_project_.find(project_id); it != starting_by_project_.end()) mine += it->second;
    if (auto it = live_by_project_.find(project_id); it != live_by_project_.end()) mine += it->second;
    if (!project_id.empty() && mine + n > max_per_project_) return Fit::kProject;
    over = static_cast<int>(live_.size()) + starting_ + pooled_ + n - max_per_node_;
    if (over > 0) return Fit::kNode;
    const Size want = each.times(n);
    const Size& cap = capacity_.node;
    if (want.memory_mib > 0 && cap.memory_mib > 0 && committed_.memory_mib + want.memory_mib > cap.memory_mib)
      return why = figures("memory_mib", committed_.memory_mib, want.memory_mib, cap.memory_mib), Fit::kResource;
    if (want.vcpu > 0 && cap.vcpu > 0 && committed_.vcpu + want.vcpu > cap.vcpu)
      return why = figures("vcpu", committed_.vcpu, want.vcpu, cap.vcpu), Fit::kResource;
    if (want.disk_gib > 0 && cap.disk_gib > 0 && committed_.disk_gib + want.disk_gib > cap.disk_gib)
      return why = figures("disk_gib", committed_.disk_gib, want.disk_gib, cap.disk_gib), Fit::kResource;
    if (!project_id.empty()) {
      const Size& q = capacity_.per_project;
      const auto it = committed_by_project_.find(project_id);
      const Size used = it == committed_by_project_.end() ? Size{} : it->second;
      if (want.memory_mib > 0 && q.memory_mib > 0 && used.memory_mib + want.memory_mib > q.memory_mib)
        return why = figures("memory_mib", used.memory_mib, want.memory_mib, q.memory_mib), Fit::kQuota;
      if (want.vcpu > 0 && q.vcpu > 0 && used.vcpu + want.vcpu > q.vcpu)
        return why = figures("vcpu", used.vcpu, want.vcpu, q.vcpu), Fit::kQuota;
      if (want.disk_gib > 0 && q.disk_gib > 0 && used.disk_gib + want.disk_gib > q.disk_gib)
        return why = figures("disk_gib", used.disk_gib, want.disk_gib, q.disk_gib), Fit::kQuota;
    }
    starting_ += n;
    starting_by_project_[project_id] += n;
    committed_ += want;
    committed_by_project_[project_id] += want;
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
  if (fit == Fit::kResource)
    return fail(ErrorCode::kCapacityUnavailable,
                "this node has no room for " + std::to_string(n) + " more sandbox" + (n == 1 ? "" : "es") + " of this size (" +
                    why + "; the host's memory, CPUs and disk times --memory-overcommit, --vcpu-overcommit and "
                    "--disk-overcommit); delete sandboxes or ask less");
  if (fit == Fit::kQuota)
    return fail(ErrorCode::kQuotaExceeded, "this project's sandboxes would pass its quota (" + why +
                                               "; --project-max-memory-mib, --project-max-vcpu, --project-max-disk-gib)");
  // The cluster's count, outside the lock (a store round trip): every node's sandboxes of the
  // project and the starts they hold.
  if (store_ && !project_id.empty()) {
    auto held = store_->hold_project_starts(project_id, n, max_per_project_);
    if (!held || !held->held) {
      unreserve_here(project_id, n, each);
      if (!held) return fail(held.error());
      return fail(ErrorCode::kConcurrencyLimited,
                  "this project has " + std::to_string(held->used) + " sandboxes running or starting on the cluster's " +
                      "nodes and " + std::to_string(n) + " more would pass its limit of " +
                      std::to_string(max_per_project_) + "; delete some first");
    }
  }
  return {};
}

void Registry::unreserve_here(const std::string& project_id, int n, Size each) {
  std::lock_guard lk(mu_);
  starting_ -= n;
  if ((starting_by_project_[project_id] -= n) <= 0) starting_by_project_.erase(project_id);
  committed_ -= each.times(n);
  committed_by_project_[project_id] -= each.times(n);
  if (!live_by_project_.count(project_id) && !starting_by_project_.count(project_id)) committed_by_project_.erase(project_id);
}

void Registry::unreserve(const std::string& project_id, int n, Size each) {
  unreserve_here(project_id, n, each);
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
  return Usage{static_cast<int>(live_.size()), starting_, pooled_, max_per_node_, committed_, capacity_.node};
}

}  // namespace b3os::sandbox
