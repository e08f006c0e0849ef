#include "daemon/store/pg_store.h"

#include <libpq-fe.h>
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <unordered_map>

#include "common/clock.h"
#include "common/ids.h"
#include "daemon/store/row_codec.h"

namespace b3os::store {

using namespace codec;

namespace {
constexpr int64_t kIdempotencyTtlMs = 24LL * 3600 * 1000;
constexpr auto kPoolWait = std::chrono::seconds(5);
// Any 64-bit number: the advisory lock held while one process migrates the schema.
constexpr int64_t kMigrationLock = 0x6233'6f73'0001;
}  // namespace

namespace pg {

/// Positional parameters ($1...), as text (NULL when unset): the Binder of row_codec.h.
class Params {
 public:
  Params& bind(int i, std::string_view s) {
    at(i) = std::string(s);
    return *this;
  }
  Params& bind(int i, int64_t v) {
    at(i) = std::to_string(v);
    return *this;
  }
  Params& bind(int i, double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    at(i) = buf;
    return *this;
  }
  Params& bind_null(int i) {
    at(i).reset();
    return *this;
  }
  const std::vector<std::optional<std::string>>& values() const { return v_; }

 private:
  std::optional<std::string>& at(int i) {
    if (static_cast<int>(v_.size()) < i) v_.resize(static_cast<size_t>(i));
    return v_[static_cast<size_t>(i - 1)];
  }
  std::vector<std::optional<std::string>> v_;
};

/// A result, freed with it.
class Res {
 public:
  explicit Res(PGresult* r) : r_(r) {}
  Res(Res&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  Res& operator=(Res&&) = delete;
  ~Res() { PQclear(r_); }
  PGresult* get() const { return r_; }
  int rows() const { return PQntuples(r_); }
  /// Rows an UPDATE, INSERT or DELETE touched.
  int64_t affected() const { return std::atoll(PQcmdTuples(r_)); }
  std::string text(int row, int col) const {
    return std::string(PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col)));
  }
  bool is_null(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
  int64_t i64(int row, int col) const { return is_null(row, col) ? 0 : std::atoll(PQgetvalue(r_, row, col)); }
  double f64(int row, int col) const { return is_null(row, col) ? 0 : std::atof(PQgetvalue(r_, row, col)); }

 private:
  PGresult* r_;
};

/// One row of a result: the Row of row_codec.h.
struct Row {
  const Res& res;
  int row;
  std::string text(int c) const { return res.text(row, c); }
  int64_t i64(int c) const { return res.i64(row, c); }
  double f64(int c) const { return res.f64(row, c); }
  bool is_null(int c) const { return res.is_null(row, c); }
};

class Conn {
 public:
  static Result<std::unique_ptr<Conn>> connect(const std::string& url) {
    PGconn* c = PQconnectdb(url.c_str());
    if (c == nullptr) return fail(ErrorCode::kNodeUnavailable, "store: connecting to postgres: out of memory");
    auto conn = std::unique_ptr<Conn>(new Conn(c));
    // Notices ("... already exists, skipping") are the server talking to a person; b3os
    // reports what matters through errors.
    PQsetNoticeProcessor(c, [](void*, const char*) {}, nullptr);
    if (PQstatus(c) != CONNECTION_OK)
      return fail(ErrorCode::kNodeUnavailable, std::string("store: connecting to postgres: ") + trimmed(PQerrorMessage(c)));
    return conn;
  }
  ~Conn() { PQfinish(c_); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool ok() const { return PQstatus(c_) == CONNECTION_OK; }
  /// Whether an idle connection still stands. Nothing b3os does asks the server to speak
  /// unprompted (no LISTEN), so anything that arrived while it sat idle is the server leaving:
  /// a FATAL message ("terminating connection due to administrator command") and the close of
  /// a restart. Such a connection is dropped rather than handed to a request that would fail
  /// on it (a parameter the server reports after a reload costs one reconnect, no more).
  bool alive() const {
    if (PQstatus(c_) != CONNECTION_OK) return false;
    pollfd p{PQsocket(c_), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }

  /// Runs `sql` (prepared on this connection the first time) with `p`.
  Result<Res> run(const std::string& sql, const Params& p, std::string_view what) {
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
      std::string name = "s" + std::to_string(prepared_.size());
      Res r(PQprepare(c_, name.c_str(), sql.c_str(), 0, nullptr));
      if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) return fail(error(r, what));
      it = prepared_.emplace(sql, std::move(name)).first;
    }
    std::vector<const char*> values;
    values.reserve(p.values().size());
    for (const auto& v : p.values()) values.push_back(v ? v->c_str() : nullptr);
    Res r(PQexecPrepared(c_, it->second.c_str(), static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0));
    const auto st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(error(r, what));
    return r;
  }
  Result<Res> run(const std::string& sql, std::string_view what) { return run(sql, Params{}, what); }

  /// Statements without parameters, several at once (a migration, BEGIN, COMMIT).
  Result<void> exec(const char* sql, std::string_view what) {
    Res r(PQexec(c_, sql));
    const auto st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(error(r, what));
    return {};
  }

 private:
  explicit Conn(PGconn* c) : c_(c) {}
  static std::string trimmed(const char* s) {
    std::string m = s ? s : "";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
  }
  Error error(const Res& r, std::string_view what) const {
    const std::string msg = trimmed(PQresultErrorMessage(r.get())).empty() ? trimmed(PQerrorMessage(c_))
                                                                          : trimmed(PQresultErrorMessage(r.get()));
    const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
    const std::string sqlstate = state ? state : "";
    // A lost connection, a server shutting down or a conflict between transactions passes:
    // 503 node_unavailable (with Retry-After), and the pool drops a broken connection.
    if (!ok() || sqlstate.rfind("08", 0) == 0 || sqlstate == "57P01" || sqlstate == "57P02" || sqlstate == "57P03" ||
        sqlstate == "40001" || sqlstate == "40P01")
      return Error{ErrorCode::kNodeUnavailable, "store: " + std::string(what) + ": " + msg + "; retry shortly", 0};
    return Error{ErrorCode::kInternal, "store: " + std::string(what) + ": " + msg, 0};
  }

