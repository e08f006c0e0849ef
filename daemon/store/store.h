#pragma once
// Store: everything that must outlive b3osd: projects, API keys (hashed), sandboxes, their
// secrets, snapshots, templates, budgets and idempotency records. The interface; SQLite
// implements it (sqlite_store.h).

#include <concepts>
#include <cstdint>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/money.h"
#include "common/result.h"
#include "daemon/store/records.h"

namespace b3os::store {

/// An API key as stored (the key itself is never stored, only its SHA-256).
struct ApiKeyRecord {
  std::string id;            // key_...
  std::string project_id;    // prj_...
  std::string project_name;
  std::string prefix;        // first characters of the key, for listings
  int64_t created_at_ms = 0;
  int64_t last_used_at_ms = 0;  // 0: never (noted at most once a minute)
  int64_t revoked_at_ms = 0;    // 0: in force
};

/// A freshly created key: the plain key is shown once.
struct NewApiKey {
  std::string key;
  ApiKeyRecord record;
};

/// Filter for listing sandboxes of one project, newest first.
struct SandboxQuery {
  std::string project_id;
  std::optional<std::string> status;  // the API status: running, paused, stopped, failed
  std::vector<std::pair<std::string, std::string>> metadata;  // all must match
  std::optional<std::string> after_id;                        // cursor: ids older than this
  int limit = 20;
};

/// What an Idempotency-Key lookup found.
struct IdempotencyHit {
  /// kFull: the project holds IdempotencyLimits::max_records live keys; nothing was claimed.
  enum class Kind { kNew, kReplay, kConflict, kFull } kind = Kind::kNew;
  std::string reason;    // for kConflict
  int status = 0;        // for kReplay
  std::string content_type;
  std::string body;
};

/// What a project may make the store keep of its Idempotency-Keys (24 hours each): a tenant
/// sending keys as fast as its rate allows must not fill the data disk (docs/api.md).
struct IdempotencyLimits {
  int64_t max_records = 10'000;         // live keys per project; past it a new key is 429
  uint64_t max_reply_bytes = 64 << 10;  // an answer larger is not kept (its replay says so)
  uint64_t max_bytes = 16 << 20;        // answers kept per project, in all
};

/// The answer kept in place of one that is not (larger than max_reply_bytes, or past the
/// project's max_bytes): a 409 idempotency_key_conflict saying the request ran once, how it
/// was answered, and why that answer cannot be replayed.
std::string idempotency_not_kept(int status, uint64_t bytes, const IdempotencyLimits& limits);

/// A spend budget: a sandbox grant's (`grt_...`, shared by the sandbox and its forks) or an
/// API key's (`key_...`). A missing cap means no limit, only metering. Money in micro-dollars.
struct BudgetRow {
  std::string id;
  std::string project_id;
  std::optional<Micros> cap_micros;
  Micros spent_micros = 0;
  Micros reserved_micros = 0;  // held by calls in flight (kept in the store only when it is shared)
};

/// What holding budget for a call found: held or refused, and the budget as it stands after
/// the hold (or as it stood when refused).
struct BudgetHold {
  bool held = false;
  BudgetRow budget;
};

/// A node of a cluster, as the shared store keeps it (docs/cluster.md).
struct NodeRecord {
  std::string id;
  std::string url;              // its internal listener (router and node-to-node traffic)
  std::string state = "ready";  // ready, draining, down
  int64_t started_ms = 0;
  int64_t heartbeat_ms = 0;     // the store's clock, not the node's
  // What it can hold, and what it holds now.
  int64_t max_sandboxes = 0, memory_mib = 0, vcpu = 0;
  int64_t sandboxes = 0, used_memory_mib = 0, used_vcpu = 0;
  std::vector<std::string> warm;  // templates it has a warm pool or checkpoint of
};

/// One model call as charged (money in micro-dollars).
struct LedgerRow {
  std::string budget_id, project_id, sandbox_id, key_id, model;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Micros cost_micros = 0, reserved_micros = 0;
  double duration_ms = 0;
  int status = 0;
  std::string outcome;  // completed, upstream_error, broken_stream, client_gone, ...
};

/// What the sandbox module needs of the store: its records, the project's model switch and
/// budgets. An interface, so the lifecycle can be unit-tested with tests/fakes/fake_store.h.
struct SnapshotUsage {
  int64_t count = 0;
  uint64_t bytes = 0;
};

class SandboxStore {
 public:
  virtual ~SandboxStore() = default;
  virtual Result<void> put_sandbox(const SandboxRecord& rec) = 0;
  /// Several records at once (the forks of one fork call); the store saves all or none.
  virtual Result<void> put_sandboxes(const std::vector<SandboxRecord>& recs) {
    for (const auto& r : recs)
      if (auto saved = put_sandbox(r); !saved) return saved;
    return {};
  }
  virtual Result<std::optional<SandboxRecord>> get_sandbox(const std::string& project_id, const std::string& id) = 0;
  /// One page of sandboxes; returns up to limit+1 records so the caller knows if there is more.
  virtual Result<std::vector<SandboxRecord>> list_sandboxes(const SandboxQuery& q) = 0;
  /// Every sandbox that is running or paused, all projects (used at start-up).
  virtual Result<std::vector<SandboxRecord>> active_sandboxes() = 0;
  /// Forgets ended (stopped or failed) sandboxes' records, at most `most` in one call, and says
  /// how many: those that ended before `ended_before_ms`; or those of `project_id` past its
  /// `keep` newest ended ones. Running and paused ones are never touched. Each is one
  /// statement on an index of the ended records.
  virtual Result<int64_t> forget_ended_before(int64_t ended_before_ms, int most) = 0;
  virtual Result<int64_t> forget_ended_past(const std::string& project_id, int keep, int most) = 0;
  /// The projects that have ended sandboxes.
  virtual Result<std::vector<std::string>> ended_projects() = 0;

