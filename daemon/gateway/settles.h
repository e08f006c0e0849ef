#pragma once
// Settles that outlive the shared store's absence (docs/cluster.md).
//
// In a cluster a model call's settle (its hold released, its cost charged, its ledger row
// written) is one transaction in Postgres. When the store cannot be reached as the call ends,
// the settle is kept here, in memory and in a journal file, and tried again until the store
// answers: no outage loses a ledger row, and the hold stays held meanwhile, so the cap stays
// safe. A node restarted with settles in its journal tries them again first. Trying twice is
// harmless: the store writes a hold's ledger row once (its hold id is unique there) and
// charges only with it.
//
// Bounded: a call is admitted only with a hold, which needs the store, so what is pending is
// at most the calls that were in flight when it went away; kMaxPending bounds it anyway.

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "daemon/store/store.h"

namespace b3os::gateway {

class PendingSettles {
 public:
  /// Writes one hold's settle to the store (Store::settle_budget).
  using SettleFn = std::function<Result<void>(const std::string& hold_id, const store::LedgerRow& row)>;
  struct Options {
    std::filesystem::path journal;   // "" keeps them in memory only
    int first_retry_ms = 500;        // then doubled, up to max_retry_ms
    int max_retry_ms = 10'000;
  };
  static constexpr size_t kMaxPending = 100'000;

  PendingSettles(SettleFn settle, Options opts);
  ~PendingSettles();
  PendingSettles(const PendingSettles&) = delete;
  PendingSettles& operator=(const PendingSettles&) = delete;

  /// Reads the journal a previous process left (its settles are tried first) and starts the
  /// thread that tries again. A journal that cannot be read is kept aside (logged), not lost.
  void start();
  /// Settles now; when the store cannot be reached (kNodeUnavailable), keeps the settle and
  /// returns at once: it is written when the store answers. Other failures are logged.
  void settle(const std::string& hold_id, const store::LedgerRow& row);
  /// Settles not yet written.
  size_t pending() const;

 private:
  struct Item {
    std::string hold_id;
    store::LedgerRow row;
  };
  void run();
  /// Tries every pending settle once; true when none is left.
  bool try_all();
  /// Writes the journal (caller holds mu_): atomically, removed when nothing is pending.
  void save_locked();
  void load();

  SettleFn settle_;
  Options opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Item> items_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace b3os::gateway