  PGconn* c_;
  std::unordered_map<std::string, std::string> prepared_;  // SQL -> statement name
};

}  // namespace pg

namespace {

using pg::Conn;
using pg::Params;
using pg::Res;
using pg::Row;

/// "$1, $2, ..." for each column of a list.
std::string pg_placeholders(const char* columns) {
  std::string out = "$1";
  int n = 1;
  for (const char* c = columns; *c; ++c)
    if (*c == ',') out += ", $" + std::to_string(++n);
  return out;
}

/// "col = EXCLUDED.col, ..." for every column but the first (the key).
std::string pg_updates(const char* columns) {
  std::string out, col;
  bool first = true;
  auto flush = [&] {
    size_t a = col.find_first_not_of(' '), b = col.find_last_not_of(' ');
    if (a != std::string::npos) {
      std::string c = col.substr(a, b - a + 1);
      if (!first) {
        if (!out.empty()) out += ", ";
        out += c + " = EXCLUDED." + c;
      }
      first = false;
    }
    col.clear();
  };
  for (const char* c = columns; *c; ++c) {
    if (*c == ',') flush();
    else col += *c;
  }
  flush();
  return out;
}

std::string upsert_sql(const char* table, const char* columns) {
  return std::string("INSERT INTO ") + table + "(" + columns + ") VALUES (" + pg_placeholders(columns) +
         ") ON CONFLICT (id) DO UPDATE SET " + pg_updates(columns);
}

int column_count(const char* columns) {
  int n = 1;
  for (const char* c = columns; *c; ++c) n += *c == ',';
  return n;
}

/// The record's columns and its node's, which the node saving it fills in ($N+1).
std::string with_node(const char* columns) { return std::string(columns) + ", node_id"; }

/// The store's clock in Unix milliseconds: every node's heartbeat and every silence is
/// measured on it, so the machines' clocks need not agree.
constexpr const char* kDbNowMs = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

/// A record read with with_node(): its columns, then its node.
Result<SandboxRecord> sandbox_with_node(Row& row) {
  static const int node_col = column_count(kSandboxColumns);
  auto rec = sandbox_from(row);
  if (rec) rec->node_id = row.text(node_col);
  return rec;
}
/// A snapshot's columns, its node's and its object root's (the cluster's alone).
const std::string& snapshot_columns() {
  static const std::string cols = with_node(kSnapshotColumns) + ", object_root";
  return cols;
}
Result<SnapshotRecord> snapshot_with_node(Row& row) {
  static const int node_col = column_count(kSnapshotColumns);
  auto rec = snapshot_from(row);
  if (rec) {
    rec->node_id = row.text(node_col);
    rec->object_root = row.text(node_col + 1);
  }
  return rec;
}

Result<TemplateBuildRecord> build_with_node(Row& row) {
  static const int node_col = column_count(kBuildColumns);
  auto rec = build_from(row);
  if (rec) rec->node_id = row.text(node_col);
  return rec;
}

template <typename Record, typename From>
Result<std::vector<Record>> all_rows(const Res& r, From from) {
  std::vector<Record> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    Row row{r, i};
    auto rec = from(row);
    if (!rec) return fail(rec.error());
    out.push_back(std::move(*rec));
  }
  return out;
}

std::string bytea_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string bytea_from(const std::string& text) {
  size_t n = 0;
  unsigned char* p = PQunescapeBytea(reinterpret_cast<const unsigned char*>(text.c_str()), &n);
  if (p == nullptr) return {};
  std::string out(reinterpret_cast<const char*>(p), n);
  PQfreemem(p);
  return out;
}

// ---- schema ----

struct Migration {
  int version;
  const char* what;
  const char* sql;
};

// Version 1 is the SQLite store's version 6 in Postgres types (the SQLite history before it
// was a single node's, and a cluster starts from here).
constexpr Migration kMigrations[] = {
    {1, "the schema of b3os 0.3 (SQLite version 6)", R"sql(
CREATE TABLE projects (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  created_at_ms BIGINT NOT NULL
);
CREATE TABLE api_keys (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL REFERENCES projects(id),
  key_sha256 TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL,
  revoked_at_ms BIGINT,
  last_used_at_ms BIGINT
);
CREATE TABLE sandboxes (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  state TEXT NOT NULL,
  template TEXT NOT NULL,
  snapshot_id TEXT,
  vcpu BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  disk_gib BIGINT NOT NULL,
  timeout_s BIGINT NOT NULL,
  on_idle TEXT NOT NULL,
  env TEXT NOT NULL,
  secrets TEXT NOT NULL,
  metadata TEXT NOT NULL,
  ports TEXT NOT NULL,
  api_scopes TEXT NOT NULL,
  spend_cap_micros BIGINT,
  egress_mode TEXT NOT NULL,
  egress_allow TEXT NOT NULL,
  forkable BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  started_ms BIGINT NOT NULL,
  paused_since_ms BIGINT,
  paused_total_ms BIGINT NOT NULL,
  stopped_ms BIGINT,
  stop_reason TEXT,
  stop_message TEXT NOT NULL,
  last_activity_ms BIGINT NOT NULL,
  hostname TEXT NOT NULL,
  rootfs TEXT NOT NULL,
  budget_id TEXT NOT NULL,
  forked_from TEXT NOT NULL,
  template_id TEXT NOT NULL DEFAULT '',
  node_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX sandboxes_project ON sandboxes(project_id, id);
CREATE INDEX sandboxes_node ON sandboxes(node_id, state);
CREATE TABLE snapshots (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  sandbox_id TEXT NOT NULL,
  template TEXT NOT NULL,
  vcpu BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  disk_gib BIGINT NOT NULL,
  env TEXT NOT NULL,
  secrets TEXT NOT NULL,
  api_scopes TEXT NOT NULL,
  spend_cap_micros BIGINT,
  egress_mode TEXT NOT NULL,
  egress_allow TEXT NOT NULL,
  forkable BIGINT NOT NULL,
  size_bytes BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  rootfs TEXT NOT NULL,
  budget_id TEXT NOT NULL,
  template_id TEXT NOT NULL DEFAULT '',
  node_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX snapshots_project ON snapshots(project_id, id);
CREATE INDEX snapshots_node ON snapshots(node_id);
CREATE TABLE idempotency (
  project_id TEXT NOT NULL,
  key TEXT NOT NULL,
  api_key_id TEXT NOT NULL,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  body_sha256 TEXT NOT NULL,
  status BIGINT,
  content_type TEXT,
  body BYTEA,
  created_at_ms BIGINT NOT NULL,
  owner TEXT NOT NULL,
  PRIMARY KEY (project_id, key)
);
CREATE TABLE budgets (
  id TEXT PRIMARY KEY,
  project_id TEXT NOT NULL,
  cap_micros BIGINT,
  spent_micros BIGINT NOT NULL DEFAULT 0,
  reserved_micros BIGINT NOT NULL DEFAULT 0,
  created_at_ms BIGINT NOT NULL
);
CREATE TABLE budget_holds (
  id TEXT PRIMARY KEY,
  budget_id TEXT NOT NULL REFERENCES budgets(id),
  node TEXT NOT NULL,
  amount_micros BIGINT NOT NULL,
  created_at_ms BIGINT NOT NULL
);
CREATE INDEX budget_holds_node ON budget_holds(node);
CREATE TABLE nodes (
  id TEXT PRIMARY KEY,
  url TEXT NOT NULL,
  state TEXT NOT NULL,
  started_ms BIGINT NOT NULL,
  heartbeat_ms BIGINT NOT NULL,
  max_sandboxes BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  vcpu BIGINT NOT NULL,
  sandboxes BIGINT NOT NULL DEFAULT 0,
  used_memory_mib BIGINT NOT NULL DEFAULT 0,
  used_vcpu BIGINT NOT NULL DEFAULT 0,
  warm TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE ledger (
  id BIGSERIAL PRIMARY KEY,
  budget_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  sandbox_id TEXT,
  key_id TEXT,
  model TEXT NOT NULL,
  prompt_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL,
  cost_micros BIGINT NOT NULL,
  reserved_micros BIGINT NOT NULL,
  duration_ms DOUBLE PRECISION NOT NULL,
  status BIGINT NOT NULL,
  outcome TEXT NOT NULL,
  created_at_ms BIGINT NOT NULL
);
CREATE INDEX ledger_budget ON ledger(budget_id, id);
CREATE TABLE project_settings (
  project_id TEXT PRIMARY KEY,
  infer BIGINT NOT NULL DEFAULT 1
);
CREATE TABLE port_tokens (
  token_sha256 TEXT PRIMARY KEY,
  sandbox_id TEXT NOT NULL,
  port BIGINT NOT NULL,
  created_ms BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL
);
CREATE INDEX port_tokens_sandbox ON port_tokens(sandbox_id);
CREATE INDEX port_tokens_expiry ON port_tokens(expires_ms);
CREATE TABLE template_builds (
  id TEXT PRIMARY KEY,
  template_id TEXT NOT NULL,
  project_id TEXT NOT NULL,
  name TEXT NOT NULL,
  version BIGINT NOT NULL,
  status TEXT NOT NULL,
  content_hash TEXT NOT NULL,
  artifact TEXT NOT NULL,
  created_ms BIGINT NOT NULL,
  started_ms BIGINT NOT NULL,
  finished_ms BIGINT NOT NULL,
  deleted_ms BIGINT,
  doc TEXT NOT NULL,
  node_id TEXT NOT NULL DEFAULT ''
);
CREATE INDEX template_builds_template ON template_builds(template_id, version);
)sql"},
    {2, "project_starts: sandboxes starting per project and node (the project's limit across nodes)", R"sql(
CREATE TABLE project_starts (
  project_id TEXT NOT NULL,
  node_id TEXT NOT NULL,
  starting BIGINT NOT NULL,
  PRIMARY KEY (project_id, node_id)
);
)sql"},
    {3, "object_roots: roots in the object store that records share, and when a node last needed each", R"sql(
ALTER TABLE snapshots ADD COLUMN object_root TEXT NOT NULL DEFAULT '';
CREATE INDEX snapshots_object_root ON snapshots(object_root);
CREATE TABLE object_roots (
  key TEXT PRIMARY KEY,
  touched_ms BIGINT NOT NULL
);
CREATE INDEX object_roots_touched ON object_roots(touched_ms);
)sql"},
    {4, "ledger.hold_id: a call's settle is written once however often it is tried", R"sql(
ALTER TABLE ledger ADD COLUMN hold_id TEXT UNIQUE;
)sql"},
    {5, "sandboxes.open_ports: every port served without a token (E2B's public traffic)", R"sql(
ALTER TABLE sandboxes ADD COLUMN open_ports BIGINT NOT NULL DEFAULT 0;
)sql"},
    {6, "indexes of the ended sandboxes (the periodic forgetting of ended records reads them)", R"sql(
CREATE INDEX sandboxes_ended_at ON sandboxes(state, stopped_ms);
CREATE INDEX sandboxes_ended ON sandboxes(project_id, state, stopped_ms);
)sql"},
    {7, "an index of the idempotency records by age (each keyed request forgets the expired ones)", R"sql(
CREATE INDEX idempotency_created ON idempotency(created_at_ms);
)sql"}
};

}  // namespace

int PgStore::latest_schema_version() { return std::end(kMigrations)[-1].version; }

Result<std::unique_ptr<Store>> PgStore::open(const std::string& url, int pool_size, std::string node) {
  if (pool_size < 1) return fail(ErrorCode::kInvalidRequest, "store: the pool needs at least one connection");
  auto s = std::unique_ptr<PgStore>(new PgStore(url, pool_size, std::move(node)));
  if (auto r = s->migrate(); !r) return fail(r.error());
  return std::unique_ptr<Store>(std::move(s));
}

PgStore::PgStore(std::string url, int pool_size, std::string node)
    : url_(std::move(url)), pool_size_(pool_size), node_(std::move(node)) {}

PgStore::~PgStore() = default;

Result<void> PgStore::with_conn(const std::function<Result<void>(Conn&)>& body) {
  std::unique_ptr<Conn> c;
  {
    std::unique_lock lk(mu_);
    if (!idle_cv_.wait_for(lk, kPoolWait, [&] { return !idle_.empty() || open_ < pool_size_; }))
      return fail(ErrorCode::kNodeUnavailable, "store: every postgres connection of the pool stayed busy for 5 s; retry shortly");
    while (!c && !idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
      if (!c->alive()) {  // closed by a restart of the server: dropped, another tried
        c.reset();
        --open_;
      }
    }
    if (!c) ++open_;
  }
  if (!c) {
    auto made = Conn::connect(url_);
    if (!made) {
      std::lock_guard lk(mu_);
      --open_;
      idle_cv_.notify_one();
      return fail(made.error());
    }
    c = std::move(*made);
  }
  auto r = body(*c);
  {
    std::lock_guard lk(mu_);
    if (c->ok()) idle_.push_back(std::move(c));
    else --open_;  // a broken connection is dropped; the next caller opens a new one
  }
  idle_cv_.notify_one();
  return r;
}

Result<void> PgStore::transaction(const std::function<Result<void>(Conn&)>& body) {
  return with_conn([&](Conn& c) -> Result<void> {
    if (auto r = c.exec("BEGIN", "beginning a transaction"); !r) return r;
    auto r = body(c);
    if (r) r = c.exec("COMMIT", "committing");
    if (!r) (void)c.exec("ROLLBACK", "rolling back");
    return r;
  });
}

Result<void> PgStore::migrate() {
  return transaction([&](Conn& c) -> Result<void> {
    // Nodes starting together: one migrates, the others wait here and find it done.
    if (auto r = c.run("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLock) + ")", "locking the schema"); !r)
      return fail(r.error());
    if (auto r = c.exec("CREATE TABLE IF NOT EXISTS b3os_schema (version BIGINT NOT NULL)", "creating b3os_schema"); !r)
      return r;
    auto v = c.run("SELECT COALESCE(MAX(version), 0) FROM b3os_schema", "reading the schema version");
    if (!v) return fail(v.error());
    const int64_t have = v->i64(0, 0);
    if (have > latest_schema_version())
      return fail(ErrorCode::kInternal, "store: the database's schema is version " + std::to_string(have) +
                                            ", newer than this build's " + std::to_string(latest_schema_version()) +
                                            ": run a newer b3os");
    for (const auto& m : kMigrations) {
      if (m.version <= have) continue;
      if (auto r = c.exec(m.sql, std::string("migrating the schema to version ") + std::to_string(m.version) + " (" +
                                     m.what + ")");
          !r)
        return r;
    }
    if (have < latest_schema_version()) {
      if (auto r = c.exec("DELETE FROM b3os_schema", "writing the schema version"); !r) return r;
      Params p;
      p.bind(1, int64_t{latest_schema_version()});
      if (auto r = c.run("INSERT INTO b3os_schema(version) VALUES ($1)", p, "writing the schema version"); !r)
        return fail(r.error());
    }
    return {};
  });
}

// ---- keys and projects ----

Result<NewApiKey> PgStore::create_api_key(const std::string& project_name, bool e2b) {
  NewApiKey out;
  auto r = transaction([&](Conn& c) -> Result<void> {
    const int64_t now = now_unix_ms();
    Params p;
    p.bind(1, new_id("prj")).bind(2, project_name).bind(3, now);
    // Two routers creating the first key of a project at once: one row, both keys in it.
    auto pr = c.run("INSERT INTO projects(id, name, created_at_ms) VALUES ($1, $2, $3) "
                    "ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
                    p, "creating project");
    if (!pr) return fail(pr.error());
    out.record.project_id = pr->text(0, 0);
    out.key = new_api_key(e2b);
    out.record.id = new_id("key");
    out.record.project_name = project_name;
    out.record.prefix = out.key.substr(0, 14);
    out.record.created_at_ms = now;
    Params k;
    k.bind(1, out.record.id).bind(2, out.record.project_id).bind(3, sha256_hex(out.key)).bind(4, out.record.prefix);
    k.bind(5, now);
    auto kr = c.run("INSERT INTO api_keys(id, project_id, key_sha256, prefix, created_at_ms) VALUES ($1, $2, $3, $4, $5)",
                    k, "creating key");
    if (!kr) return fail(kr.error());
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::optional<ApiKeyRecord>> PgStore::find_api_key(std::string_view plain_key) {
  std::optional<ApiKeyRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, sha256_hex(plain_key));
    auto res = c.run("SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0) "
                     "FROM api_keys k JOIN projects p ON p.id = k.project_id "
                     "WHERE k.key_sha256 = $1 AND k.revoked_at_ms IS NULL",
                     p, "looking up key");
    if (!res) return fail(res.error());
    if (res->rows() > 0)
      out = ApiKeyRecord{res->text(0, 0), res->text(0, 1), res->text(0, 2), res->text(0, 3),
                         res->i64(0, 4),  res->i64(0, 5),  0};
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<ApiKeyRecord>> PgStore::list_api_keys(bool include_revoked) {
  std::vector<ApiKeyRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto res = c.run(include_revoked
                         ? "SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0), "
                           "COALESCE(k.revoked_at_ms, 0) FROM api_keys k JOIN projects p ON p.id = k.project_id ORDER BY k.id"
                         : "SELECT k.id, k.project_id, p.name, k.prefix, k.created_at_ms, COALESCE(k.last_used_at_ms, 0), 0 "
                           "FROM api_keys k JOIN projects p ON p.id = k.project_id WHERE k.revoked_at_ms IS NULL ORDER BY k.id",
                     "listing keys");
    if (!res) return fail(res.error());
    for (int i = 0; i < res->rows(); ++i)
      out.push_back({res->text(i, 0), res->text(i, 1), res->text(i, 2), res->text(i, 3), res->i64(i, 4), res->i64(i, 5),
                     res->i64(i, 6)});
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::touch_api_key(const std::string& key_id, int64_t now_ms) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, now_ms).bind(2, key_id);
    auto res = c.run("UPDATE api_keys SET last_used_at_ms = $1 WHERE id = $2", p, "noting the use of key " + key_id);
    if (!res) return fail(res.error());
    return {};
  });
}

Result<bool> PgStore::revoke_api_key(const std::string& key_id, int64_t now_ms) {
  bool revoked = false;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, now_ms).bind(2, key_id);
    auto res = c.run("UPDATE api_keys SET revoked_at_ms = $1 WHERE id = $2 AND revoked_at_ms IS NULL", p,
                     "revoking key " + key_id);
    if (!res) return fail(res.error());
    revoked = res->affected() == 1;
    return {};
  });
  if (!r) return fail(r.error());
  return revoked;
}

// ---- preview tokens ----

Result<void> PgStore::put_port_token(const PortTokenRecord& rec, int64_t now_ms) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params d;
    d.bind(1, now_ms);
    if (auto r = c.run("DELETE FROM port_tokens WHERE expires_ms <= $1", d, "forgetting expired port tokens"); !r)
      return fail(r.error());
    Params p;
    p.bind(1, rec.token_sha256).bind(2, rec.sandbox_id).bind(3, int64_t{rec.port}).bind(4, rec.created_ms);
    p.bind(5, rec.expires_ms);
    if (auto r = c.run("INSERT INTO port_tokens (token_sha256, sandbox_id, port, created_ms, expires_ms) "
                       "VALUES ($1, $2, $3, $4, $5)",
                       p, "saving a port token");
        !r)
      return fail(r.error());
    return {};
  });
}

