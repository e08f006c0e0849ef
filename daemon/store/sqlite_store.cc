#include "daemon/store/sqlite_store.h"

#include "daemon/store/row_codec.h"

#include <openssl/sha.h>

#include <cctype>
#include <iterator>

#include "common/clock.h"
#include "common/ids.h"

namespace b3os::store {

namespace {

constexpr int64_t kIdempotencyTtlMs = 24LL * 3600 * 1000;
// How long a statement waits for a lock another process holds before it fails (503).
constexpr int kBusyTimeoutMs = 5000;

/// Runs one or more statements that return no rows.
Result<void> exec_sql(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    const int code = sqlite3_errcode(db) & 0xff;
    if (code == SQLITE_BUSY || code == SQLITE_LOCKED)  // as db_error: 503, retry shortly
      return fail(ErrorCode::kNodeUnavailable, "store: " + msg + " (locked by another process after waiting " +
                                                   std::to_string(kBusyTimeoutMs / 1000) + " s); retry shortly");
    return fail(ErrorCode::kInternal, std::string("store: ") + msg);
  }
  return {};
}

// ---- schema migrations ----
//
// The schema's version is SQLite's user_version. Each step moves a database from the version
// before it to its own, inside one transaction with the version bump, so a crash leaves the
// database at one version or the next, never between. To change the schema, write one more
// step function and add it at the end of kMigrations; never edit a step that has shipped.

/// Version 1: the schema of b3os 0.1 as it shipped (a database of 0.1 has user_version 0 and
/// already holds these tables: IF NOT EXISTS makes this step a no-op on it).
Result<void> schema_v1(sqlite3* db) {
  return exec_sql(db, R"sql(
CREATE TABLE IF NOT EXISTS projects (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects(id),
  key_sha256 TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL,
  revoked_at_ms INTEGER
);
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  status TEXT NOT NULL,
  doc TEXT NOT NULL,
  secrets TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS sandboxes_project ON sandboxes(project_id, id);
CREATE INDEX IF NOT EXISTS sandboxes_status ON sandboxes(status);
CREATE TABLE IF NOT EXISTS snapshots (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  doc TEXT NOT NULL,
  secrets TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS snapshots_project ON snapshots(project_id, id);
CREATE TABLE IF NOT EXISTS idempotency (
  project_id TEXT NOT NULL,
  key TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  body_sha256 TEXT NOT NULL,
  status INTEGER,
  content_type TEXT,
  body BLOB,
  created_at_ms INTEGER NOT NULL,
  PRIMARY KEY (project_id, key)
);
CREATE TABLE IF NOT EXISTS budgets (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  cap_usd REAL,
  spent_usd REAL NOT NULL DEFAULT 0,
  created_at_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  budget_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  sandbox_id TEXT,
  key_id TEXT,
  model TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  cost_usd REAL NOT NULL,
  reserved_usd REAL NOT NULL,
  duration_ms REAL NOT NULL,
  status INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS ledger_budget ON ledger(budget_id, id);
CREATE TABLE IF NOT EXISTS project_settings (
  project_id TEXT PRIMARY KEY,
  infer INTEGER NOT NULL DEFAULT 1
);
)sql");
}

/// Version 2: money in integer micro-dollars (budgets.cap_micros and spent_micros,
/// ledger.cost_micros and reserved_micros), so that sums and cap checks are exact. REAL
/// dollars become micro-dollars rounded to the nearest one. SQLite cannot change a column's
/// type in place: each table is rebuilt under its name (ledger ids, and so its order and its
/// AUTOINCREMENT sequence, are kept).
Result<void> integer_money_v2(sqlite3* db) {
  return exec_sql(db, R"sql(
CREATE TABLE budgets_v2 (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  cap_micros INTEGER,
  spent_micros INTEGER NOT NULL DEFAULT 0,
  created_at_ms INTEGER NOT NULL
);
INSERT INTO budgets_v2(id, project_id, cap_micros, spent_micros, created_at_ms)
  SELECT id, project_id, CAST(ROUND(cap_usd * 1000000) AS INTEGER), CAST(ROUND(spent_usd * 1000000) AS INTEGER),
         created_at_ms FROM budgets;
DROP TABLE budgets;
ALTER TABLE budgets_v2 RENAME TO budgets;

CREATE TABLE ledger_v2 (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  budget_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  sandbox_id TEXT,
  key_id TEXT,
  model TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL,
  cost_micros INTEGER NOT NULL,
  reserved_micros INTEGER NOT NULL,
  duration_ms REAL NOT NULL,
  status INTEGER NOT NULL,
  outcome TEXT NOT NULL,
  created_at_ms INTEGER NOT NULL
);
INSERT INTO ledger_v2(id, budget_id, project_id, sandbox_id, key_id, model, prompt_tokens, completion_tokens,
                      cost_micros, reserved_micros, duration_ms, status, outcome, created_at_ms)
  SELECT id, budget_id, project_id, sandbox_id, key_id, model, prompt_tokens, completion_tokens,
         CAST(ROUND(cost_usd * 1000000) AS INTEGER), CAST(ROUND(reserved_usd * 1000000) AS INTEGER),
         duration_ms, status, outcome, created_at_ms FROM ledger;
DROP TABLE ledger;
ALTER TABLE ledger_v2 RENAME TO ledger;
CREATE INDEX ledger_budget ON ledger(budget_id, id);
)sql");
}

Result<void> typed_records_v3(sqlite3* db);

/// Version 4: minted preview tokens (ports), kept as SHA-256 only.
Result<void> port_tokens_v4(sqlite3* db) {
  return exec_sql(db, R"sql(
CREATE TABLE port_tokens (
  token_sha256 TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  port INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL
);
CREATE INDEX port_tokens_sandbox ON port_tokens(sandbox_id);
CREATE INDEX port_tokens_expiry ON port_tokens(expires_ms);
)sql");
}

/// Version 5: when each API key was last used (written at most once a minute per key), so an
/// operator can tell a key in use from one to revoke.
Result<void> key_last_use_v5(sqlite3* db) { return exec_sql(db, "ALTER TABLE api_keys ADD COLUMN last_used_at_ms INTEGER;"); }

/// Version 6: templates users build (docs/templates.md), one row per version.
Result<void> template_builds_v6(sqlite3* db) {
  return exec_sql(db, R"sql(
CREATE TABLE template_builds (
  id TEXT PRIMARY KEY,
  template_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version INTEGER NOT NULL,
  status TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  artifact TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  finished_ms INTEGER NOT NULL,
  deleted_ms INTEGER,
  doc TEXT NOT NULL
);
CREATE INDEX template_builds_template ON template_builds(template_id, version);
ALTER TABLE sandboxes ADD COLUMN template_id TEXT NOT NULL DEFAULT '';
ALTER TABLE snapshots ADD COLUMN template_id TEXT NOT NULL DEFAULT '';
)sql");
}

/// Version 7: sandboxes whose every port is served without a token (E2B's public traffic).
Result<void> open_ports_v7(sqlite3* db) {
  return exec_sql(db, "ALTER TABLE sandboxes ADD COLUMN open_ports INTEGER NOT NULL DEFAULT 0;");
}

/// Version 8: indexes of the sandboxes by state and when they ended, and by project too, which
/// the periodic forgetting of ended records reads (a scan of every ended record each minute held
/// the store's lock ~1 ms per 1,000 of them; bench/forget_ended.py). Not partial indexes: the
/// planner took the index on state alone over them.
Result<void> ended_indexes_v8(sqlite3* db) {
  return exec_sql(db, R"sql(
CREATE INDEX sandboxes_ended_at ON sandboxes(state, stopped_ms);
CREATE INDEX sandboxes_ended ON sandboxes(project_id, state, stopped_ms);
)sql");
}

/// Version 9: the index the forgetting of old Idempotency-Keys reads (each keyed request
/// deletes the expired ones: without it, a scan of every record).
Result<void> idempotency_index_v9(sqlite3* db) {
  return exec_sql(db, "CREATE INDEX idempotency_created ON idempotency(created_at_ms);");
}

struct Migration {
  int version;         // the user_version after this step
  const char* what;    // for errors and logs
  Result<void> (*apply)(sqlite3* db);
};

constexpr Migration kMigrations[] = {
    {1, "the schema of b3os 0.1", schema_v1},
    {2, "money in integer micro-dollars", integer_money_v2},
    {3, "sandboxes and snapshots in typed columns", typed_records_v3},
    {4, "minted preview tokens", port_tokens_v4},
    {5, "when each API key was last used", key_last_use_v5},
    {6, "templates users build", template_builds_v6},
    {7, "sandboxes with every port open", open_ports_v7},
    {8, "indexes of the ended sandboxes", ended_indexes_v8},
    {9, "an index of the idempotency records by age", idempotency_index_v9},
};

constexpr bool versions_are_consecutive() {
  for (size_t i = 0; i < std::size(kMigrations); ++i)
    if (kMigrations[i].version != static_cast<int>(i) + 1) return false;
  return true;
}
static_assert(versions_are_consecutive(), "kMigrations must list versions 1, 2, 3... in order");

/// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& bind(int i, std::string_view s) {
    sqlite3_bind_text(st_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bind(int i, int64_t v) {
    sqlite3_bind_int64(st_, i, v);
    return *this;
  }
  Stmt& bind(int i, double v) {
    sqlite3_bind_double(st_, i, v);
    return *this;
  }
  Stmt& bind_null(int i) {
    sqlite3_bind_null(st_, i);
    return *this;
  }
  /// SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(st_); }
  /// Ready to step again with new bindings.
  void reset() {
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
  }
  std::string text(int col) {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(st_, col));
    return p ? std::string(p, sqlite3_column_bytes(st_, col)) : std::string();
  }
  std::string blob(int col) {
    auto* p = static_cast<const char*>(sqlite3_column_blob(st_, col));
    return p ? std::string(p, sqlite3_column_bytes(st_, col)) : std::string();
  }
  int64_t i64(int col) { return sqlite3_column_int64(st_, col); }
  double f64(int col) { return sqlite3_column_double(st_, col); }
  bool is_null(int col) { return sqlite3_column_type(st_, col) == SQLITE_NULL; }

 private:
  sqlite3_stmt* st_ = nullptr;
  int rc_;
};

Error db_error(sqlite3* db, std::string_view what) {
  // Another process (the CLI, a backup, an operator's sqlite3) holding the database's lock
  // past busy_timeout is a passing condition of the node, not a fault of the request: 503
  // node_unavailable, which the API answers with Retry-After.
  const int code = sqlite3_errcode(db) & 0xff;
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED)
    return Error{ErrorCode::kNodeUnavailable,
                 std::string("store: ") + std::string(what) + ": the database is locked by another process (" +
                     sqlite3_errmsg(db) + " after waiting " + std::to_string(kBusyTimeoutMs / 1000) + " s); retry shortly",
                 0};
  return Error{ErrorCode::kInternal, std::string("store: ") + std::string(what) + ": " + sqlite3_errmsg(db), 0};
}

// ---- typed records (schema version 3) ----

// Typed records: daemon/store/row_codec.h.
using namespace codec;

template <typename Record, typename From>
Result<std::vector<Record>> all_of(sqlite3* db, Stmt& st, std::string_view what, From from) {
  std::vector<Record> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    auto r = from(st);
    if (!r) return fail(r.error());
    out.push_back(std::move(*r));
  }
  if (rc != SQLITE_DONE) return fail(db_error(db, what));
  return out;
}

