#include "tests/fakes/fake_store.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace b3os::fakes {

using store::SandboxRecord;
using store::SnapshotRecord;

Result<void> FakeStore::write_allowed(const std::string& what) {
  if (fail_writes_ > 0) {
    --fail_writes_;
    return b3os::fail(ErrorCode::kInternal, "fake store: saving " + what + " failed");
  }
  return {};
}

Result<void> FakeStore::put_sandbox(const SandboxRecord& rec) {
  std::lock_guard lk(mu_);
  if (auto r = write_allowed(rec.id); !r) return r;
  sandboxes_[rec.id] = rec;
  return {};
}

Result<std::optional<SandboxRecord>> FakeStore::get_sandbox(const std::string& project_id, const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || it->second.project_id != project_id) return std::optional<SandboxRecord>();
  return std::optional<SandboxRecord>(it->second);
}

Result<std::vector<SandboxRecord>> FakeStore::list_sandboxes(const store::SandboxQuery& q) {
  std::lock_guard lk(mu_);
  std::vector<SandboxRecord> out;
  for (auto it = sandboxes_.rbegin(); it != sandboxes_.rend(); ++it) {
    const SandboxRecord& r = it->second;
    if (r.project_id != q.project_id) continue;
    if (q.status && store::state_name(store::settled(r.state)) != *q.status) continue;
    if (q.after_id && !(r.id < *q.after_id)) continue;
    bool match = true;
    for (auto& [k, v] : q.metadata) {
      auto m = r.metadata.find(k);
      match = match && m != r.metadata.end() && m->second == v;
    }
    if (!match) continue;
    out.push_back(r);
    if (static_cast<int>(out.size()) > q.limit) break;
  }
  return out;
}

Result<std::vector<SandboxRecord>> FakeStore::active_sandboxes() {
  std::lock_guard lk(mu_);
  std::vector<SandboxRecord> out;
  for (auto& [id, r] : sandboxes_)
    if (!r.ended()) out.push_back(r);
  return out;
}

Result<int64_t> FakeStore::forget_ended_sandboxes(int64_t ended_before_ms, int keep_per_project) {
  std::lock_guard lk(mu_);
  // The stores' rule: past its time, or past its project's newest keep_per_project ended ones.
  std::map<std::string, std::vector<std::pair<int64_t, std::string>>> ended;  // project -> (ended at, id)
  for (auto& [id, r] : sandboxes_)
    if (r.ended()) ended[r.project_id].emplace_back(r.stopped_ms.value_or(r.created_ms), id);
  int64_t n = 0;
  for (auto& [project, list] : ended) {
    std::sort(list.begin(), list.end(), std::greater<>());
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].first < ended_before_ms || i >= static_cast<size_t>(keep_per_project)) {
        sandboxes_.erase(list[i].second);
        ++n;
      }
  }
  return n;
}

Result<void> FakeStore::put_snapshot(const SnapshotRecord& rec) {
  std::lock_guard lk(mu_);
  if (auto r = write_allowed(rec.id); !r) return r;
  snapshots_[rec.id] = rec;
  return {};
}

Result<std::optional<SnapshotRecord>> FakeStore::get_snapshot(const std::string& project_id, const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = snapshots_.find(id);
  if (it == snapshots_.end() || it->second.project_id != project_id) return std::optional<SnapshotRecord>();
  return std::optional<SnapshotRecord>(it->second);
}

Result<std::vector<SnapshotRecord>> FakeStore::list_snapshots(const std::string& project_id,
                                                              const std::optional<std::string>& after_id, int limit) {
  std::lock_guard lk(mu_);
  std::vector<SnapshotRecord> out;
  for (auto it = snapshots_.rbegin(); it != snapshots_.rend(); ++it) {
    if (it->second.project_id != project_id || (after_id && !(it->first < *after_id))) continue;
    out.push_back(it->second);
    if (static_cast<int>(out.size()) > limit) break;
  }
  return out;
}

Result<void> FakeStore::delete_snapshot(const std::string& project_id, const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = snapshots_.find(id);
  if (it != snapshots_.end() && it->second.project_id == project_id) snapshots_.erase(it);
  return {};
}

Result<store::SnapshotUsage> FakeStore::snapshot_usage(const std::string& project_id) {
  std::lock_guard lk(mu_);
  store::SnapshotUsage out;
  for (auto& [id, rec] : snapshots_) {
    if (rec.project_id != project_id) continue;
    ++out.count;
    out.bytes += rec.size_bytes;
  }
  return out;
}

Result<std::vector<std::string>> FakeStore::snapshot_ids() {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (auto& [id, rec] : snapshots_) out.push_back(id);
  return out;
}

Result<void> FakeStore::ensure_budget(const std::string& id, const std::string&, std::optional<Micros>) {
  std::lock_guard lk(mu_);
  budgets_[id] = true;
  return {};
}

}  // namespace b3os::fakes