Result<std::optional<PortTokenRecord>> PgStore::find_port_token(const std::string& token_sha256) {
  std::optional<PortTokenRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, token_sha256);
    auto res = c.run("SELECT token_sha256, sandbox_id, port, created_ms, expires_ms FROM port_tokens WHERE token_sha256 = $1",
                     p, "looking up a port token");
    if (!res) return fail(res.error());
    if (res->rows() > 0)
      out = PortTokenRecord{res->text(0, 0), res->text(0, 1), static_cast<int>(res->i64(0, 2)), res->i64(0, 3),
                            res->i64(0, 4)};
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::delete_port_tokens(const std::string& sandbox_id) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, sandbox_id);
    if (auto r = c.run("DELETE FROM port_tokens WHERE sandbox_id = $1", p, "forgetting the port tokens of " + sandbox_id);
        !r)
      return fail(r.error());
    return {};
  });
}

// ---- sandboxes and snapshots ----

Result<void> PgStore::put_sandbox(const SandboxRecord& rec) { return put_sandboxes({rec}); }

Result<void> PgStore::put_sandboxes(const std::vector<SandboxRecord>& recs) {
  // An ended record is final: a node marked down (its sandboxes failed by another) that
  // still runs cannot bring one back by saving it.
  static const std::string sql = upsert_sql("sandboxes", with_node(kSandboxColumns).c_str()) +
                                 " WHERE sandboxes.state NOT IN ('stopped', 'failed')";
  static const int node_col = column_count(kSandboxColumns) + 1;
  auto save = [&](Conn& c) -> Result<void> {
    for (const auto& rec : recs) {
      Params p;
      bind_sandbox(p, rec);
      p.bind(node_col, node_);
      if (auto r = c.run(sql, p, "saving sandbox " + rec.id); !r) return fail(r.error());
    }
    return {};
  };
  if (recs.size() == 1) return with_conn(save);
  return transaction(save);
}