/// Version 3: sandboxes and snapshots in typed columns (their state, sizes, times, budget...)
/// instead of a JSON document with private keys; maps and lists stay JSON text in their own
/// columns. Each old document is read with the same code that read it before
/// (records.cc, *_from_legacy), so nothing it held is lost.
Result<void> typed_records_v3(sqlite3* db) {
  if (auto r = exec_sql(db, R"sql(
CREATE TABLE sandboxes_v3 (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  state TEXT NOT NULL,
  template TEXT NOT NULL,
  snapshot_id TEXT,
  vcpu INTEGER NOT NULL,
  memory_mib INTEGER NOT NULL,
  disk_gib INTEGER NOT NULL,
  timeout_s INTEGER NOT NULL,
  on_idle TEXT NOT NULL,
  env TEXT NOT NULL,
  secrets TEXT NOT NULL,
  metadata TEXT NOT NULL,
  ports TEXT NOT NULL,
  api_scopes TEXT NOT NULL,
  spend_cap_micros INTEGER,
  egress_mode TEXT NOT NULL,
  egress_allow TEXT NOT NULL,
  forkable INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL,
  paused_since_ms INTEGER,
  paused_total_ms INTEGER NOT NULL,
  stopped_ms INTEGER,
  stop_reason TEXT,
  stop_message TEXT NOT NULL,
  last_activity_ms INTEGER NOT NULL,
  hostname TEXT NOT NULL,
  rootfs TEXT NOT NULL,
  budget_id TEXT NOT NULL,
  forked_from TEXT NOT NULL
);
CREATE TABLE snapshots_v3 (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  template TEXT NOT NULL,
  vcpu INTEGER NOT NULL,
  memory_mib INTEGER NOT NULL,
  disk_gib INTEGER NOT NULL,
  env TEXT NOT NULL,
  secrets TEXT NOT NULL,
  api_scopes TEXT NOT NULL,
  spend_cap_micros INTEGER,
  egress_mode TEXT NOT NULL,
  egress_allow TEXT NOT NULL,
  forkable INTEGER NOT NULL,
  size_bytes INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  rootfs TEXT NOT NULL,
  budget_id TEXT NOT NULL
);
)sql");
      !r)
    return r;
  {
    Stmt read(db, "SELECT id, project_id, doc, secrets FROM sandboxes");
    Stmt write(db, (std::string("INSERT INTO sandboxes_v3(") + kSandboxColumnsV3 + ") VALUES (" +
                    placeholders(kSandboxColumnsV3) + ")").c_str());
    if (!read.ok() || !write.ok()) return fail(db_error(db, "preparing the sandbox migration"));
    int rc;
    while ((rc = read.step()) == SQLITE_ROW) {
      const std::string id = read.text(0);
      auto doc = nlohmann::json::parse(read.text(2), nullptr, false);
      auto secrets = nlohmann::json::parse(read.text(3), nullptr, false);
      if (doc.is_discarded() || secrets.is_discarded())
        return fail(ErrorCode::kInternal, "store: sandbox " + id + " has a corrupt record");
      auto rec = sandbox_from_legacy(doc, secrets);
      if (!rec) return fail(rec.error());
      rec->project_id = read.text(1);
      bind_sandbox(write, *rec);
      if (write.step() != SQLITE_DONE) return fail(db_error(db, "migrating sandbox " + id));
      write.reset();
    }
    if (rc != SQLITE_DONE) return fail(db_error(db, "reading sandboxes"));
  }
  {
    Stmt read(db, "SELECT id, project_id, doc, secrets FROM snapshots");
    Stmt write(db, (std::string("INSERT INTO snapshots_v3(") + kSnapshotColumnsV3 + ") VALUES (" +
                    placeholders(kSnapshotColumnsV3) + ")").c_str());
    if (!read.ok() || !write.ok()) return fail(db_error(db, "preparing the snapshot migration"));
    int rc;
    while ((rc = read.step()) == SQLITE_ROW) {
      const std::string id = read.text(0);
      auto doc = nlohmann::json::parse(read.text(2), nullptr, false);
      auto secrets = nlohmann::json::parse(read.text(3), nullptr, false);
      if (doc.is_discarded() || secrets.is_discarded())
        return fail(ErrorCode::kInternal, "store: snapshot " + id + " has a corrupt record");
      auto rec = snapshot_from_legacy(doc, secrets);
      if (!rec) return fail(rec.error());
      rec->project_id = read.text(1);
      bind_snapshot(write, *rec);
      if (write.step() != SQLITE_DONE) return fail(db_error(db, "migrating snapshot " + id));
      write.reset();
    }
    if (rc != SQLITE_DONE) return fail(db_error(db, "reading snapshots"));
  }
  return exec_sql(db, R"sql(
DROP TABLE sandboxes;
ALTER TABLE sandboxes_v3 RENAME TO sandboxes;
CREATE INDEX sandboxes_project ON sandboxes(project_id, id);
CREATE INDEX sandboxes_state ON sandboxes(state);
DROP TABLE snapshots;
ALTER TABLE snapshots_v3 RENAME TO snapshots;
CREATE INDEX snapshots_project ON snapshots(project_id, id);
)sql");
}

}  // namespace

