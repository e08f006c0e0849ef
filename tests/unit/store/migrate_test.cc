// The schema migrations against a database written by a real b3osd of release 0.1
// (tests/fixtures/b3os-v0.1.db; tests/fixtures/README.md says how it was made): every value
// survives, money becomes exact micro-dollars, and opening again changes nothing.
#include <sqlite3.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "common/ids.h"
#include "daemon/gateway/budget.h"
#include "daemon/store/store.h"

namespace b3os::store {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture = fs::path(__FILE__).parent_path() / "../../fixtures/b3os-v0.1.db";

// What the fixture holds (ids and keys of a throwaway node, written by the generator).
constexpr const char* kAdminKey = "b3os_sk_76s3t15zjnwm32xwtpa3fvhwvvgcwavzq11rwm18";
constexpr const char* kTeamBKey = "b3os_sk_ykcpek6yax6qrg9sqnjt11mwsqbt15kh93ktpczp";
constexpr const char* kQuietKey = "b3os_sk_v1k6m09rc6ahz56ya9cbbqhfhw20n8kppqsnpfz7";
constexpr const char* kDefaultProject = "prj_01m8s546rq8gj5zzqxs3hn0b69";
constexpr const char* kAdminKeyId = "key_01m8s546rqnx4csb4mjhk9389f";
constexpr const char* kTeamBKeyId = "key_01m8s546wk7yyea1yqmjdnkk2h";
constexpr const char* kGrant = "grt_01m8s546xngaw5sh334m6q1df8";
constexpr const char* kRunning = "sbx_01m8s546xn2r03wwazzbe126g8";
constexpr const char* kPaused = "sbx_01m8s547dzq7n51strts4mv61w";
constexpr const char* kStopped = "sbx_01m8s547np7vnrz35h70yypxpq";
constexpr const char* kSnapshot = "snp_01m8s547bpbsm220vczg4md9qr";

/// One table's rows, each as column name -> value (NULL and the storage class kept apart).
using Row = std::map<std::string, std::string>;
using Table = std::vector<Row>;

/// Reads a database with plain SQLite, not the Store: what is on disk.
class Raw {
 public:
  explicit Raw(const fs::path& path) { sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr); }
  ~Raw() { sqlite3_close(db_); }
  Table rows(const std::string& sql) {
    Table out;
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
    while (sqlite3_step(st) == SQLITE_ROW) {
      Row r;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const int type = sqlite3_column_type(st, i);
        std::string value;
        if (type == SQLITE_FLOAT) {
          char buf[64];  // every bit of the double, not SQLite's 15 digits
          std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(st, i));
          value = buf;
        } else if (type != SQLITE_NULL) {
          value.assign(static_cast<const char*>(sqlite3_column_blob(st, i)), sqlite3_column_bytes(st, i));
        }
        r[sqlite3_column_name(st, i)] = type == SQLITE_NULL ? "<null>" : std::to_string(type) + ":" + value;
      }
      out.push_back(std::move(r));
    }
    sqlite3_finalize(st);
    return out;
  }
  double real(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr);
    double v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_double(st, 0) : -1;
    sqlite3_finalize(st);
    return v;
  }
  int user_version() { return static_cast<int>(real("PRAGMA user_version")); }

 private:
  sqlite3* db_ = nullptr;
};

/// Every table of a database in a stable order, and its schema.
std::map<std::string, Table> dump(const fs::path& path) {
  Raw raw(path);
  std::map<std::string, Table> out;
  for (auto& t : raw.rows("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")) {
    const std::string name = t.at("name").substr(2);
    out[name] = raw.rows("SELECT * FROM " + name + " ORDER BY rowid");
  }
  out["<schema>"] = raw.rows("SELECT type, name, sql FROM sqlite_master ORDER BY name");
  out["<sequence>"] = raw.rows("SELECT * FROM sqlite_sequence ORDER BY name");
  return out;
}

class MigrateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kFixture)) << kFixture << " is missing (tests/fixtures/README.md)";
    dir_ = fs::temp_directory_path() / ("b3os-migrate-" + random_base32(8));
    fs::create_directories(dir_);
    before_ = dir_ / "before.db";
    db_ = dir_ / "b3os.db";
    fs::copy_file(kFixture, before_);
    fs::copy_file(kFixture, db_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<Store> open() {
    auto s = Store::open(db_.string());
    EXPECT_TRUE(s) << s.error().message;
    return s ? std::move(*s) : nullptr;
  }

  fs::path dir_, before_, db_;
};

TEST_F(MigrateTest, TheFixtureIsARelease01Database) {
  Raw raw(before_);
  EXPECT_EQ(raw.user_version(), 0);
  EXPECT_EQ(raw.rows("SELECT 1 FROM pragma_table_info('budgets') WHERE name = 'cap_usd' AND type = 'REAL'").size(), 1u);
  EXPECT_EQ(raw.rows("SELECT * FROM sandboxes").size(), 3u);
}