Result<std::optional<SandboxRecord>> PgStore::get_sandbox(const std::string& project_id, const std::string& id) {
  static const std::string sql =
      "SELECT " + with_node(kSandboxColumns) + " FROM sandboxes WHERE id = $1 AND project_id = $2";
  std::optional<SandboxRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, project_id);
    auto res = c.run(sql, p, "reading sandbox");
    if (!res) return fail(res.error());
    if (res->rows() == 0) return {};
    Row row{*res, 0};
    auto rec = sandbox_with_node(row);
    if (!rec) return fail(rec.error());
    out = std::move(*rec);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<SandboxRecord>> PgStore::list_sandboxes(const SandboxQuery& q) {
  std::string sql = "SELECT " + with_node(kSandboxColumns) +
                    " FROM sandboxes WHERE project_id = $1 AND ($2::text IS NULL OR state = $2) AND "
                    "($3::text IS NULL OR id < $3)";
  Params p;
  p.bind(1, q.project_id);
  if (q.status) p.bind(2, *q.status); else p.bind_null(2);
  if (q.after_id) p.bind(3, *q.after_id); else p.bind_null(3);
  for (size_t i = 0; i < q.metadata.size(); ++i) {
    const int k = static_cast<int>(4 + 2 * i);
    sql += " AND (metadata::jsonb ->> $" + std::to_string(k) + "::text) = $" + std::to_string(k + 1);
    p.bind(k, q.metadata[i].first).bind(k + 1, q.metadata[i].second);
  }
  sql += " ORDER BY id DESC LIMIT " + std::to_string(q.limit + 1);
  std::vector<SandboxRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto res = c.run(sql, p, "listing sandboxes");
    if (!res) return fail(res.error());
    auto rows = all_rows<SandboxRecord>(*res, [](Row& row) { return sandbox_with_node(row); });
    if (!rows) return fail(rows.error());
    out = std::move(*rows);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<SandboxRecord>> PgStore::active_sandboxes() {
  // This node's only: the others' are theirs to reattach.
  static const std::string sql = "SELECT " + with_node(kSandboxColumns) +
                                 " FROM sandboxes WHERE node_id = $1 AND state IN ('running', 'paused')";
  std::vector<SandboxRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, node_);
    auto res = c.run(sql, p, "listing active sandboxes");
    if (!res) return fail(res.error());
    auto rows = all_rows<SandboxRecord>(*res, [](Row& row) { return sandbox_with_node(row); });
    if (!rows) return fail(rows.error());
    out = std::move(*rows);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

// Every node's: an ended record is no node's to keep (any node may forget it; twice is harmless).
Result<int64_t> PgStore::forget_ended_before(int64_t ended_before_ms, int most) {
  int64_t forgotten = 0;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, ended_before_ms).bind(2, static_cast<int64_t>(most));
    auto res = c.run(codec::kForgetEndedBeforeSql, p, "forgetting ended sandboxes");
    if (!res) return fail(res.error());
    forgotten = res->affected();
    return {};
  });
  if (!r) return fail(r.error());
  return forgotten;
}

Result<int64_t> PgStore::forget_ended_past(const std::string& project_id, int keep, int most) {
  int64_t forgotten = 0;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id).bind(2, static_cast<int64_t>(keep)).bind(3, static_cast<int64_t>(most));
    auto res = c.run(codec::kForgetEndedPastSql, p, "forgetting ended sandboxes");
    if (!res) return fail(res.error());
    forgotten = res->affected();
    return {};
  });
  if (!r) return fail(r.error());
  return forgotten;
}

Result<std::vector<std::string>> PgStore::ended_projects() {
  std::vector<std::string> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto res = c.run(codec::kEndedProjectsSql, Params{}, "listing projects with ended sandboxes");
    if (!res) return fail(res.error());
    for (int i = 0; i < res->rows(); ++i) out.push_back(res->text(i, 0));
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::put_snapshot(const SnapshotRecord& rec) {
  static const std::string sql = upsert_sql("snapshots", snapshot_columns().c_str());
  static const int node_col = column_count(kSnapshotColumns) + 1;
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    bind_snapshot(p, rec);
    p.bind(node_col, node_).bind(node_col + 1, rec.object_root);
    if (auto r = c.run(sql, p, "saving snapshot " + rec.id); !r) return fail(r.error());
    return {};
  });
}

Result<std::optional<SnapshotRecord>> PgStore::get_snapshot(const std::string& project_id, const std::string& id) {
  static const std::string sql =
      "SELECT " + snapshot_columns() + " FROM snapshots WHERE id = $1 AND project_id = $2";
  std::optional<SnapshotRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, project_id);
    auto res = c.run(sql, p, "reading snapshot");
    if (!res) return fail(res.error());
    if (res->rows() == 0) return {};
    Row row{*res, 0};
    auto rec = snapshot_with_node(row);
    if (!rec) return fail(rec.error());
    out = std::move(*rec);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<SnapshotRecord>> PgStore::list_snapshots(const std::string& project_id,
                                                            const std::optional<std::string>& after_id, int limit) {
  const std::string sql = "SELECT " + snapshot_columns() +
                          " FROM snapshots WHERE project_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT " +
                          std::to_string(limit + 1);
  std::vector<SnapshotRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id);
    if (after_id) p.bind(2, *after_id); else p.bind_null(2);
    auto res = c.run(sql, p, "listing snapshots");
    if (!res) return fail(res.error());
    auto rows = all_rows<SnapshotRecord>(*res, [](Row& row) { return snapshot_with_node(row); });
    if (!rows) return fail(rows.error());
    out = std::move(*rows);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::delete_snapshot(const std::string& project_id, const std::string& id) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, project_id);
    if (auto r = c.run("DELETE FROM snapshots WHERE id = $1 AND project_id = $2", p, "deleting snapshot"); !r)
      return fail(r.error());
    return {};
  });
}