std::string idempotency_not_kept(int status, uint64_t bytes, const IdempotencyLimits& limits) {
  auto size = [](uint64_t n) {
    return n % (1 << 20) == 0 ? std::to_string(n >> 20) + " MiB"
           : n % 1024 == 0    ? std::to_string(n >> 10) + " KiB"
                              : std::to_string(n) + " bytes";
  };
  const std::string why = bytes > limits.max_reply_bytes
                              ? "answers over " + size(limits.max_reply_bytes) + " are not kept"
                              : "the project's kept answers (markers like this one included) reached their " +
                                    size(limits.max_bytes);
  return nlohmann::json{{"error",
                         {{"code", "idempotency_key_conflict"},
                          {"message", "the request with this Idempotency-Key ran once and was answered HTTP " +
                                          std::to_string(status) + " with " + std::to_string(bytes) + " bytes; " + why +
                                          " (docs/api.md, Idempotency-Key), so it cannot be replayed: read what it "
                                          "made with a GET, or send a new key to run it again"}}}}
      .dump();
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), md);
  return to_hex(std::string_view(reinterpret_cast<const char*>(md), sizeof md));
}

Result<std::string_view> presented_api_key(std::string_view auth, std::string_view x_api_key) {
  std::string_view key;
  if (!auth.empty()) {
    constexpr std::string_view kBearer = "bearer ";
    bool bearer = auth.size() >= kBearer.size();
    for (size_t i = 0; bearer && i < kBearer.size(); ++i)
      bearer = static_cast<char>(std::tolower(static_cast<unsigned char>(auth[i]))) == kBearer[i];
    if (!bearer) return fail(ErrorCode::kUnauthorized, "the Authorization header must be \"Bearer <API key>\"");
    key = auth.substr(kBearer.size());
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  } else if (!x_api_key.empty()) {
    key = x_api_key;
  } else {
    return fail(ErrorCode::kUnauthorized, "missing Authorization header; send \"Authorization: Bearer b3os_sk_...\"");
  }
  if ((key.rfind("b3os_sk_", 0) != 0 && key.rfind("e2b_", 0) != 0) || key.size() > 200)
    return fail(ErrorCode::kUnauthorized, "malformed API key; keys look like b3os_sk_... (or e2b_... from keys create --e2b)");
  return key;
}

