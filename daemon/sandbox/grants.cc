// Lifecycle: the model grant a new sandbox gets (which budget its model calls charge).
#include <algorithm>

#include "common/ids.h"
#include "daemon/sandbox/lifecycle.h"

namespace b3os::sandbox {

Result<std::string> Lifecycle::grant_budget(const Principal& p, const SandboxSpec& spec, const std::string& inherited) {
  const bool infer = std::find(spec.api.scopes.begin(), spec.api.scopes.end(), "infer:run") != spec.api.scopes.end();
  if (!infer) return std::string();
  auto allowed = store_.project_allows_infer(p.project_id);
  if (!allowed) return fail(allowed.error());
  if (!*allowed)
    return fail(ErrorCode::kForbidden, "this project may not use the model gateway (api.scopes infer:run); an admin can "
                                       "allow it with `b3os projects set-infer NAME on`");
  // A snapshot's sandbox keeps the budget of the grant it was taken with.
  if (!inherited.empty()) return inherited;
  // A cap of its own: a new budget, shared later by the sandbox's forks and snapshots.
  if (spec.api.spend_cap_usd) {
    std::string id = new_id("grt");
    if (auto r = store_.ensure_budget(id, p.project_id, usd_to_micros(*spec.api.spend_cap_usd)); !r) return fail(r.error());
    return id;
  }
  // No cap given: the creating key's own budget (and cap, if it has one) applies.
  if (p.key_id.empty()) return fail(ErrorCode::kInternal, "a grant with no cap needs the creating key");
  if (auto r = store_.ensure_budget(p.key_id, p.project_id, std::nullopt); !r) return fail(r.error());
  return p.key_id;
}

}  // namespace b3os::sandbox
