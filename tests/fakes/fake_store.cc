#include "tests/fakes/fake_store.h"

#include <algorithm>
#include <functional>
#include <set>
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

Result<int64_t> FakeStore::forget_ended_before(int64_t ended_before_ms, int most) {
  std::lock_guard lk(mu_);
  int64_t n = 0;
  for (auto it = sandboxes_.begin(); it != sandboxes_.end() && n < most;) {
    if (it->second.ended() && it->second.stopped_ms && *it->second.stopped_ms < ended_before_ms) {
      it = sandboxes_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

Result<int64_t> FakeStore::forget_ended_past(const std::string& project_id, int keep, int most) {
  std::lock_guard lk(mu_);
  std::vector<std::pair<int64_t, std::string>> ended;  // (ended at, id), newest first after the sort
  for (auto& [id, r] : sandboxes_)
    if (r.ended() && r.project_id == project_id) ended.emplace_back(r.stopped_ms.value_or(0), id);
  std::sort(ended.begin(), ended.end(), std::greater<>());
  int64_t n = 0;
  for (size_t i = static_cast<size_t>(keep); i < ended.size() && n < most; ++i, ++n) sandboxes_.erase(ended[i].second);
  return n;
}

Result<std::vector<std::string>> FakeStore::ended_projects() {
  std::lock_guard lk(mu_);
  std::set<std::string> out;
  for (auto& [id, r] : sandboxes_)
    if (r.ended()) out.insert(r.project_id);
  return std::vector<std::string>(out.begin(), out.end());
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