std::string new_api_key(bool e2b) { return e2b ? "e2b_" + to_hex(random_bytes(20)) : "b3os_sk_" + random_base32(40); }

Result<std::unique_ptr<Store>> Store::open(const std::string& path) { return SqliteStore::open(path); }

Result<std::unique_ptr<Store>> SqliteStore::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return fail(ErrorCode::kInternal, "store: opening " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<SqliteStore> s(new SqliteStore(db));
  if (auto r = s->migrate(); !r) return fail(r.error());
  return std::unique_ptr<Store>(std::move(s));
}

SqliteStore::~SqliteStore() { sqlite3_close(db_); }

Result<void> SqliteStore::exec(const char* sql) { return exec_sql(db_, sql); }

namespace {
Result<int> user_version(sqlite3* db) {
  Stmt st(db, "PRAGMA user_version");
  if (st.step() != SQLITE_ROW) return fail(db_error(db, "reading the schema version"));
  return static_cast<int>(st.i64(0));
}
}  // namespace

int Store::latest_schema_version() { return std::end(kMigrations)[-1].version; }

Result<void> SqliteStore::migrate() {
  // Journal mode and foreign keys cannot change inside a transaction: set them first.
  if (auto r = exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"); !r) return r;
  auto at = user_version(db_);
  if (!at) return fail(at.error());
  if (*at > latest_schema_version())
    return fail(ErrorCode::kInternal, "store: the database is at schema version " + std::to_string(*at) +
                                          ", newer than this build knows (" + std::to_string(latest_schema_version()) +
                                          "); run the b3os that wrote it, or a newer one");
  for (const Migration& m : kMigrations) {
    if (m.version <= *at) continue;
    // IMMEDIATE takes the write lock first; the version is read again under it, since another
    // process (b3osd and the CLI share the file) may have run this step meanwhile.
    if (auto r = exec("BEGIN IMMEDIATE"); !r) return r;
    auto now = user_version(db_);
    if (now && *now >= m.version) {
      if (auto r = exec("COMMIT"); !r) return r;
      continue;
    }
    Result<void> step = now ? m.apply(db_) : fail(now.error());
    if (step) step = exec(("PRAGMA user_version = " + std::to_string(m.version)).c_str());
    if (step) step = exec("COMMIT");
    if (!step) {
      (void)exec("ROLLBACK");
      Error e = step.error();
      return fail(e.wrap("migrating the schema to version " + std::to_string(m.version) + " (" + m.what + ")"));
    }
  }
  return {};
}

Result<NewApiKey> SqliteStore::create_api_key(const std::string& project_name, bool e2b) {
  std::lock_guard lk(mu_);
  NewApiKey out;
  const int64_t now = now_unix_ms();
  {
    Stmt st(db_, "SELECT id FROM projects WHERE name = ?");
    st.bind(1, project_name);
    if (st.step() == SQLITE_ROW) out.record.project_id = st.text(0);
  }
  if (out.record.project_id.empty()) {
    out.record.project_id = new_id("prj");
    Stmt st(db_, "INSERT INTO projects(id, name, created_at_ms) VALUES (?, ?, ?)");
    st.bind(1, out.record.project_id).bind(2, project_name).bind(3, now);
    if (st.step() != SQLITE_DONE) return fail(db_error(db_, "creating project"));
  }
  out.key = new_api_key(e2b);
  out.record.id = new_id("key");
  out.record.project_name = project_name;
  out.record.prefix = out.key.substr(0, 14);
  out.record.created_at_ms = now;
  Stmt st(db_, "INSERT INTO api_keys(id, project_id, key_sha256, prefix, created_at_ms) VALUES (?, ?, ?, ?, ?)");
  st.bind(1, out.record.id).bind(2, out.record.project_id).bind(3, sha256_hex(out.key)).bind(4, out.record.prefix).bind(5, now);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "creating key"));
  return out;
}