namespace {
Result<std::vector<std::string>> column_of(Conn& c, const char* sql, const std::string& node, std::string_view what) {
  Params p;
  p.bind(1, node);
  auto res = c.run(sql, p, what);
  if (!res) return fail(res.error());
  std::vector<std::string> out;
  for (int i = 0; i < res->rows(); ++i) out.push_back(res->text(i, 0));
  return out;
}
}  // namespace

Result<SnapshotUsage> PgStore::snapshot_usage(const std::string& project_id) {
  SnapshotUsage out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id);
    // Every node's snapshots of the project: the quota is the project's, not a node's.
    auto res = c.run("SELECT COUNT(*)::bigint, COALESCE(SUM(size_bytes), 0)::bigint FROM snapshots WHERE project_id = $1",
                     p, "counting snapshots");
    if (!res) return fail(res.error());
    out.count = res->i64(0, 0);
    out.bytes = static_cast<uint64_t>(res->i64(0, 1));
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<std::string>> PgStore::snapshot_ids() {
  std::vector<std::string> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto ids = column_of(c, "SELECT id FROM snapshots WHERE node_id = $1", node_, "listing snapshots");
    if (!ids) return fail(ids.error());
    out = std::move(*ids);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<std::string>> PgStore::snapshot_rootfs() {
  std::vector<std::string> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto ids = column_of(c, "SELECT DISTINCT rootfs FROM snapshots WHERE node_id = $1", node_, "listing the roots of snapshots");
    if (!ids) return fail(ids.error());
    out = std::move(*ids);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

// ---- template builds ----

Result<void> PgStore::put_template_build(const TemplateBuildRecord& b) {
  static const std::string sql = upsert_sql("template_builds", with_node(kBuildColumns).c_str());
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, b.id).bind(2, b.template_id).bind(3, b.project_id).bind(4, b.name).bind(5, int64_t{b.version});
    p.bind(6, b.status).bind(7, b.content_hash).bind(8, b.artifact).bind(9, b.created_ms).bind(10, b.started_ms);
    p.bind(11, b.finished_ms);
    if (b.deleted_ms) p.bind(12, *b.deleted_ms); else p.bind_null(12);
    // The row names the node that runs the build, not the last one to save it (another node
    // marks a template deleted, or fails the builds of a node that is down).
    p.bind(13, b.doc.dump()).bind(14, b.node_id.empty() ? node_ : b.node_id);
    if (auto r = c.run(sql, p, "saving template build " + b.id); !r) return fail(r.error());
    return {};
  });
}

Result<std::optional<TemplateBuildRecord>> PgStore::get_template_build(const std::string& id) {
  static const std::string sql = "SELECT " + with_node(kBuildColumns) + " FROM template_builds WHERE id = $1";
  std::optional<TemplateBuildRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id);
    auto res = c.run(sql, p, "reading template build");
    if (!res) return fail(res.error());
    if (res->rows() == 0) return {};
    Row row{*res, 0};
    auto rec = build_with_node(row);
    if (!rec) return fail(rec.error());
    out = std::move(*rec);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<std::vector<TemplateBuildRecord>> PgStore::template_builds() {
  // Every node's builds, each naming its node: templates are the cluster's (docs/cluster.md).
  static const std::string sql = "SELECT " + with_node(kBuildColumns) + " FROM template_builds ORDER BY created_ms, id";
  std::vector<TemplateBuildRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto res = c.run(sql, "listing template builds");
    if (!res) return fail(res.error());
    auto rows = all_rows<TemplateBuildRecord>(*res, [](Row& row) { return build_with_node(row); });
    if (!rows) return fail(rows.error());
    out = std::move(*rows);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::delete_template(const std::string& template_id, int64_t now_ms) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, now_ms).bind(2, template_id);
    if (auto r = c.run("UPDATE template_builds SET deleted_ms = $1 WHERE template_id = $2 AND deleted_ms IS NULL", p,
                       "deleting template " + template_id);
        !r)
      return fail(r.error());
    return {};
  });
}

Result<void> PgStore::forget_template_build(const std::string& id) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id);
    if (auto r = c.run("DELETE FROM template_builds WHERE id = $1", p, "forgetting template build " + id); !r)
      return fail(r.error());
    return {};
  });
}

// ---- idempotency ----

Result<IdempotencyHit> PgStore::idempotency_begin(const std::string& project_id, const std::string& key,
                                                  const std::string& api_key_id, const std::string& method,
                                                  const std::string& path, const std::string& body_hash) {
  IdempotencyHit hit;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    const int64_t now = now_unix_ms();
    Params d;
    d.bind(1, now - kIdempotencyTtlMs);
    if (auto e = c.run("DELETE FROM idempotency WHERE created_at_ms < $1", d, "forgetting old idempotency keys"); !e)
      return fail(e.error());
    // A project holding its most live keys claims no new one (a key it holds still replays).
    Params k;
    k.bind(1, project_id).bind(2, key);
    auto held = c.run("SELECT count(*), bool_or(key = $2) FROM idempotency WHERE project_id = $1", k,
                      "counting idempotency keys");
    if (!held) return fail(held.error());
    if (held->i64(0, 0) >= idempotency_limits_.max_records && held->text(0, 1) != "t") {
      hit.kind = IdempotencyHit::Kind::kFull;
      return {};
    }
    // The claim is one INSERT: of two routers racing the same key, exactly one inserts.
    Params p;
    p.bind(1, project_id).bind(2, key).bind(3, api_key_id).bind(4, method).bind(5, path).bind(6, body_hash).bind(7, now);
    p.bind(8, node_);
    auto ins = c.run("INSERT INTO idempotency(project_id, key, api_key_id, method, path, body_sha256, created_at_ms, "
                     "owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (project_id, key) DO NOTHING",
                     p, "claiming idempotency key");
    if (!ins) return fail(ins.error());
    if (ins->affected() == 1) return {};  // kNew
    Params q;
    q.bind(1, project_id).bind(2, key);
    auto res = c.run("SELECT api_key_id, method, path, body_sha256, status, content_type, body FROM idempotency "
                     "WHERE project_id = $1 AND key = $2",
                     q, "reading idempotency key");
    if (!res) return fail(res.error());
    hit.kind = IdempotencyHit::Kind::kConflict;
    if (res->rows() == 0) {
      hit.reason = "a request with this Idempotency-Key is still in progress";
    } else if (res->text(0, 0) != api_key_id) {
      hit.reason = "this Idempotency-Key was used by another API key of the project";
    } else if (res->text(0, 1) != method || res->text(0, 2) != path || res->text(0, 3) != body_hash) {
      hit.reason = "this Idempotency-Key was used for a different request (method, path or body)";
    } else if (res->is_null(0, 4)) {
      hit.reason = "a request with this Idempotency-Key is still in progress";
    } else {
      hit.kind = IdempotencyHit::Kind::kReplay;
      hit.status = static_cast<int>(res->i64(0, 4));
      hit.content_type = res->text(0, 5);
      hit.body = bytea_from(res->text(0, 6));
    }
    return {};
  });
  if (!r) return fail(r.error());
  return hit;
}

Result<void> PgStore::idempotency_finish(const std::string& project_id, const std::string& key, int status,
                                         const std::string& content_type, const std::string& body) {
  return with_conn([&](Conn& c) -> Result<void> {
    const IdempotencyLimits& lim = idempotency_limits_;
    bool keep = body.size() <= lim.max_reply_bytes;
    if (keep) {
      Params k;
      k.bind(1, project_id);
      auto n = c.run("SELECT coalesce(sum(octet_length(body)), 0) FROM idempotency WHERE project_id = $1", k,
                     "measuring kept idempotent responses");
      if (!n) return fail(n.error());
      keep = static_cast<uint64_t>(n->i64(0, 0)) + body.size() <= lim.max_bytes;
    }
    Params p;
    p.bind(1, int64_t{keep ? status : 409}).bind(2, keep ? content_type : std::string("application/json"));
    p.bind(3, bytea_hex(keep ? body : idempotency_not_kept(status, body.size(), lim))).bind(4, project_id).bind(5, key);
    if (auto r = c.run("UPDATE idempotency SET status = $1, content_type = $2, body = $3::bytea "
                       "WHERE project_id = $4 AND key = $5",
                       p, "storing idempotent response");
        !r)
      return fail(r.error());
    return {};
  });
}