  virtual Result<void> put_snapshot(const SnapshotRecord& rec) = 0;
  virtual Result<std::optional<SnapshotRecord>> get_snapshot(const std::string& project_id, const std::string& id) = 0;
  /// One page of a project's snapshots, newest first (limit+1 records, as list_sandboxes).
  virtual Result<std::vector<SnapshotRecord>> list_snapshots(const std::string& project_id,
                                                             const std::optional<std::string>& after_id, int limit) = 0;
  virtual Result<void> delete_snapshot(const std::string& project_id, const std::string& id) = 0;
  /// What a project's snapshots hold: how many, and their images' bytes (their quota).
  virtual Result<SnapshotUsage> snapshot_usage(const std::string& project_id) = 0;
  /// The ids of every snapshot, all projects (used at start-up to sweep images without a record).
  virtual Result<std::vector<std::string>> snapshot_ids() = 0;
  /// The root filesystems this node's snapshots were taken on (their restores need them);
  /// a store that cannot say fails, and nothing is collected.
  virtual Result<std::vector<std::string>> snapshot_rootfs() {
    return fail(ErrorCode::kNotImplemented, "this store does not list the roots of snapshots");
  }

  /// Whether a project's keys and sandboxes may use the model gateway (default yes).
  virtual Result<bool> project_allows_infer(const std::string& project_id) = 0;
  /// Creates a budget unless it exists (its cap, in micro-dollars, is then left as it is).
  virtual Result<void> ensure_budget(const std::string& id, const std::string& project_id,
                                     std::optional<Micros> cap) = 0;
  /// Keeps a minted preview token (its hash) and forgets those expired before `now_ms`.
  virtual Result<void> put_port_token(const PortTokenRecord& rec, int64_t now_ms) = 0;
  /// The token with this SHA-256 (lowercase hex), if kept.
  virtual Result<std::optional<PortTokenRecord>> find_port_token(const std::string& token_sha256) = 0;
  /// Forgets every token of a sandbox (it ended).
  virtual Result<void> delete_port_tokens(const std::string& sandbox_id) = 0;

  /// A project's concurrency across a cluster (docs/cluster.md): counts `n` sandboxes about
  /// to start on this node against `max`, with the project's live sandboxes on every node and
  /// the starts every node holds, in one transaction under the project's lock. `used` is
  /// what was counted before these. A single node's store holds nothing (its node counts).
  struct ProjectStarts {
    bool held = true;
    int64_t used = 0;
  };
  virtual Result<ProjectStarts> hold_project_starts(const std::string& project_id, int n, int max) {
    return ProjectStarts{};
  }
  /// Gives back `n` starts held by hold_project_starts (the sandboxes are live, or failed).
  virtual Result<void> release_project_starts(const std::string& project_id, int n) { return {}; }