Result<std::optional<ApiKeyRecord>> SqliteStore::find_api_key(std::string_view plain_key) {
  std::lock_guard lk(mu_);
  Stmt st(db_,
          "SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0) FROM api_keys k "
          "JOIN projects p ON p.id = k.project_id WHERE k.key_sha256 = ? AND k.revoked_at_ms IS NULL");
  st.bind(1, sha256_hex(plain_key));
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<ApiKeyRecord>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "looking up key"));
  return ApiKeyRecord{st.text(0), st.text(1), st.text(2), st.text(3), st.i64(4), st.i64(5), 0};
}

Result<void> SqliteStore::touch_api_key(const std::string& key_id, int64_t now_ms) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "UPDATE api_keys SET last_used_at_ms = ? WHERE id = ?");
  st.bind(1, now_ms).bind(2, key_id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "noting the use of key " + key_id));
  return {};
}

Result<bool> SqliteStore::revoke_api_key(const std::string& key_id, int64_t now_ms) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "UPDATE api_keys SET revoked_at_ms = ? WHERE id = ? AND revoked_at_ms IS NULL");
  st.bind(1, now_ms).bind(2, key_id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "revoking key " + key_id));
  return sqlite3_changes(db_) == 1;
}

Result<void> SqliteStore::put_port_token(const PortTokenRecord& rec, int64_t now_ms) {
  std::lock_guard lk(mu_);
  {
    Stmt del(db_, "DELETE FROM port_tokens WHERE expires_ms <= ?");
    del.bind(1, now_ms);
    if (del.step() != SQLITE_DONE) return fail(db_error(db_, "forgetting expired port tokens"));
  }
  Stmt st(db_, "INSERT INTO port_tokens (token_sha256, sandbox_id, port, created_ms, expires_ms) VALUES (?, ?, ?, ?, ?)");
  st.bind(1, rec.token_sha256).bind(2, rec.sandbox_id).bind(3, int64_t{rec.port}).bind(4, rec.created_ms).bind(5, rec.expires_ms);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving a port token"));
  return {};
}

Result<std::optional<PortTokenRecord>> SqliteStore::find_port_token(const std::string& token_sha256) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT token_sha256, sandbox_id, port, created_ms, expires_ms FROM port_tokens WHERE token_sha256 = ?");
  st.bind(1, token_sha256);
  const int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<PortTokenRecord>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "looking up a port token"));
  return PortTokenRecord{st.text(0), st.text(1), static_cast<int>(st.i64(2)), st.i64(3), st.i64(4)};
}

Result<void> SqliteStore::delete_port_tokens(const std::string& sandbox_id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "DELETE FROM port_tokens WHERE sandbox_id = ?");
  st.bind(1, sandbox_id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "forgetting the port tokens of " + sandbox_id));
  return {};
}

Result<std::vector<ApiKeyRecord>> SqliteStore::list_api_keys(bool include_revoked) {
  std::lock_guard lk(mu_);
  Stmt st(db_, include_revoked
                   ? "SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0), "
                     "COALESCE(k.revoked_at_ms, 0) FROM api_keys k JOIN projects p ON p.id = k.project_id ORDER BY k.id"
                   : "SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0), "
                     "0 FROM api_keys k JOIN projects p ON p.id = k.project_id WHERE k.revoked_at_ms IS NULL ORDER BY k.id");
  std::vector<ApiKeyRecord> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW)
    out.push_back({st.text(0), st.text(1), st.text(2), st.text(3), st.i64(4), st.i64(5), st.i64(6)});
  if (rc != SQLITE_DONE) return fail(db_error(db_, "listing keys"));
  return out;
}

Result<void> SqliteStore::transaction(const std::function<Result<void>()>& body) {
  if (auto r = exec("BEGIN IMMEDIATE"); !r) return r;
  auto r = body();
  if (r) r = exec("COMMIT");
  if (!r) (void)exec("ROLLBACK");  // never leave the connection inside a transaction
  return r;
}

Result<void> SqliteStore::save_sandbox(const SandboxRecord& rec) {
  static const std::string sql = std::string("INSERT OR REPLACE INTO sandboxes(") + kSandboxColumns + ") VALUES (" +
                                 placeholders(kSandboxColumns) + ")";
  Stmt st(db_, sql.c_str());
  bind_sandbox(st, rec);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving sandbox " + rec.id));
  return {};
}

Result<void> SqliteStore::put_sandbox(const SandboxRecord& rec) {
  std::lock_guard lk(mu_);
  return save_sandbox(rec);
}

Result<void> SqliteStore::put_sandboxes(const std::vector<SandboxRecord>& recs) {
  std::lock_guard lk(mu_);
  return transaction([&]() -> Result<void> {
    for (const auto& rec : recs)
      if (auto r = save_sandbox(rec); !r) return r;
    return {};
  });
}

Result<std::optional<SandboxRecord>> SqliteStore::get_sandbox(const std::string& project_id, const std::string& id) {
  static const std::string sql =
      std::string("SELECT ") + kSandboxColumns + " FROM sandboxes WHERE id = ? AND project_id = ?";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  st.bind(1, id).bind(2, project_id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<SandboxRecord>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "reading sandbox"));
  auto r = sandbox_from(st);
  if (!r) return fail(r.error());
  return std::optional<SandboxRecord>(std::move(*r));
}