Result<void> PgStore::idempotency_clear_pending() {
  // Called at this node's start: its claims died with its previous process. Other nodes'
  // claims may be requests in flight, and stay.
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, node_);
    if (auto r = c.run("DELETE FROM idempotency WHERE status IS NULL AND owner = $1", p,
                       "releasing this node's abandoned idempotency claims");
        !r)
      return fail(r.error());
    return {};
  });
}

Result<void> PgStore::idempotency_abort(const std::string& project_id, const std::string& key) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id).bind(2, key);
    if (auto r = c.run("DELETE FROM idempotency WHERE project_id = $1 AND key = $2 AND status IS NULL", p,
                       "releasing idempotency key");
        !r)
      return fail(r.error());
    return {};
  });
}

// ---- model spend ----

Result<void> PgStore::ensure_budget(const std::string& id, const std::string& project_id, std::optional<Micros> cap) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, project_id);
    if (cap) p.bind(3, *cap); else p.bind_null(3);
    p.bind(4, now_unix_ms());
    if (auto r = c.run("INSERT INTO budgets(id, project_id, cap_micros, spent_micros, created_at_ms) "
                       "VALUES ($1, $2, $3, 0, $4) ON CONFLICT (id) DO NOTHING",
                       p, "saving budget " + id);
        !r)
      return fail(r.error());
    return {};
  });
}

Result<void> PgStore::set_budget_cap(const std::string& id, const std::string& project_id, std::optional<Micros> cap) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, project_id);
    if (cap) p.bind(3, *cap); else p.bind_null(3);
    p.bind(4, now_unix_ms());
    if (auto r = c.run("INSERT INTO budgets(id, project_id, cap_micros, spent_micros, created_at_ms) "
                       "VALUES ($1, $2, $3, 0, $4) ON CONFLICT (id) DO UPDATE SET cap_micros = EXCLUDED.cap_micros",
                       p, "setting the cap of budget " + id);
        !r)
      return fail(r.error());
    return {};
  });
}

namespace {
/// The first row of SELECT id, project_id, cap_micros, spent_micros, reserved_micros.
BudgetRow budget_row(const Res& res) {
  BudgetRow b;
  b.id = res.text(0, 0);
  b.project_id = res.text(0, 1);
  if (!res.is_null(0, 2)) b.cap_micros = res.i64(0, 2);
  b.spent_micros = res.i64(0, 3);
  b.reserved_micros = res.i64(0, 4);
  return b;
}

Result<std::optional<BudgetRow>> read_budget(Conn& c, const std::string& id) {
  Params p;
  p.bind(1, id);
  auto res = c.run("SELECT id, project_id, cap_micros, spent_micros, reserved_micros FROM budgets WHERE id = $1", p,
                   "reading budget " + id);
  if (!res) return fail(res.error());
  if (res->rows() == 0) return std::optional<BudgetRow>{};
  return std::optional<BudgetRow>{budget_row(*res)};
}
}  // namespace

Result<std::optional<BudgetRow>> PgStore::get_budget(const std::string& id) {
  std::optional<BudgetRow> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto row = read_budget(c, id);
    if (!row) return fail(row.error());
    out = std::move(*row);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

namespace {
/// Appends a call to the ledger and charges its cost to its budget, releasing `released` of
/// what its calls hold (inside the caller's transaction). With a hold id the row is written
/// only once per hold: false (nothing written, nothing charged) when it was already.
Result<bool> charge_call(Conn& c, const LedgerRow& row, const std::string& hold_id, Micros released) {
  Params p;
  p.bind(1, row.budget_id).bind(2, row.project_id);
  if (row.sandbox_id.empty()) p.bind_null(3); else p.bind(3, row.sandbox_id);
  if (row.key_id.empty()) p.bind_null(4); else p.bind(4, row.key_id);
  p.bind(5, row.model).bind(6, row.prompt_tokens).bind(7, row.completion_tokens).bind(8, row.cost_micros);
  p.bind(9, row.reserved_micros).bind(10, row.duration_ms).bind(11, int64_t{row.status}).bind(12, row.outcome);
  p.bind(13, now_unix_ms());
  if (hold_id.empty()) p.bind_null(14); else p.bind(14, hold_id);
  auto ins = c.run("INSERT INTO ledger(budget_id, project_id, sandbox_id, key_id, model, prompt_tokens, "
                   "completion_tokens, cost_micros, reserved_micros, duration_ms, status, outcome, created_at_ms, hold_id) "
                   "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) "
                   "ON CONFLICT (hold_id) DO NOTHING RETURNING id",
                   p, "writing the ledger");
  if (!ins) return fail(ins.error());
  if (ins->rows() == 0) return false;
  Params u;
  u.bind(1, row.cost_micros).bind(2, released).bind(3, row.budget_id);
  if (auto r = c.run("UPDATE budgets SET spent_micros = spent_micros + $1, reserved_micros = reserved_micros - $2 "
                     "WHERE id = $3",
                     u, "charging the budget");
      !r)
    return fail(r.error());
  return true;
}

/// Releases every budget hold of `node`. Each hold is deleted by exactly one statement (this
/// one or its call's settle), and only what this one deleted is given back.
Result<void> release_holds(Conn& c, const std::string& node) {
  Params p;
  p.bind(1, node);
  auto r = c.run("WITH gone AS (DELETE FROM budget_holds WHERE node = $1 RETURNING budget_id, amount_micros) "
                 "UPDATE budgets b SET reserved_micros = b.reserved_micros - g.total FROM "
                 "(SELECT budget_id, SUM(amount_micros) AS total FROM gone GROUP BY budget_id) g WHERE b.id = g.budget_id",
                 p, "releasing the budget holds of node " + node);
  if (!r) return fail(r.error());
  return {};
}

/// Forgets the starts `node` held against its projects' limits (it restarted, or is down).
Result<void> release_starts(Conn& c, const std::string& node) {
  Params p;
  p.bind(1, node);
  auto r = c.run("DELETE FROM project_starts WHERE node_id = $1", p, "releasing the starts of node " + node);
  if (!r) return fail(r.error());
  return {};
}

/// Fails the template builds `node` had not finished (it is down: they will not finish).
Result<void> fail_builds(Conn& c, const std::string& node, int64_t at_ms) {
  Params p;
  p.bind(1, node).bind(2, at_ms);
  const std::string err = nlohmann::json{{"error", {{"code", "node_unavailable"},
                                                    {"message", "its node " + node + " stopped answering; build it again"}}}}.dump();
  p.bind(3, err);
  if (auto r = c.run("UPDATE template_builds SET status = 'failed', finished_ms = $2, doc = (doc::jsonb || $3::jsonb)::text "
                     "WHERE node_id = $1 AND status IN ('queued', 'building')",
                     p, "failing the template builds of node " + node);
      !r)
    return fail(r.error());
  return {};
}

/// Releases the idempotency claims of `node` that have no response yet.
Result<void> release_claims(Conn& c, const std::string& node) {
  Params p;
  p.bind(1, node);
  if (auto r = c.run("DELETE FROM idempotency WHERE status IS NULL AND owner = $1", p,
                     "releasing the idempotency claims of node " + node);
      !r)
    return fail(r.error());
  return {};
}
}  // namespace

Result<void> PgStore::record_call(const LedgerRow& row) {
  return transaction([&](Conn& c) -> Result<void> {
    if (auto r = charge_call(c, row, "", 0); !r) return fail(r.error());
    return {};
  });
}

Result<BudgetHold> PgStore::reserve_budget(const std::string& budget_id, const std::string& hold_id, Micros amount) {
  BudgetHold out;
  auto r = transaction([&](Conn& c) -> Result<void> {
    // The rule in one statement: Postgres re-checks the WHERE on the row as the last racing
    // call left it, so calls from every node together never hold past the cap.
    Params p;
    p.bind(1, budget_id).bind(2, amount);
    auto held = c.run("UPDATE budgets SET reserved_micros = reserved_micros + $2 WHERE id = $1 AND "
                      "(cap_micros IS NULL OR spent_micros + reserved_micros + $2 <= cap_micros) "
                      "RETURNING id, project_id, cap_micros, spent_micros, reserved_micros",
                      p, "holding budget " + budget_id);
    if (!held) return fail(held.error());
    if (held->rows() == 0) {
      auto row = read_budget(c, budget_id);
      if (!row) return fail(row.error());
      if (!*row) return fail(ErrorCode::kInternal, "no budget " + budget_id);
      out = BudgetHold{false, std::move(**row)};
      return {};
    }
    out.held = true;
    out.budget = budget_row(*held);
    Params h;
    h.bind(1, hold_id).bind(2, budget_id).bind(3, node_).bind(4, amount).bind(5, now_unix_ms());
    if (auto ins = c.run("INSERT INTO budget_holds(id, budget_id, node, amount_micros, created_at_ms) "
                         "VALUES ($1, $2, $3, $4, $5)",
                         h, "saving budget hold " + hold_id);
        !ins)
      return fail(ins.error());
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::settle_budget(const std::string& hold_id, const LedgerRow& row) {
  return transaction([&](Conn& c) -> Result<void> {
    // Written once per hold: a settle tried again (its first try's answer was lost, or it
    // waited in a journal) finds its hold gone and its ledger row there, and changes nothing.
    Params p;
    p.bind(1, hold_id);
    auto gone = c.run("DELETE FROM budget_holds WHERE id = $1 RETURNING amount_micros", p, "ending budget hold " + hold_id);
    if (!gone) return fail(gone.error());
    // No hold row: released already (this node restarted or was marked down meanwhile); the
    // cost still counts.
    auto written = charge_call(c, row, hold_id, gone->rows() > 0 ? gone->i64(0, 0) : 0);
    if (!written) return fail(written.error());
    if (!*written && gone->rows() > 0)
      // Cannot be: a hold is deleted only with its ledger row or by a release. Undo the delete.
      return fail(ErrorCode::kInternal, "budget hold " + hold_id + " was held again after its settle");
    return {};
  });
}

// ---- nodes ----

Result<void> PgStore::register_node(const NodeRecord& n) {
  return transaction([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, n.id).bind(2, n.url).bind(3, n.max_sandboxes).bind(4, n.memory_mib).bind(5, n.vcpu);
    p.bind(6, nlohmann::json(n.warm).dump()).bind(7, n.sandboxes).bind(8, n.used_memory_mib).bind(9, n.used_vcpu);
    const std::string now = kDbNowMs;
    // A draining node that restarts stays draining: the operator's word outlives the process.
    if (auto r = c.run("INSERT INTO nodes(id, url, state, started_ms, heartbeat_ms, max_sandboxes, memory_mib, vcpu, "
                       "warm, sandboxes, used_memory_mib, used_vcpu) VALUES ($1, $2, 'ready', " + now + ", " + now +
                       ", $3, $4, $5, $6, $7, $8, $9) "
                       "ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, started_ms = EXCLUDED.started_ms, "
                       "heartbeat_ms = EXCLUDED.heartbeat_ms, max_sandboxes = EXCLUDED.max_sandboxes, "
                       "memory_mib = EXCLUDED.memory_mib, vcpu = EXCLUDED.vcpu, warm = EXCLUDED.warm, "
                       "sandboxes = EXCLUDED.sandboxes, used_memory_mib = EXCLUDED.used_memory_mib, "
                       "used_vcpu = EXCLUDED.used_vcpu, "
                       "state = CASE WHEN nodes.state = 'draining' THEN 'draining' ELSE 'ready' END",
                       p, "registering node " + n.id);
        !r)
      return fail(r.error());
    // What its previous process held died with it.
    if (auto r = release_holds(c, n.id); !r) return r;
    if (auto r = release_starts(c, n.id); !r) return r;
    return release_claims(c, n.id);
  });
}

Result<std::string> PgStore::heartbeat(const NodeRecord& n) {
  std::string state = "missing";
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, n.id).bind(2, n.sandboxes).bind(3, n.used_memory_mib).bind(4, n.used_vcpu);
    p.bind(5, nlohmann::json(n.warm).dump());
    // A node marked down stays down (its sandboxes are failed): it learns it here.
    auto res = c.run(std::string("UPDATE nodes SET heartbeat_ms = CASE WHEN state = 'down' THEN heartbeat_ms ELSE ") +
                         kDbNowMs + " END, sandboxes = $2, used_memory_mib = $3, used_vcpu = $4, warm = $5 "
                         "WHERE id = $1 RETURNING state",
                     p, "a heartbeat of node " + n.id);
    if (!res) return fail(res.error());
    if (res->rows() > 0) state = res->text(0, 0);
    return {};
  });
  if (!r) return fail(r.error());
  return state;
}

