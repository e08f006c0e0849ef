#pragma once
// The SQLite store (WAL): a single node's, and the default. See store.h for what each call does.

#include <sqlite3.h>

#include <functional>
#include <mutex>

#include "daemon/store/store.h"

namespace b3os::store {

class SqliteStore final : public Store {
 public:
  static Result<std::unique_ptr<Store>> open(const std::string& path);
  ~SqliteStore() override;

  Result<NewApiKey> create_api_key(const std::string& project_name, bool e2b = false) override;
  Result<std::optional<ApiKeyRecord>> find_api_key(std::string_view plain_key) override;
  Result<std::vector<ApiKeyRecord>> list_api_keys(bool include_revoked) override;
  Result<void> touch_api_key(const std::string& key_id, int64_t now_ms) override;
  Result<bool> revoke_api_key(const std::string& key_id, int64_t now_ms) override;
  Result<void> put_sandbox(const SandboxRecord& rec) override;
  Result<void> put_sandboxes(const std::vector<SandboxRecord>& recs) override;
  Result<std::optional<SandboxRecord>> get_sandbox(const std::string& project_id, const std::string& id) override;
  Result<std::vector<SandboxRecord>> list_sandboxes(const SandboxQuery& q) override;
  Result<std::vector<SandboxRecord>> active_sandboxes() override;
  Result<int64_t> forget_ended_before(int64_t ended_before_ms, int most) override;
  Result<int64_t> forget_ended_past(const std::string& project_id, int keep, int most) override;
  Result<std::vector<std::string>> ended_projects() override;
  Result<void> put_snapshot(const SnapshotRecord& rec) override;
  Result<std::optional<SnapshotRecord>> get_snapshot(const std::string& project_id, const std::string& id) override;
  Result<std::vector<SnapshotRecord>> list_snapshots(const std::string& project_id, const std::optional<std::string>& after_id, int limit) override;
  Result<void> delete_snapshot(const std::string& project_id, const std::string& id) override;
  Result<SnapshotUsage> snapshot_usage(const std::string& project_id) override;
  Result<std::vector<std::string>> snapshot_ids() override;
  Result<void> put_port_token(const PortTokenRecord& rec, int64_t now_ms) override;
  Result<std::optional<PortTokenRecord>> find_port_token(const std::string& token_sha256) override;
  Result<void> delete_port_tokens(const std::string& sandbox_id) override;
  Result<void> put_template_build(const TemplateBuildRecord& rec) override;
  Result<std::optional<TemplateBuildRecord>> get_template_build(const std::string& id) override;
  Result<std::vector<TemplateBuildRecord>> template_builds() override;
  Result<void> delete_template(const std::string& template_id, int64_t now_ms) override;
  Result<void> forget_template_build(const std::string& id) override;
  Result<std::vector<std::string>> snapshot_rootfs() override;
  Result<IdempotencyHit> idempotency_begin(const std::string& project_id, const std::string& key, const std::string& api_key_id, const std::string& method, const std::string& path, const std::string& body_hash) override;
  Result<void> idempotency_finish(const std::string& project_id, const std::string& key, int status, const std::string& content_type, const std::string& body) override;
  Result<void> idempotency_clear_pending() override;
  Result<void> ensure_budget(const std::string& id, const std::string& project_id, std::optional<Micros> cap) override;
  Result<void> set_budget_cap(const std::string& id, const std::string& project_id, std::optional<Micros> cap) override;
  Result<std::optional<BudgetRow>> get_budget(const std::string& id) override;
  Result<void> record_call(const LedgerRow& row) override;
  Result<std::vector<LedgerRow>> ledger(const std::string& budget_id, int limit) override;
  Result<bool> project_allows_infer(const std::string& project_id) override;
  Result<void> set_project_infer(const std::string& project_name, bool allowed) override;
  Result<void> idempotency_abort(const std::string& project_id, const std::string& key) override;

 private:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  Result<void> migrate();
  Result<void> exec(const char* sql);
  /// Runs `body` in BEGIN IMMEDIATE ... COMMIT, rolled back when it or the commit fails.
  /// Under mu_.
  Result<void> transaction(const std::function<Result<void>()>& body);
  /// One sandbox row, inserted or replaced. Under mu_.
  Result<void> save_sandbox(const SandboxRecord& rec);

  sqlite3* db_;
  std::mutex mu_;
};

}  // namespace b3os::store