TEST_F(MigrateTest, EveryValueSurvivesAndMoneyBecomesExactMicroDollars) {
  auto store = open();
  ASSERT_TRUE(store);
  store.reset();
  auto old_tables = dump(before_), new_tables = dump(db_);

  // Tables the migration does not touch are identical, row for row and value for value.
  for (const char* t : {"projects", "idempotency", "project_settings"}) {
    ASSERT_FALSE(old_tables.at(t).empty()) << t << ": the fixture should hold rows of every table";
    EXPECT_EQ(old_tables.at(t), new_tables.at(t)) << t;
  }
  // API keys gain a column (version 5: last_used_at_ms), empty; every other value is kept.
  {
    auto keys = new_tables.at("api_keys");
    ASSERT_FALSE(keys.empty());
    for (auto& row : keys) {
      EXPECT_EQ(row.at("last_used_at_ms"), "<null>");
      row.erase("last_used_at_ms");
    }
    EXPECT_EQ(old_tables.at("api_keys"), keys);
  }
  // Sandboxes and snapshots leave their JSON documents for typed columns (version 3), one row
  // for each old row; their values are checked through the store below.
  for (const char* t : {"sandboxes", "snapshots"}) {
    ASSERT_FALSE(old_tables.at(t).empty()) << t;
    EXPECT_EQ(old_tables.at(t).size(), new_tables.at(t).size()) << t;
    for (auto& row : new_tables.at(t)) EXPECT_EQ(row.count("doc"), 0u) << t << " still has its document column";
  }
  // Money columns: REAL dollars become INTEGER micro-dollars, rounded to the nearest;
  // every other column is the same.
  const std::map<std::string, std::vector<std::pair<std::string, std::string>>> money = {
      {"budgets", {{"cap_usd", "cap_micros"}, {"spent_usd", "spent_micros"}}},
      {"ledger", {{"cost_usd", "cost_micros"}, {"reserved_usd", "reserved_micros"}}},
  };
  for (auto& [table, columns] : money) {
    const Table& was = old_tables.at(table);
    const Table& is = new_tables.at(table);
    ASSERT_EQ(was.size(), is.size()) << table;
    ASSERT_FALSE(was.empty()) << table;
    for (size_t i = 0; i < was.size(); ++i) {
      Row expected = was[i];
      for (auto& [from, to] : columns) {
        const std::string v = expected.at(from);
        expected.erase(from);
        if (v == "<null>") {
          expected[to] = v;
        } else {
          ASSERT_EQ(v.substr(0, 2), std::to_string(SQLITE_FLOAT) + ":") << table << "." << from << " " << v;
          expected[to] = std::to_string(SQLITE_INTEGER) + ":" + std::to_string(usd_to_micros(std::stod(v.substr(2))));
        }
      }
      EXPECT_EQ(is[i], expected) << table << " row " << i;
    }
  }
  EXPECT_EQ(old_tables.at("<sequence>"), new_tables.at("<sequence>")) << "the ledger's AUTOINCREMENT goes on";
  EXPECT_EQ(Raw(db_).user_version(), Store::latest_schema_version());
}

