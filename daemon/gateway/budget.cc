#include "daemon/gateway/budget.h"

#include <spdlog/spdlog.h>

#include "common/ids.h"

namespace b3os::gateway {

namespace {
Error cap_reached(Micros cap, Micros spent, Micros reserved, Micros worst) {
  std::string msg = "spend cap " + format_usd(cap) + " reached: " + format_usd(spent) + " spent";
  if (reserved > 0) msg += ", " + format_usd(reserved) + " held by calls in flight";
  msg += ", and this call could cost up to " + format_usd(worst);
  if (spent + reserved < cap) msg += " (ask for fewer max_tokens or a shorter prompt)";
  return Error{ErrorCode::kPaymentRequired, msg, 0};
}
}  // namespace

Budgets::Budgets(store::Store& store, std::filesystem::path journal)
    : store_(store),
      pending_([&store](const std::string& hold, const store::LedgerRow& row) { return store.settle_budget(hold, row); },
               PendingSettles::Options{std::move(journal)}) {
  if (store_.shared()) pending_.start();
}

Result<Budgets::Account*> Budgets::account(const std::string& id) {
  auto row = store_.get_budget(id);
  if (auto it = accounts_.find(id); it != accounts_.end()) {
    // The cap may have been changed with `b3os keys set-cap` since: it is read on each call.
    if (row && *row) it->second.cap = (*row)->cap_micros;
    return &it->second;
  }
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kInternal, "no budget " + id);
  Account a;
  a.cap = (*row)->cap_micros;
  a.spent = (*row)->spent_micros;
  return &(accounts_[id] = a);
}

Result<Reservation> Budgets::reserve(const std::string& budget_id, Micros worst) {
  if (store_.shared()) return reserve_shared(budget_id, worst);
  std::lock_guard lk(mu_);
  auto a = account(budget_id);
  if (!a) return fail(a.error());
  Account& acc = **a;
  if (acc.cap && acc.spent + acc.reserved + worst > *acc.cap) return fail(cap_reached(*acc.cap, acc.spent, acc.reserved, worst));
  acc.reserved += worst;
  return Reservation{budget_id, worst, true, ""};
}

Result<Reservation> Budgets::reserve_shared(const std::string& budget_id, Micros worst) {
  const std::string hold = new_id("hld");
  auto h = store_.reserve_budget(budget_id, hold, worst);
  if (!h) return fail(h.error());
  const auto& b = h->budget;
  {
    std::lock_guard lk(mu_);
    accounts_[budget_id] = Account{b.cap_micros, b.spent_micros, b.reserved_micros};
  }
  if (!h->held) return fail(cap_reached(b.cap_micros.value_or(0), b.spent_micros, b.reserved_micros, worst));
  return Reservation{budget_id, worst, true, hold};
}

void Budgets::settle_shared(Reservation& r, store::LedgerRow row) {
  row.budget_id = r.budget_id;
  row.reserved_micros = r.amount;
  // One try; a store that cannot be reached (restarting, away) gets the settle later, from
  // the journal, however long it is away. The hold stays held meanwhile: the cap is safe.
  pending_.settle(r.hold_id, row);
}

void Budgets::settle(Reservation& r, store::LedgerRow row) {
  if (!r.active) return;
  r.active = false;
  if (!r.hold_id.empty()) return settle_shared(r, std::move(row));
  {
    std::lock_guard lk(mu_);
    auto a = account(r.budget_id);
    if (a) {
      (*a)->reserved -= r.amount;
      (*a)->spent += row.cost_micros;
    }
  }
  row.budget_id = r.budget_id;
  row.reserved_micros = r.amount;
  if (auto w = store_.record_call(row); !w)
    spdlog::error("ledger: could not record a call of {} on {}: {}", format_usd(row.cost_micros), r.budget_id,
                  w.error().message);
}

std::optional<Budgets::Snapshot> Budgets::look(const std::string& budget_id) {
  if (store_.shared()) {
    auto row = store_.get_budget(budget_id);
    if (!row || !*row) return std::nullopt;
    return Snapshot{(*row)->cap_micros, (*row)->spent_micros, (*row)->reserved_micros};
  }
  std::lock_guard lk(mu_);
  auto a = account(budget_id);
  if (!a) return std::nullopt;
  return Snapshot{(*a)->cap, (*a)->spent, (*a)->reserved};
}

std::vector<std::pair<std::string, Budgets::Snapshot>> Budgets::capped() {
  std::lock_guard lk(mu_);
  std::vector<std::pair<std::string, Snapshot>> out;
  for (auto& [id, a] : accounts_)
    if (a.cap) out.push_back({id, Snapshot{a.cap, a.spent, a.reserved}});
  return out;
}

}  // namespace b3os::gateway
