#pragma once
// FakeStore: the sandbox module's store in memory, with writes that can be made to fail or hang.

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "daemon/store/store.h"

namespace b3os::fakes {

class FakeStore : public store::SandboxStore {
 public:
  Result<void> put_sandbox(const store::SandboxRecord& rec) override;
  Result<std::optional<store::SandboxRecord>> get_sandbox(const std::string& project_id, const std::string& id) override;
  Result<std::vector<store::SandboxRecord>> list_sandboxes(const store::SandboxQuery& q) override;
  Result<std::vector<store::SandboxRecord>> active_sandboxes() override;
  Result<int64_t> forget_ended_before(int64_t ended_before_ms, int most) override;
  Result<int64_t> forget_ended_past(const std::string& project_id, int keep, int most) override;
  Result<std::vector<std::string>> ended_projects() override;
  Result<void> put_snapshot(const store::SnapshotRecord& rec) override;
  Result<std::optional<store::SnapshotRecord>> get_snapshot(const std::string& project_id, const std::string& id) override;
  Result<std::vector<store::SnapshotRecord>> list_snapshots(const std::string& project_id,
                                                            const std::optional<std::string>& after_id, int limit) override;
  Result<void> delete_snapshot(const std::string& project_id, const std::string& id) override;
  Result<store::SnapshotUsage> snapshot_usage(const std::string& project_id) override;
  Result<std::vector<std::string>> snapshot_ids() override;
  Result<bool> project_allows_infer(const std::string&) override { return true; }
  Result<void> ensure_budget(const std::string& id, const std::string&, std::optional<Micros>) override;
  Result<void> put_port_token(const store::PortTokenRecord& rec, int64_t now_ms) override {
    std::lock_guard lk(mu_);
    std::erase_if(port_tokens_, [&](const auto& kv) { return kv.second.expires_ms <= now_ms; });
    port_tokens_[rec.token_sha256] = rec;
    return {};
  }
  Result<std::optional<store::PortTokenRecord>> find_port_token(const std::string& h) override {
    std::lock_guard lk(mu_);
    auto it = port_tokens_.find(h);
    if (it == port_tokens_.end()) return std::optional<store::PortTokenRecord>();
    return std::optional<store::PortTokenRecord>(it->second);
  }
  Result<void> delete_port_tokens(const std::string& sandbox_id) override {
    std::lock_guard lk(mu_);
    std::erase_if(port_tokens_, [&](const auto& kv) { return kv.second.sandbox_id == sandbox_id; });
    return {};
  }

  /// The next `n` writes (sandbox or snapshot) fail.
  void fail_writes(int n) {
    std::lock_guard lk(mu_);
    fail_writes_ = n;
  }
  std::map<std::string, store::SandboxRecord> sandboxes() const {
    std::lock_guard lk(mu_);
    return sandboxes_;
  }
  std::map<std::string, store::SnapshotRecord> snapshots() const {
    std::lock_guard lk(mu_);
    return snapshots_;
  }

 private:
  Result<void> write_allowed(const std::string& what);

  mutable std::mutex mu_;
  std::map<std::string, store::SandboxRecord> sandboxes_;
  std::map<std::string, store::SnapshotRecord> snapshots_;
  std::map<std::string, bool> budgets_;
  std::map<std::string, store::PortTokenRecord> port_tokens_;
  int fail_writes_ = 0;
};

}  // namespace b3os::fakes
