// Settles kept while the shared store is away: written once it answers, kept across a
// restart in their journal, never kept for a failure that trying again cannot mend.
#include "daemon/gateway/settles.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

namespace b3os::gateway {
namespace {

namespace fs = std::filesystem;

/// A store's settle_budget: away (kNodeUnavailable) while `away`, counting what it wrote.
struct FakeLedger {
  std::atomic<bool> away{false};
  std::atomic<bool> broken{false};
  std::mutex mu;
  std::map<std::string, int> written;  // hold id -> times written
  std::map<std::string, Micros> cost;

  PendingSettles::SettleFn fn() {
    return [this](const std::string& hold, const store::LedgerRow& row) -> Result<void> {
      if (broken) return fail(ErrorCode::kInternal, "no budget " + row.budget_id);
      if (away) return fail(ErrorCode::kNodeUnavailable, "the store cannot be reached");
      std::lock_guard lk(mu);
      ++written[hold];
      cost[hold] = row.cost_micros;
      return {};
    };
  }
  int times(const std::string& hold) {
    std::lock_guard lk(mu);
    auto it = written.find(hold);
    return it == written.end() ? 0 : it->second;
  }
};

store::LedgerRow row_of(Micros cost) {
  store::LedgerRow r;
  r.budget_id = "grt_1";
  r.project_id = "prj_1";
  r.sandbox_id = "sbx_1";
  r.model = "m";
  r.prompt_tokens = 3;
  r.completion_tokens = 4;
  r.cost_micros = cost;
  r.reserved_micros = 900;
  r.duration_ms = 12.5;
  r.status = 200;
  r.outcome = "completed";
  return r;
}

class SettlesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("b3os-settles-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    journal_ = dir_ / "pending-settles.json";
  }
  void TearDown() override { fs::remove_all(dir_); }
  PendingSettles::Options opts() { return {journal_, 20, 100}; }
  static bool eventually(const std::function<bool()>& f) {
    for (int i = 0; i < 300; ++i) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return f();
  }
  fs::path dir_, journal_;
};

TEST_F(SettlesTest, WrittenAtOnceWhenTheStoreAnswers) {
  FakeLedger ledger;
  PendingSettles s(ledger.fn(), opts());
  s.start();
  s.settle("hld_a", row_of(5));
  EXPECT_EQ(ledger.times("hld_a"), 1);
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_FALSE(fs::exists(journal_));
}

TEST_F(SettlesTest, KeptWhileTheStoreIsAwayAndWrittenOnceItAnswers) {
  FakeLedger ledger;
  ledger.away = true;
  PendingSettles s(ledger.fn(), opts());
  s.start();
  const auto t0 = std::chrono::steady_clock::now();
  s.settle("hld_a", row_of(5));
  s.settle("hld_b", row_of(7));
  // The caller does not wait for the store.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(s.pending(), 2u);
  ASSERT_TRUE(fs::exists(journal_));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // several tries, all refused
  EXPECT_EQ(s.pending(), 2u);
  EXPECT_EQ(ledger.times("hld_a"), 0);

  ledger.away = false;
  ASSERT_TRUE(eventually([&] { return s.pending() == 0; }));
  EXPECT_EQ(ledger.times("hld_a"), 1);
  EXPECT_EQ(ledger.times("hld_b"), 1);
  EXPECT_EQ(ledger.cost["hld_b"], 7);
  EXPECT_FALSE(fs::exists(journal_));
}

TEST_F(SettlesTest, ARestartedNodeWritesWhatItsJournalKept) {
  FakeLedger ledger;
  ledger.away = true;
  {
    PendingSettles s(ledger.fn(), opts());
    s.start();
    s.settle("hld_a", row_of(5));
    s.settle("hld_b", row_of(7));
    EXPECT_EQ(s.pending(), 2u);
  }  // the process ends with the store still away
  ASSERT_TRUE(fs::exists(journal_));
  EXPECT_EQ(ledger.times("hld_a"), 0);

  ledger.away = false;
  PendingSettles again(ledger.fn(), opts());
  again.start();
  ASSERT_TRUE(eventually([&] { return again.pending() == 0; }));
  EXPECT_EQ(ledger.times("hld_a"), 1);
  EXPECT_EQ(ledger.times("hld_b"), 1);
  EXPECT_EQ(ledger.cost["hld_a"], 5);
  EXPECT_FALSE(fs::exists(journal_));
}

TEST_F(SettlesTest, AFailureTryingAgainCannotMendIsNotKept) {
  FakeLedger ledger;
  ledger.broken = true;
  PendingSettles s(ledger.fn(), opts());
  s.start();
  s.settle("hld_a", row_of(5));
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_FALSE(fs::exists(journal_));
}

TEST_F(SettlesTest, AnUnreadableJournalIsMovedAsideNotLostOrFatal) {
  { std::ofstream(journal_) << "{\"settles\": [ not json"; }
  FakeLedger ledger;
  PendingSettles s(ledger.fn(), opts());
  s.start();
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_FALSE(fs::exists(journal_));
  EXPECT_TRUE(fs::exists(journal_.string() + ".unreadable"));
  // Entries of a readable journal that are not settles are dropped, the others written.
  { std::ofstream(journal_) << R"({"version": 1, "settles": [{"hold_id": 5}, {"nothing": true}]})"; }
  PendingSettles t(ledger.fn(), opts());
  t.start();
  EXPECT_EQ(t.pending(), 0u);
}

}  // namespace
}  // namespace b3os::gateway
