#include "daemon/gateway/budget.h"

#include <spdlog/spdlog.h>

namespace b3os::gateway {

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
  std::lock_guard lk(mu_);
  auto a = account(budget_id);
  if (!a) return fail(a.error());
  Account& acc = **a;
  if (acc.cap && acc.spent + acc.reserved + worst > *acc.cap) {
    std::string msg = "spend cap " + format_usd(*acc.cap) + " reached: " + format_usd(acc.spent) + " spent";
    if (acc.reserved > 0) msg += ", " + format_usd(acc.reserved) + " held by calls in flight";
    msg += ", and this call could cost up to " + format_usd(worst);
    if (acc.spent + acc.reserved < *acc.cap) msg += " (ask for fewer max_tokens or a shorter prompt)";
    return fail(ErrorCode::kPaymentRequired, msg);
  }
  acc.reserved += worst;
  return Reservation{budget_id, worst, true};
}

void Budgets::settle(Reservation& r, store::LedgerRow row) {
  if (!r.active) return;
  r.active = false;
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