Result<std::vector<std::string>> PgStore::mark_silent_nodes_down(int64_t silence_ms) {
  std::vector<std::string> marked;
  auto r = transaction([&](Conn& c) -> Result<void> {
    marked.clear();
    Params p;
    p.bind(1, silence_ms);
    auto down = c.run(std::string("UPDATE nodes SET state = 'down' WHERE state <> 'down' AND heartbeat_ms < ") + kDbNowMs +
                          " - $1 RETURNING id, heartbeat_ms",
                      p, "marking silent nodes down");
    if (!down) return fail(down.error());
    for (int i = 0; i < down->rows(); ++i) {
      const std::string id = down->text(i, 0);
      const int64_t last = down->i64(i, 1);
      // Its sandboxes end as failed at its last heartbeat, the last moment known to have run
      // them: their usage is final there (a pause in progress ends there too).
      Params s;
      s.bind(1, id).bind(2, last).bind(3, "its node " + id + " stopped answering (no heartbeat for " +
                                               std::to_string(silence_ms / 1000) + " s)");
      if (auto f = c.run("UPDATE sandboxes SET state = 'failed', stop_reason = 'failed', stopped_ms = $2, "
                         "env = '{}', secrets = '{}', stop_message = $3, paused_total_ms = paused_total_ms + CASE WHEN paused_since_ms IS NULL "
                         "THEN 0 ELSE GREATEST(0, $2 - paused_since_ms) END, paused_since_ms = NULL "
                         "WHERE node_id = $1 AND state NOT IN ('stopped', 'failed')",
                         s, "failing the sandboxes of node " + id);
          !f)
        return fail(f.error());
      if (auto h = release_holds(c, id); !h) return h;
      if (auto st = release_starts(c, id); !st) return st;
      if (auto q = release_claims(c, id); !q) return q;
      if (auto b = fail_builds(c, id, last); !b) return b;
      marked.push_back(id);
    }
    return {};
  });
  if (!r) return fail(r.error());
  return marked;
}