TEST_F(MigrateTest, TheMigratedStoreServesWhatTheOldOneHeld) {
  auto store = open();
  ASSERT_TRUE(store);
  // Keys, by their plain text (only hashes are stored).
  auto admin = store->find_api_key(kAdminKey);
  ASSERT_TRUE(admin && *admin);
  EXPECT_EQ((*admin)->id, kAdminKeyId);
  EXPECT_EQ((*admin)->project_name, "default");
  EXPECT_EQ((*store->find_api_key(kTeamBKey))->project_name, "team-b");
  EXPECT_EQ((*store->find_api_key(kQuietKey))->project_name, "quiet");
  EXPECT_EQ(store->list_api_keys()->size(), 3u);
  EXPECT_FALSE(*store->project_allows_infer((*store->find_api_key(kQuietKey))->project_id));
  EXPECT_TRUE(*store->project_allows_infer(kDefaultProject));

  // Sandboxes as the old daemon wrote them: running, paused, stopped (deleted).
  std::map<std::string, std::string> status;
  for (const char* id : {kRunning, kPaused, kStopped}) {
    auto s = store->get_sandbox(kDefaultProject, id);
    ASSERT_TRUE(s && *s) << id;
    status[id] = std::string(state_name((*s)->state));
  }
  EXPECT_EQ(status[kRunning], "running");
  EXPECT_EQ(status[kPaused], "paused");
  EXPECT_EQ(status[kStopped], "stopped");
  auto running = *store->get_sandbox(kDefaultProject, kRunning);
  EXPECT_EQ(running->secrets.at("TOKEN"), "fixture-secret");
  EXPECT_EQ(running->spend_cap_micros, 100'000) << "the grant's own cap of $0.1, exactly";
  EXPECT_EQ(running->budget_id, kGrant);
  EXPECT_EQ(running->env.at("GREETING"), "hi");
  EXPECT_GT(running->started_ms, 0);
  EXPECT_FALSE(running->hostname.empty());
  EXPECT_EQ((*store->get_sandbox(kDefaultProject, kStopped))->stop_reason, StopReason::kDeleted);
  EXPECT_EQ((*store->get_sandbox(kDefaultProject, kPaused))->snapshot_id, std::string(kSnapshot));
  EXPECT_TRUE((*store->get_sandbox(kDefaultProject, kPaused))->paused_since_ms.has_value());
  EXPECT_EQ(store->active_sandboxes()->size(), 2u);
  SandboxQuery q{kDefaultProject, std::nullopt, {{"role", "paused"}}, std::nullopt, 10};
  EXPECT_EQ(store->list_sandboxes(q)->size(), 1u);
  auto snap = store->get_snapshot(kDefaultProject, kSnapshot);
  ASSERT_TRUE(snap && *snap);
  EXPECT_EQ((*snap)->sandbox_id, kRunning);
  EXPECT_EQ((*snap)->secrets.at("TOKEN"), "fixture-secret");
  EXPECT_EQ((*snap)->budget_id, kGrant);

  // Money, exactly: caps of $0.1 and $0.3; spend and costs with fractions of a micro-dollar
  // (at $0.05 and $0.40 per million tokens) rounded to the nearest.
  auto grant = *store->get_budget(kGrant);
  ASSERT_TRUE(grant);
  EXPECT_EQ(grant->cap_micros, 100'000);
  EXPECT_EQ(grant->spent_micros, 22) << "2.175e-05 USD";
  auto calls = store->ledger(kGrant, 10);
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 3u);
  EXPECT_EQ((*calls)[0].cost_micros, 2) << "2.05e-06 USD";
  EXPECT_EQ((*calls)[0].reserved_micros, 7) << "7.35e-06 USD";
  EXPECT_EQ((*calls)[1].cost_micros, 8) << "8.35e-06 USD";
  EXPECT_EQ((*calls)[1].reserved_micros, 15) << "1.49e-05 USD";
  EXPECT_EQ((*calls)[2].cost_micros, 11) << "1.135e-05 USD";
  EXPECT_EQ((*calls)[2].prompt_tokens, 3);
  EXPECT_EQ((*calls)[2].completion_tokens, 28);
  EXPECT_EQ((*calls)[2].sandbox_id, kRunning);
  EXPECT_DOUBLE_EQ((*calls)[2].duration_ms, 5.475666);
  EXPECT_EQ((*calls)[2].outcome, "completed");
  auto team_b = *store->get_budget(kTeamBKeyId);
  EXPECT_EQ(team_b->cap_micros, 300'000);
  EXPECT_EQ(team_b->spent_micros, 7'000);
  EXPECT_EQ(store->ledger(kTeamBKeyId, 10)->at(0).reserved_micros, 112'000);
  auto admin_budget = *store->get_budget(kAdminKeyId);
  EXPECT_FALSE(admin_budget->cap_micros);
  EXPECT_EQ(admin_budget->spent_micros, 4) << "3.7e-06 USD";

  // The grant's cap is reached exactly, never passed, after the conversion.
  gateway::Budgets budgets(*store);
  auto last = budgets.reserve(kGrant, 100'000 - 22);
  ASSERT_TRUE(last) << last.error().message;
  EXPECT_FALSE(budgets.reserve(kGrant, 1));
}

TEST_F(MigrateTest, OpeningAgainIsANoOp) {
  ASSERT_TRUE(open());
  auto first = dump(db_);
  ASSERT_TRUE(open());
  EXPECT_EQ(dump(db_), first);
  EXPECT_EQ(Raw(db_).user_version(), Store::latest_schema_version());
}

TEST_F(MigrateTest, AStepThatFailsLeavesTheDatabaseAsItWas) {
  // A table in the way of version 2's rebuild: the step fails and rolls back whole, so the
  // database stays at version 1 with its REAL dollars, and the error says which step.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE ledger_v2 (x)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = Store::open(db_.string());
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("version 2"), std::string::npos) << s.error().message;
  Raw raw(db_);
  EXPECT_EQ(raw.user_version(), 1);
  EXPECT_DOUBLE_EQ(raw.real("SELECT cap_usd FROM budgets WHERE id = '" + std::string(kGrant) + "'"), 0.1);
  EXPECT_EQ(raw.rows("SELECT name FROM sqlite_master WHERE name = 'budgets_v2'").size(), 0u)
      << "nothing of the failed step is left";
}

}  // namespace
}  // namespace b3os::store