  /// Roots in a cluster's object store that records share (docs/cluster.md, "The object
  /// store is collected"): a snapshot's, "rootfs/FP", and a template's, "template-roots/A".
  /// A node touches a root (the store's clock) before it looks for it or puts it; the
  /// collector leaves a root alone for `grace_ms` after its last touch. A touch waits while a
  /// collector removes that root, so a root found after a touch stays. A single node's store
  /// keeps nothing.
  virtual Result<void> touch_object_root(const std::string& key) { return {}; }
  /// The roots untouched for `grace_ms` (candidates: collect_object_root decides).
  virtual Result<std::vector<std::string>> stale_object_roots(int64_t grace_ms) { return std::vector<std::string>{}; }
  /// Under the root's lock: if it is still untouched for `grace_ms` and no record refers to
  /// it (a snapshot taken against it, a template build of it not deleted), `remove` deletes
  /// its objects and the root is forgotten (true). `remove` failing forgets nothing.
  virtual Result<bool> collect_object_root(const std::string& key, int64_t grace_ms,
                                           const std::function<Result<void>()>& remove) {
    return false;
  }
};

/// What the template module needs of the store: its builds (docs/templates.md). An interface,
/// the seam a shared store (the cluster's) implements too.
class TemplateStore {
 public:
  virtual ~TemplateStore() = default;
  /// Inserts or replaces a build.
  virtual Result<void> put_template_build(const TemplateBuildRecord& rec) = 0;
  virtual Result<std::optional<TemplateBuildRecord>> get_template_build(const std::string& id) = 0;
  /// Every build of every template, deleted ones included, oldest first.
  virtual Result<std::vector<TemplateBuildRecord>> template_builds() = 0;
  /// Marks every version of a template deleted (hidden from now on).
  virtual Result<void> delete_template(const std::string& template_id, int64_t now_ms) = 0;
  /// Forgets the builds of a deleted template once nothing uses their files.
  virtual Result<void> forget_template_build(const std::string& id) = 0;
  /// The root filesystems snapshots were taken on (their restores need them).
  virtual Result<std::vector<std::string>> snapshot_rootfs() = 0;
  /// As SandboxStore::touch_object_root (a template's root, before it is put).
  virtual Result<void> touch_object_root(const std::string& key) { return {}; }
};

/// Everything that must outlive b3osd, behind one interface: SQLite on a single node
/// (SqliteStore, daemon/store/sqlite_store.h), Postgres in a cluster (docs/cluster.md).
class Store : public SandboxStore, public TemplateStore {
 public:
  /// A single node's store: the SQLite database at `path`, opened (created if needed) in WAL
  /// mode with its schema brought to the latest version (each migration step in one
  /// transaction; a no-op when current). Fails on a database newer than this build.
  static Result<std::unique_ptr<Store>> open(const std::string& path);
  /// The SQLite schema version this build writes (PRAGMA user_version after open).
  static int latest_schema_version();
  ~Store() override = default;

  /// Creates a key for project `project_name` (the project is created if new): b3os_sk_ and
  /// 40 base32 characters, or with `e2b` e2b_ and 40 hex digits (the shape E2B's SDKs are used
  /// to; docs/e2b.md). Either works on every route.
  virtual Result<NewApiKey> create_api_key(const std::string& project_name, bool e2b = false) = 0;
  /// Looks a plain key up by its hash; nullopt if unknown or revoked.
  virtual Result<std::optional<ApiKeyRecord>> find_api_key(std::string_view plain_key) = 0;
  /// Lists keys (no secrets), for `b3os keys list`.
  virtual Result<std::vector<ApiKeyRecord>> list_api_keys(bool include_revoked = false) = 0;
  /// Notes that a key was used now (the API calls it at most once a minute per key).
  virtual Result<void> touch_api_key(const std::string& key_id, int64_t now_ms) = 0;
  /// Revokes a key: every request with it is refused from now on (401), MCP sessions it opened
  /// included. False when no key in force has that id.
  virtual Result<bool> revoke_api_key(const std::string& key_id, int64_t now_ms) = 0;