Result<std::vector<NodeRecord>> PgStore::list_nodes() {
  std::vector<NodeRecord> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    auto res = c.run("SELECT id, url, state, started_ms, heartbeat_ms, max_sandboxes, memory_mib, vcpu, sandboxes, "
                     "used_memory_mib, used_vcpu, warm FROM nodes ORDER BY id",
                     "listing nodes");
    if (!res) return fail(res.error());
    for (int i = 0; i < res->rows(); ++i) {
      NodeRecord n;
      n.id = res->text(i, 0);
      n.url = res->text(i, 1);
      n.state = res->text(i, 2);
      n.started_ms = res->i64(i, 3);
      n.heartbeat_ms = res->i64(i, 4);
      n.max_sandboxes = res->i64(i, 5);
      n.memory_mib = res->i64(i, 6);
      n.vcpu = res->i64(i, 7);
      n.sandboxes = res->i64(i, 8);
      n.used_memory_mib = res->i64(i, 9);
      n.used_vcpu = res->i64(i, 10);
      (void)parse_into(res->text(i, 11), n.warm);
      out.push_back(std::move(n));
    }
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<SandboxStore::ProjectStarts> PgStore::hold_project_starts(const std::string& project_id, int n, int max) {
  ProjectStarts out;
  auto r = transaction([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id);
    // One node at a time per project: the count and the hold go together.
    if (auto l = c.run("SELECT pg_advisory_xact_lock(hashtext('b3os.project.' || $1))", p,
                       "locking the starts of project " + project_id);
        !l)
      return fail(l.error());
    auto res = c.run("SELECT (SELECT count(*) FROM sandboxes WHERE project_id = $1 AND state NOT IN ('stopped', 'failed')) "
                     "+ (SELECT COALESCE(SUM(starting), 0) FROM project_starts WHERE project_id = $1)",
                     p, "counting the sandboxes of project " + project_id);
    if (!res) return fail(res.error());
    out.used = res->i64(0, 0);
    out.held = out.used + n <= max;
    if (!out.held) return {};
    Params q;
    q.bind(1, project_id).bind(2, node_).bind(3, static_cast<int64_t>(n));
    auto ins = c.run("INSERT INTO project_starts (project_id, node_id, starting) VALUES ($1, $2, $3) "
                     "ON CONFLICT (project_id, node_id) DO UPDATE SET starting = project_starts.starting + EXCLUDED.starting",
                     q, "holding starts of project " + project_id);
    if (!ins) return fail(ins.error());
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> PgStore::release_project_starts(const std::string& project_id, int n) {
  return transaction([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id).bind(2, node_).bind(3, static_cast<int64_t>(n));
    auto res = c.run("UPDATE project_starts SET starting = starting - $3 WHERE project_id = $1 AND node_id = $2", p,
                     "releasing starts of project " + project_id);
    if (!res) return fail(res.error());
    Params q;
    q.bind(1, project_id).bind(2, node_);
    auto gone = c.run("DELETE FROM project_starts WHERE project_id = $1 AND node_id = $2 AND starting <= 0", q,
                      "forgetting the starts of project " + project_id);
    if (!gone) return fail(gone.error());
    return {};
  });
}

// ---- the object store's shared roots (docs/cluster.md, "The object store is collected") ----

namespace {
/// Takes the lock of one object root for the rest of the transaction.
Result<void> lock_object_root(Conn& c, const std::string& key) {
  Params p;
  p.bind(1, key);
  if (auto l = c.run("SELECT pg_advisory_xact_lock(hashtext('b3os.objroot.' || $1))", p, "locking object root " + key); !l)
    return fail(l.error());
  return {};
}
}  // namespace

Result<void> PgStore::touch_object_root(const std::string& key) {
  return transaction([&](Conn& c) -> Result<void> {
    if (auto l = lock_object_root(c, key); !l) return l;
    Params p;
    p.bind(1, key);
    auto res = c.run(std::string("INSERT INTO object_roots (key, touched_ms) VALUES ($1, ") + kDbNowMs +
                         ") ON CONFLICT (key) DO UPDATE SET touched_ms = EXCLUDED.touched_ms",
                     p, "touching object root " + key);
    if (!res) return fail(res.error());
    return {};
  });
}

Result<std::vector<std::string>> PgStore::stale_object_roots(int64_t grace_ms) {
  std::vector<std::string> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, grace_ms);
    auto res = c.run(std::string("SELECT key FROM object_roots WHERE touched_ms < ") + kDbNowMs + " - $1 ORDER BY key",
                     p, "listing object roots");
    if (!res) return fail(res.error());
    for (int i = 0; i < res->rows(); ++i) out.push_back(res->text(i, 0));
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<bool> PgStore::collect_object_root(const std::string& key, int64_t grace_ms,
                                          const std::function<Result<void>()>& remove) {
  bool collected = false;
  auto r = transaction([&](Conn& c) -> Result<void> {
    if (auto l = lock_object_root(c, key); !l) return l;
    Params p;
    p.bind(1, key).bind(2, grace_ms);
    auto res = c.run(std::string("SELECT 1 FROM object_roots WHERE key = $1 AND touched_ms < ") + kDbNowMs +
                         " - $2 AND NOT EXISTS (SELECT 1 FROM snapshots WHERE object_root = $1)"
                         " AND NOT EXISTS (SELECT 1 FROM template_builds WHERE deleted_ms IS NULL"
                         " AND artifact <> '' AND 'template-roots/' || artifact = $1)",
                     p, "checking object root " + key);
    if (!res) return fail(res.error());
    if (res->rows() == 0) return {};
    // The objects first, under the lock: a node touching the root meanwhile waits, then finds
    // it gone and puts it again.
    if (auto removed = remove(); !removed) return removed;
    Params q;
    q.bind(1, key);
    if (auto d = c.run("DELETE FROM object_roots WHERE key = $1", q, "forgetting object root " + key); !d)
      return fail(d.error());
    collected = true;
    return {};
  });
  if (!r) return fail(r.error());
  return collected;
}

Result<std::string> PgStore::sandbox_node(const std::string& id) {
  std::string node;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id);
    auto res = c.run("SELECT node_id FROM sandboxes WHERE id = $1", p, "finding the node of sandbox " + id);
    if (!res) return fail(res.error());
    if (res->rows() == 1) node = res->text(0, 0);
    return {};
  });
  if (!r) return fail(r.error());
  return node;
}

Result<bool> PgStore::set_node_state(const std::string& id, const std::string& state) {
  if (state != "ready" && state != "draining")
    return fail(ErrorCode::kInvalidRequest, "a node's state is set to ready or draining (\"" + state + "\" given)");
  bool changed = false;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, id).bind(2, state);
    // A down node comes back only by starting again (its sandboxes were failed).
    auto res = c.run("UPDATE nodes SET state = $2 WHERE id = $1 AND state <> 'down'", p, "setting the state of node " + id);
    if (!res) return fail(res.error());
    changed = res->affected() == 1;
    return {};
  });
  if (!r) return fail(r.error());
  return changed;
}

Result<std::vector<LedgerRow>> PgStore::ledger(const std::string& budget_id, int limit) {
  std::vector<LedgerRow> out;
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, budget_id).bind(2, int64_t{limit});
    auto res = c.run("SELECT budget_id, project_id, COALESCE(sandbox_id, ''), COALESCE(key_id, ''), model, prompt_tokens, "
                     "completion_tokens, cost_micros, reserved_micros, duration_ms, status, outcome FROM ledger "
                     "WHERE budget_id = $1 ORDER BY id DESC LIMIT $2",
                     p, "reading the ledger");
    if (!res) return fail(res.error());
    for (int i = 0; i < res->rows(); ++i) {
      LedgerRow l;
      l.budget_id = res->text(i, 0);
      l.project_id = res->text(i, 1);
      l.sandbox_id = res->text(i, 2);
      l.key_id = res->text(i, 3);
      l.model = res->text(i, 4);
      l.prompt_tokens = res->i64(i, 5);
      l.completion_tokens = res->i64(i, 6);
      l.cost_micros = res->i64(i, 7);
      l.reserved_micros = res->i64(i, 8);
      l.duration_ms = res->f64(i, 9);
      l.status = static_cast<int>(res->i64(i, 10));
      l.outcome = res->text(i, 11);
      out.push_back(std::move(l));
    }
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}

Result<bool> PgStore::project_allows_infer(const std::string& project_id) {
  bool allowed = true;  // the default: a node's models serve its projects
  auto r = with_conn([&](Conn& c) -> Result<void> {
    Params p;
    p.bind(1, project_id);
    auto res = c.run("SELECT infer FROM project_settings WHERE project_id = $1", p, "reading project settings");
    if (!res) return fail(res.error());
    if (res->rows() > 0) allowed = res->i64(0, 0) != 0;
    return {};
  });
  if (!r) return fail(r.error());
  return allowed;
}

Result<void> PgStore::set_project_infer(const std::string& project_name, bool allowed) {
  return with_conn([&](Conn& c) -> Result<void> {
    Params f;
    f.bind(1, project_name);
    auto found = c.run("SELECT id FROM projects WHERE name = $1", f, "finding project");
    if (!found) return fail(found.error());
    if (found->rows() == 0) return fail(ErrorCode::kNotFound, "no project named \"" + project_name + "\"");
    Params p;
    p.bind(1, found->text(0, 0)).bind(2, int64_t{allowed ? 1 : 0});
    if (auto r = c.run("INSERT INTO project_settings(project_id, infer) VALUES ($1, $2) "
                       "ON CONFLICT (project_id) DO UPDATE SET infer = EXCLUDED.infer",
                       p, "saving project settings");
        !r)
      return fail(r.error());
    return {};
  });
}

Result<void> pg_admin_exec(const std::string& url, const std::string& sql) {
  auto c = Conn::connect(url);
  if (!c) return fail(c.error());
  return (*c)->exec(sql.c_str(), "running an administrative statement");
}

}  // namespace b3os::store