Result<std::vector<SandboxRecord>> SqliteStore::list_sandboxes(const SandboxQuery& q) {
  std::string sql = std::string("SELECT ") + kSandboxColumns +
                    " FROM sandboxes WHERE project_id = ?1 AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR id < ?3)";
  for (size_t i = 0; i < q.metadata.size(); ++i) {
    const int k = static_cast<int>(4 + 2 * i);
    sql += " AND json_extract(metadata, '$.' || json_quote(?" + std::to_string(k) + ")) = ?" + std::to_string(k + 1);
  }
  sql += " ORDER BY id DESC LIMIT " + std::to_string(q.limit + 1);
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  if (!st.ok()) return fail(db_error(db_, "listing sandboxes"));
  st.bind(1, q.project_id);
  if (q.status) st.bind(2, *q.status); else st.bind_null(2);
  if (q.after_id) st.bind(3, *q.after_id); else st.bind_null(3);
  for (size_t i = 0; i < q.metadata.size(); ++i) {
    st.bind(static_cast<int>(4 + 2 * i), q.metadata[i].first);
    st.bind(static_cast<int>(5 + 2 * i), q.metadata[i].second);
  }
  return all_of<SandboxRecord>(db_, st, "listing sandboxes", sandbox_from<Stmt>);
}

Result<std::vector<SandboxRecord>> SqliteStore::active_sandboxes() {
  static const std::string sql =
      std::string("SELECT ") + kSandboxColumns + " FROM sandboxes WHERE state IN ('running', 'paused')";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  return all_of<SandboxRecord>(db_, st, "listing active sandboxes", sandbox_from<Stmt>);
}

namespace {
// A statement both stores run, with Postgres's $N made SQLite's ?N (SQLite numbers $N in order
// of appearance, not by N).
std::string numbered(std::string_view sql) {
  std::string out(sql);
  for (size_t i = 0; i + 1 < out.size(); ++i)
    if (out[i] == '$' && std::isdigit(static_cast<unsigned char>(out[i + 1]))) out[i] = '?';
  return out;
}
}  // namespace

Result<int64_t> SqliteStore::forget_ended_before(int64_t ended_before_ms, int most) {
  std::lock_guard lk(mu_);
  static const std::string sql = numbered(codec::kForgetEndedBeforeSql);
  Stmt st(db_, sql.c_str());
  st.bind(1, ended_before_ms).bind(2, static_cast<int64_t>(most));
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "forgetting ended sandboxes"));
  return static_cast<int64_t>(sqlite3_changes(db_));
}

Result<int64_t> SqliteStore::forget_ended_past(const std::string& project_id, int keep, int most) {
  std::lock_guard lk(mu_);
  static const std::string sql = numbered(codec::kForgetEndedPastSql);
  Stmt st(db_, sql.c_str());
  st.bind(1, project_id).bind(2, static_cast<int64_t>(keep)).bind(3, static_cast<int64_t>(most));
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "forgetting ended sandboxes"));
  return static_cast<int64_t>(sqlite3_changes(db_));
}

Result<std::vector<std::string>> SqliteStore::ended_projects() {
  std::lock_guard lk(mu_);
  Stmt st(db_, codec::kEndedProjectsSql);
  std::vector<std::string> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(st.text(0));
  if (rc != SQLITE_DONE) return fail(db_error(db_, "listing projects with ended sandboxes"));
  return out;
}

Result<void> SqliteStore::put_snapshot(const SnapshotRecord& rec) {
  static const std::string sql = std::string("INSERT OR REPLACE INTO snapshots(") + kSnapshotColumns + ") VALUES (" +
                                 placeholders(kSnapshotColumns) + ")";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  bind_snapshot(st, rec);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving snapshot " + rec.id));
  return {};
}

Result<std::optional<SnapshotRecord>> SqliteStore::get_snapshot(const std::string& project_id, const std::string& id) {
  static const std::string sql =
      std::string("SELECT ") + kSnapshotColumns + " FROM snapshots WHERE id = ? AND project_id = ?";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  st.bind(1, id).bind(2, project_id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<SnapshotRecord>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "reading snapshot"));
  auto r = snapshot_from(st);
  if (!r) return fail(r.error());
  return std::optional<SnapshotRecord>(std::move(*r));
}

Result<std::vector<SnapshotRecord>> SqliteStore::list_snapshots(const std::string& project_id,
                                                          const std::optional<std::string>& after_id, int limit) {
  std::string sql = std::string("SELECT ") + kSnapshotColumns +
                    " FROM snapshots WHERE project_id = ?1 AND (?2 IS NULL OR id < ?2) ORDER BY id DESC LIMIT " +
                    std::to_string(limit + 1);
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  st.bind(1, project_id);
  if (after_id) st.bind(2, *after_id); else st.bind_null(2);
  return all_of<SnapshotRecord>(db_, st, "listing snapshots", snapshot_from<Stmt>);
}

Result<void> SqliteStore::delete_snapshot(const std::string& project_id, const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "DELETE FROM snapshots WHERE id = ? AND project_id = ?");
  st.bind(1, id).bind(2, project_id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "deleting snapshot"));
  return {};
}

Result<SnapshotUsage> SqliteStore::snapshot_usage(const std::string& project_id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE project_id = ?");
  st.bind(1, project_id);
  if (st.step() != SQLITE_ROW) return fail(db_error(db_, "counting snapshots"));
  return SnapshotUsage{st.i64(0), static_cast<uint64_t>(st.i64(1))};
}

Result<std::vector<std::string>> SqliteStore::snapshot_ids() {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT id FROM snapshots");
  std::vector<std::string> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(st.text(0));
  if (rc != SQLITE_DONE) return fail(db_error(db_, "listing snapshots"));
  return out;
}

// ---- template builds ----

Result<void> SqliteStore::put_template_build(const TemplateBuildRecord& r) {
  static const std::string sql = std::string("INSERT OR REPLACE INTO template_builds(") + kBuildColumns +
                                 ") VALUES (" + placeholders(kBuildColumns) + ")";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  st.bind(1, r.id).bind(2, r.template_id).bind(3, r.project_id).bind(4, r.name).bind(5, int64_t{r.version});
  st.bind(6, r.status).bind(7, r.content_hash).bind(8, r.artifact).bind(9, r.created_ms).bind(10, r.started_ms);
  st.bind(11, r.finished_ms);
  if (r.deleted_ms) st.bind(12, *r.deleted_ms); else st.bind_null(12);
  st.bind(13, r.doc.dump());
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving template build " + r.id));
  return {};
}