  virtual Result<void> put_sandbox(const SandboxRecord& rec) = 0;
  /// In one transaction: all saved, or none.
  virtual Result<void> put_sandboxes(const std::vector<SandboxRecord>& recs) = 0;
  virtual Result<std::optional<SandboxRecord>> get_sandbox(const std::string& project_id, const std::string& id) = 0;
  virtual Result<std::vector<SandboxRecord>> list_sandboxes(const SandboxQuery& q) = 0;
  virtual Result<std::vector<SandboxRecord>> active_sandboxes() = 0;
  virtual Result<int64_t> forget_ended_before(int64_t ended_before_ms, int most) = 0;
  virtual Result<int64_t> forget_ended_past(const std::string& project_id, int keep, int most) = 0;
  virtual Result<std::vector<std::string>> ended_projects() = 0;

  virtual Result<void> put_snapshot(const SnapshotRecord& rec) = 0;
  virtual Result<std::optional<SnapshotRecord>> get_snapshot(const std::string& project_id, const std::string& id) = 0;
  virtual Result<std::vector<SnapshotRecord>> list_snapshots(const std::string& project_id,
                                                     const std::optional<std::string>& after_id, int limit) = 0;
  virtual Result<void> delete_snapshot(const std::string& project_id, const std::string& id) = 0;
  virtual Result<SnapshotUsage> snapshot_usage(const std::string& project_id) = 0;
  virtual Result<std::vector<std::string>> snapshot_ids() = 0;
  virtual Result<void> put_port_token(const PortTokenRecord& rec, int64_t now_ms) = 0;
  virtual Result<std::optional<PortTokenRecord>> find_port_token(const std::string& token_sha256) = 0;
  virtual Result<void> delete_port_tokens(const std::string& sandbox_id) = 0;

  virtual Result<void> put_template_build(const TemplateBuildRecord& rec) = 0;
  virtual Result<std::optional<TemplateBuildRecord>> get_template_build(const std::string& id) = 0;
  virtual Result<std::vector<TemplateBuildRecord>> template_builds() = 0;
  virtual Result<void> delete_template(const std::string& template_id, int64_t now_ms) = 0;
  virtual Result<void> forget_template_build(const std::string& id) = 0;
  virtual Result<std::vector<std::string>> snapshot_rootfs() = 0;
  /// Both interfaces name it (SandboxStore's says what it does); a single node keeps nothing.
  Result<void> touch_object_root(const std::string& key) override { return {}; }

  /// The bounds the idempotency calls below apply (set once, at start).
  void set_idempotency_limits(const IdempotencyLimits& l) { idempotency_limits_ = l; }
  const IdempotencyLimits& idempotency_limits() const { return idempotency_limits_; }
  /// Claims `key` for a request, or finds its earlier response. Records expire after 24 h.
  /// kFull when the project holds its max_records already.
  virtual Result<IdempotencyHit> idempotency_begin(const std::string& project_id, const std::string& key,
                                           const std::string& api_key_id, const std::string& method,
                                           const std::string& path, const std::string& body_hash) = 0;
  /// Stores the response of a claimed key; in its place idempotency_not_kept() when it is
  /// larger than max_reply_bytes or the project's kept answers would pass max_bytes.
  virtual Result<void> idempotency_finish(const std::string& project_id, const std::string& key, int status,
                                  const std::string& content_type, const std::string& body) = 0;
  /// Releases every claim that has no response: called at start, when the requests that
  /// claimed them died with the previous process.
  virtual Result<void> idempotency_clear_pending() = 0;
  virtual Result<void> ensure_budget(const std::string& id, const std::string& project_id, std::optional<Micros> cap) = 0;
  /// Creates a budget or changes its cap (micro-dollars; nullopt: no cap).
  virtual Result<void> set_budget_cap(const std::string& id, const std::string& project_id, std::optional<Micros> cap) = 0;
  // A cap in dollars (std::optional<double>) would convert to micro-dollars silently,
  // truncated: convert with usd_to_micros instead; these make the mistake a compile error.
  template <std::floating_point T>
  Result<void> ensure_budget(const std::string&, const std::string&, std::optional<T>) = delete;
  template <std::floating_point T>
  Result<void> set_budget_cap(const std::string&, const std::string&, std::optional<T>) = delete;
  virtual Result<std::optional<BudgetRow>> get_budget(const std::string& id) = 0;
  /// Appends a call to the ledger and adds its cost to its budget, in one transaction.
  virtual Result<void> record_call(const LedgerRow& row) = 0;
  /// The newest `limit` ledger rows of a budget.
  virtual Result<std::vector<LedgerRow>> ledger(const std::string& budget_id, int limit) = 0;
  virtual Result<bool> project_allows_infer(const std::string& project_id) = 0;
  virtual Result<void> set_project_infer(const std::string& project_name, bool allowed) = 0;
  /// Releases a claimed key without a stored response (the request failed with a 5xx).
  virtual Result<void> idempotency_abort(const std::string& project_id, const std::string& key) = 0;

