#pragma once
// Budgets: admission and settlement of model spend against hard caps.
//
// Before a call goes upstream its worst-case cost is reserved: the call is admitted only if
// spent + reserved + worst <= cap, checked and reserved under one lock, so calls racing for
// the last dollar can never take the total past the cap. When the call ends, the reservation
// is released and the real cost is charged (memory first, then the ledger in the store).
// In a cluster (a shared store) the same rule is one conditional UPDATE in the store, and a
// reservation is a row there (a "hold"): every node's calls count against the one cap. A
// settle the shared store cannot take yet is kept and written when it answers (settles.h).
// Every amount is integer micro-dollars (common/money.h): the sums are exact.

#include <concepts>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/money.h"
#include "common/result.h"
#include "daemon/gateway/settles.h"
#include "daemon/store/store.h"

namespace b3os::gateway {

/// A reservation held by one call in flight.
struct Reservation {
  std::string budget_id;
  Micros amount = 0;
  bool active = false;
  std::string hold_id;  // its row in a shared store ("" on a single node)
};

class Budgets {
 public:
  /// `journal`: where settles waiting for a shared store are kept across restarts (in a
  /// cluster; "" keeps them in memory only).
  explicit Budgets(store::Store& store, std::filesystem::path journal = {});

  /// Reserves `worst` micro-dollars on `budget_id`. Fails with kPaymentRequired (the message
  /// names the cap) when it would pass the cap, kInternal when the budget does not exist.
  Result<Reservation> reserve(const std::string& budget_id, Micros worst);
  /// Dollars would convert to micro-dollars silently, truncated: a compile error instead.
  template <std::floating_point T>
  Result<Reservation> reserve(const std::string&, T) = delete;
  /// Releases the reservation and charges `row.cost_micros` (the ledger row is written too).
  /// Idempotent: a second settle of the same reservation does nothing.
  void settle(Reservation& r, store::LedgerRow row);

  struct Snapshot {
    std::optional<Micros> cap_micros;
    Micros spent_micros = 0, reserved_micros = 0;
  };
  /// What a budget has spent and holds reserved now (for the sandbox object).
  std::optional<Snapshot> look(const std::string& budget_id);

  /// The budgets with a cap that calls have used since b3osd started, with what they hold
  /// (for the metric b3os_budget_used_ratio).
  std::vector<std::pair<std::string, Snapshot>> capped();

  /// The store the budgets live in (the gateway's admission reads project settings there).
  store::Store& store() { return store_; }

 private:
  struct Account {
    std::optional<Micros> cap;
    Micros spent = 0, reserved = 0;
  };
  /// Loads an account into the cache (caller holds mu_).
  Result<Account*> account(const std::string& id);
  Result<Reservation> reserve_shared(const std::string& budget_id, Micros worst);
  void settle_shared(Reservation& r, store::LedgerRow row);

  store::Store& store_;
  std::mutex mu_;
  std::map<std::string, Account> accounts_;  // in a shared store: as the last call found it
  PendingSettles pending_;
};

}  // namespace b3os::gateway