Result<std::optional<TemplateBuildRecord>> SqliteStore::get_template_build(const std::string& id) {
  static const std::string sql = std::string("SELECT ") + kBuildColumns + " FROM template_builds WHERE id = ?";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  st.bind(1, id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<TemplateBuildRecord>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "reading template build"));
  auto r = build_from(st);
  if (!r) return fail(r.error());
  return std::optional<TemplateBuildRecord>(std::move(*r));
}

Result<std::vector<TemplateBuildRecord>> SqliteStore::template_builds() {
  static const std::string sql =
      std::string("SELECT ") + kBuildColumns + " FROM template_builds ORDER BY created_ms, id";
  std::lock_guard lk(mu_);
  Stmt st(db_, sql.c_str());
  return all_of<TemplateBuildRecord>(db_, st, "listing template builds", build_from<Stmt>);
}

Result<void> SqliteStore::delete_template(const std::string& template_id, int64_t now_ms) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "UPDATE template_builds SET deleted_ms = ? WHERE template_id = ? AND deleted_ms IS NULL");
  st.bind(1, now_ms).bind(2, template_id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "deleting template " + template_id));
  return {};
}

Result<void> SqliteStore::forget_template_build(const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "DELETE FROM template_builds WHERE id = ?");
  st.bind(1, id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "forgetting template build " + id));
  return {};
}

Result<std::vector<std::string>> SqliteStore::snapshot_rootfs() {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT DISTINCT rootfs FROM snapshots");
  std::vector<std::string> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) out.push_back(st.text(0));
  if (rc != SQLITE_DONE) return fail(db_error(db_, "listing the roots of snapshots"));
  return out;
}

Result<IdempotencyHit> SqliteStore::idempotency_begin(const std::string& project_id, const std::string& key,
                                                const std::string& api_key_id, const std::string& method,
                                                const std::string& path, const std::string& body_hash) {
  std::lock_guard lk(mu_);
  const int64_t now = now_unix_ms();
  {
    Stmt del(db_, "DELETE FROM idempotency WHERE created_at_ms < ?");
    del.bind(1, now - kIdempotencyTtlMs);
    del.step();
  }
  Stmt st(db_,
          "SELECT api_key_id, method, path, body_sha256, status, content_type, body FROM idempotency "
          "WHERE project_id = ? AND key = ?");
  st.bind(1, project_id).bind(2, key);
  int rc = st.step();
  IdempotencyHit hit;
  if (rc == SQLITE_ROW) {
    hit.kind = IdempotencyHit::Kind::kConflict;
    if (st.text(0) != api_key_id) {
      hit.reason = "this Idempotency-Key was used by another API key of the project";
    } else if (st.text(1) != method || st.text(2) != path || st.text(3) != body_hash) {
      hit.reason = "this Idempotency-Key was used for a different request (method, path or body)";
    } else if (st.is_null(4)) {
      hit.reason = "a request with this Idempotency-Key is still in progress";
    } else {
      hit.kind = IdempotencyHit::Kind::kReplay;
      hit.status = static_cast<int>(st.i64(4));
      hit.content_type = st.text(5);
      hit.body = st.blob(6);
    }
    return hit;
  }
  if (rc != SQLITE_DONE) return fail(db_error(db_, "reading idempotency key"));
  {
    Stmt n(db_, "SELECT count(*) FROM idempotency WHERE project_id = ?");
    n.bind(1, project_id);
    if (n.step() != SQLITE_ROW) return fail(db_error(db_, "counting idempotency keys"));
    if (n.i64(0) >= idempotency_limits_.max_records) {
      hit.kind = IdempotencyHit::Kind::kFull;
      return hit;
    }
  }
  Stmt ins(db_,
           "INSERT INTO idempotency(project_id, key, api_key_id, method, path, body_sha256, created_at_ms) "
           "VALUES (?, ?, ?, ?, ?, ?, ?)");
  ins.bind(1, project_id).bind(2, key).bind(3, api_key_id).bind(4, method).bind(5, path).bind(6, body_hash).bind(7, now);
  if (ins.step() != SQLITE_DONE) return fail(db_error(db_, "claiming idempotency key"));
  return hit;
}

Result<void> SqliteStore::idempotency_finish(const std::string& project_id, const std::string& key, int status,
                                       const std::string& content_type, const std::string& body) {
  std::lock_guard lk(mu_);
  const IdempotencyLimits& lim = idempotency_limits_;
  bool keep = body.size() <= lim.max_reply_bytes;
  if (keep) {
    Stmt n(db_, "SELECT coalesce(sum(length(body)), 0) FROM idempotency WHERE project_id = ?");
    n.bind(1, project_id);
    if (n.step() != SQLITE_ROW) return fail(db_error(db_, "measuring kept idempotent responses"));
    keep = static_cast<uint64_t>(n.i64(0)) + body.size() <= lim.max_bytes;
  }
  Stmt st(db_, "UPDATE idempotency SET status = ?, content_type = ?, body = ? WHERE project_id = ? AND key = ?");
  st.bind(1, static_cast<int64_t>(keep ? status : 409)).bind(2, keep ? content_type : "application/json");
  st.bind(4, project_id).bind(5, key);
  st.bind(3, keep ? body : idempotency_not_kept(status, body.size(), lim));
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "storing idempotent response"));
  return {};
}

Result<void> SqliteStore::idempotency_clear_pending() {
  std::lock_guard lk(mu_);
  return exec("DELETE FROM idempotency WHERE status IS NULL");
}