  // ---- a shared store's (a cluster's, docs/cluster.md); a single node's has none of it ----

  /// True for a store several nodes share: budgets are then held in it (reserve_budget), not
  /// in one process's memory, and the calls below work.
  virtual bool shared() const { return false; }
  /// This process's node name in the store.
  virtual std::string node() const { return ""; }
  /// Holds `amount` of `budget_id` for call `hold_id`, in one conditional UPDATE: refused
  /// (held false, nothing held) when spent + held + amount would pass the cap, whichever node's
  /// calls hold the rest. kInternal when there is no such budget.
  virtual Result<BudgetHold> reserve_budget(const std::string& budget_id, const std::string& hold_id, Micros amount);
  /// Ends hold `hold_id`: its amount is released, `row.cost_micros` charged and the ledger row
  /// written, in one transaction. A hold already released (its node was marked down meanwhile)
  /// still charges the cost.
  virtual Result<void> settle_budget(const std::string& hold_id, const LedgerRow& row);
  /// Registers this node (ready; a draining one stays draining) and releases what its previous
  /// process held: budget holds and idempotency claims.
  virtual Result<void> register_node(const NodeRecord& rec);
  /// Notes that this node is alive with `load` (its sandboxes, memory and vCPUs in use, warm
  /// templates); returns its state as the store has it ("down" when another node marked it).
  virtual Result<std::string> heartbeat(const NodeRecord& load);
  /// Marks down every node silent for `silence_ms` (each by one conditional UPDATE, so one
  /// caller does the work): their sandboxes become failed with their usage final, their budget
  /// holds and idempotency claims are released. Returns the nodes it marked.
  virtual Result<std::vector<std::string>> mark_silent_nodes_down(int64_t silence_ms);
  virtual Result<std::vector<NodeRecord>> list_nodes();
  /// Sets a node's state (ready or draining); false when no such node.
  virtual Result<bool> set_node_state(const std::string& id, const std::string& state);
  /// The node holding sandbox `id` (of any project; ids are unique), "" when there is no such
  /// sandbox: for a preview URL, which names a sandbox but no project (the router's).
  virtual Result<std::string> sandbox_node(const std::string& id);

 protected:
  IdempotencyLimits idempotency_limits_;
};

/// The store `spec` names: empty (a single node's default: DATA_DIR/b3os.db), `sqlite:PATH`, or
/// a `postgres://` (`postgresql://`) URL, a cluster's shared store (docs/cluster.md) with at
/// most `pool_size` connections, `node` naming this process in it.
Result<std::unique_ptr<Store>> open_store(const std::string& spec, const std::string& data_dir,
                                          const std::string& node, int pool_size = 8);

/// Hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);
/// The API key a request presents: `Authorization: Bearer KEY`, or (what E2B's SDKs send)
/// `X-API-Key: KEY` when there is no Authorization header. 401 unauthorized, saying what is
/// wrong, when neither is there or the key is not of our shapes (b3os_sk_..., e2b_...).
Result<std::string_view> presented_api_key(std::string_view authorization, std::string_view x_api_key);
/// A new plain API key: b3os_sk_ and 40 base32 characters (200 bits), or with `e2b` e2b_ and
/// 40 hex digits (160 bits).
std::string new_api_key(bool e2b);

}  // namespace b3os::store
