#pragma once
// The Postgres store: what a cluster's nodes and routers share (docs/cluster.md). The same
// interface and the same record columns as the SQLite store (row_codec.h), through libpq:
// a pool of connections, each statement prepared once per connection, a transaction wherever
// a rule spans rows, and versioned migrations applied under an advisory lock so that nodes
// starting together migrate once.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/store/store.h"

namespace b3os::store {

namespace pg {
class Conn;
}  // namespace pg

class PgStore final : public Store {
 public:
  /// Connects to `url` (a postgres:// URI or a libpq "key=value" string), keeps at most
  /// `pool_size` connections, and brings the schema to the latest version. Fails on a
  /// database whose schema is newer than this build. `node` names the process's node: the
  /// idempotency claims it makes are its own, and idempotency_clear_pending (at its start)
  /// releases only those, never another node's requests in flight.
  static Result<std::unique_ptr<Store>> open(const std::string& url, int pool_size = 8, std::string node = "node");
  /// The schema version this build writes (b3os_schema.version after open).
  static int latest_schema_version();
  ~PgStore() override;

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
  Result<std::vector<SnapshotRecord>> list_snapshots(const std::string& project_id,
                                                     const std::optional<std::string>& after_id, int limit) override;
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
  Result<IdempotencyHit> idempotency_begin(const std::string& project_id, const std::string& key,
                                           const std::string& api_key_id, const std::string& method,
                                           const std::string& path, const std::string& body_hash) override;
  Result<void> idempotency_finish(const std::string& project_id, const std::string& key, int status,
                                  const std::string& content_type, const std::string& body) override;
  Result<void> idempotency_clear_pending() override;
  Result<void> ensure_budget(const std::string& id, const std::string& project_id, std::optional<Micros> cap) override;
  Result<void> set_budget_cap(const std::string& id, const std::string& project_id, std::optional<Micros> cap) override;
  Result<std::optional<BudgetRow>> get_budget(const std::string& id) override;
  Result<void> record_call(const LedgerRow& row) override;
  Result<std::vector<LedgerRow>> ledger(const std::string& budget_id, int limit) override;
  Result<bool> project_allows_infer(const std::string& project_id) override;
  Result<void> set_project_infer(const std::string& project_name, bool allowed) override;
  Result<void> idempotency_abort(const std::string& project_id, const std::string& key) override;
  bool shared() const override { return true; }
  std::string node() const override { return node_; }
  Result<BudgetHold> reserve_budget(const std::string& budget_id, const std::string& hold_id, Micros amount) override;
  Result<void> settle_budget(const std::string& hold_id, const LedgerRow& row) override;
  Result<void> register_node(const NodeRecord& rec) override;
  Result<std::string> heartbeat(const NodeRecord& load) override;
  Result<std::vector<std::string>> mark_silent_nodes_down(int64_t silence_ms) override;
  Result<std::vector<NodeRecord>> list_nodes() override;
  Result<bool> set_node_state(const std::string& id, const std::string& state) override;
  Result<std::string> sandbox_node(const std::string& id) override;
  Result<ProjectStarts> hold_project_starts(const std::string& project_id, int n, int max) override;
  Result<void> release_project_starts(const std::string& project_id, int n) override;
  Result<void> touch_object_root(const std::string& key) override;
  Result<std::vector<std::string>> stale_object_roots(int64_t grace_ms) override;
  Result<bool> collect_object_root(const std::string& key, int64_t grace_ms,
                                   const std::function<Result<void>()>& remove) override;

 private:
  PgStore(std::string url, int pool_size, std::string node);
  /// A connection of the pool for the length of `body` (a new one when none is idle and the
  /// pool has room; else it waits up to 5 s, then 503 node_unavailable).
  Result<void> with_conn(const std::function<Result<void>(pg::Conn&)>& body);
  /// `body` inside BEGIN ... COMMIT on one connection, rolled back when it or the commit fails.
  Result<void> transaction(const std::function<Result<void>(pg::Conn&)>& body);
  Result<void> migrate();

  const std::string url_;
  const int pool_size_;
  const std::string node_;
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<std::unique_ptr<pg::Conn>> idle_;
  int open_ = 0;  // connections that exist, idle or leased
};

/// Runs statements without parameters on a connection of their own (CREATE DATABASE, which no
/// transaction may hold: the store tests make a database per test with it).
Result<void> pg_admin_exec(const std::string& url, const std::string& sql);

}  // namespace b3os::store