Result<void> SqliteStore::idempotency_abort(const std::string& project_id, const std::string& key) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "DELETE FROM idempotency WHERE project_id = ? AND key = ? AND status IS NULL");
  st.bind(1, project_id).bind(2, key);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "releasing idempotency key"));
  return {};
}

// ---- model spend: budgets, the ledger, project settings ----

Result<void> SqliteStore::ensure_budget(const std::string& id, const std::string& project_id, std::optional<Micros> cap) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "INSERT OR IGNORE INTO budgets(id, project_id, cap_micros, spent_micros, created_at_ms) VALUES (?, ?, ?, 0, ?)");
  st.bind(1, id).bind(2, project_id);
  if (cap) st.bind(3, *cap); else st.bind_null(3);
  st.bind(4, now_unix_ms());
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving budget " + id));
  return {};
}

Result<void> SqliteStore::set_budget_cap(const std::string& id, const std::string& project_id, std::optional<Micros> cap) {
  if (auto r = ensure_budget(id, project_id, cap); !r) return r;
  std::lock_guard lk(mu_);
  Stmt st(db_, "UPDATE budgets SET cap_micros = ? WHERE id = ?");
  if (cap) st.bind(1, *cap); else st.bind_null(1);
  st.bind(2, id);
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "setting the cap of budget " + id));
  return {};
}

Result<std::optional<BudgetRow>> SqliteStore::get_budget(const std::string& id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT id, project_id, cap_micros, spent_micros FROM budgets WHERE id = ?");
  st.bind(1, id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return std::optional<BudgetRow>();
  if (rc != SQLITE_ROW) return fail(db_error(db_, "reading budget " + id));
  BudgetRow b;
  b.id = st.text(0);
  b.project_id = st.text(1);
  if (!st.is_null(2)) b.cap_micros = st.i64(2);
  b.spent_micros = st.i64(3);
  return std::optional<BudgetRow>(std::move(b));
}

Result<void> SqliteStore::record_call(const LedgerRow& row) {
  std::lock_guard lk(mu_);
  return transaction([&]() -> Result<void> {
    Stmt ins(db_,
             "INSERT INTO ledger(budget_id, project_id, sandbox_id, key_id, model, prompt_tokens, completion_tokens, "
             "cost_micros, reserved_micros, duration_ms, status, outcome, created_at_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)");
    ins.bind(1, row.budget_id).bind(2, row.project_id);
    if (row.sandbox_id.empty()) ins.bind_null(3); else ins.bind(3, row.sandbox_id);
    if (row.key_id.empty()) ins.bind_null(4); else ins.bind(4, row.key_id);
    ins.bind(5, row.model).bind(6, row.prompt_tokens).bind(7, row.completion_tokens).bind(8, row.cost_micros);
    ins.bind(9, row.reserved_micros).bind(10, row.duration_ms).bind(11, int64_t{row.status}).bind(12, row.outcome);
    ins.bind(13, now_unix_ms());
    Stmt up(db_, "UPDATE budgets SET spent_micros = spent_micros + ? WHERE id = ?");
    up.bind(1, row.cost_micros).bind(2, row.budget_id);
    if (ins.step() != SQLITE_DONE || up.step() != SQLITE_DONE) return fail(db_error(db_, "writing the ledger"));
    return {};
  });
}

Result<std::vector<LedgerRow>> SqliteStore::ledger(const std::string& budget_id, int limit) {
  std::lock_guard lk(mu_);
  Stmt st(db_,
          "SELECT budget_id, project_id, ifnull(sandbox_id, ''), ifnull(key_id, ''), model, prompt_tokens, "
          "completion_tokens, cost_micros, reserved_micros, duration_ms, status, outcome FROM ledger WHERE budget_id = ? "
          "ORDER BY id DESC LIMIT ?");
  st.bind(1, budget_id).bind(2, int64_t{limit});
  std::vector<LedgerRow> out;
  int rc;
  while ((rc = st.step()) == SQLITE_ROW) {
    LedgerRow r;
    r.budget_id = st.text(0);
    r.project_id = st.text(1);
    r.sandbox_id = st.text(2);
    r.key_id = st.text(3);
    r.model = st.text(4);
    r.prompt_tokens = st.i64(5);
    r.completion_tokens = st.i64(6);
    r.cost_micros = st.i64(7);
    r.reserved_micros = st.i64(8);
    r.duration_ms = st.f64(9);
    r.status = static_cast<int>(st.i64(10));
    r.outcome = st.text(11);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return fail(db_error(db_, "reading the ledger"));
  return out;
}

Result<bool> SqliteStore::project_allows_infer(const std::string& project_id) {
  std::lock_guard lk(mu_);
  Stmt st(db_, "SELECT infer FROM project_settings WHERE project_id = ?");
  st.bind(1, project_id);
  int rc = st.step();
  if (rc == SQLITE_DONE) return true;  // the default: a node's models serve its projects
  if (rc != SQLITE_ROW) return fail(db_error(db_, "reading project settings"));
  return st.i64(0) != 0;
}

Result<void> SqliteStore::set_project_infer(const std::string& project_name, bool allowed) {
  std::lock_guard lk(mu_);
  Stmt find(db_, "SELECT id FROM projects WHERE name = ?");
  find.bind(1, project_name);
  if (find.step() != SQLITE_ROW) return fail(ErrorCode::kNotFound, "no project named \"" + project_name + "\"");
  std::string id = find.text(0);
  Stmt st(db_, "INSERT INTO project_settings(project_id, infer) VALUES (?, ?) ON CONFLICT(project_id) DO UPDATE SET infer = excluded.infer");
  st.bind(1, id).bind(2, int64_t{allowed ? 1 : 0});
  if (st.step() != SQLITE_DONE) return fail(db_error(db_, "saving project settings"));
  return {};
}

}  // namespace b3os::store
