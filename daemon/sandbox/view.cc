#include "daemon/sandbox/view.h"

#include <algorithm>

#include "common/clock.h"
#include "daemon/sandbox/ports.h"
#include "daemon/sandbox/state.h"

namespace b3os::sandbox {

using nlohmann::json;

namespace {
json opt_time(const std::optional<int64_t>& ms) { return ms ? json(format_rfc3339(*ms)) : json(nullptr); }

json grant_object(const std::vector<std::string>& scopes, const std::optional<int64_t>& cap) {
  return {{"scopes", scopes},
          {"spend_cap_usd", cap ? json(micros_to_usd(*cap)) : json(nullptr)},
          {"connections", json::array()}};
}
}  // namespace

Usage usage_of(const store::SandboxRecord& r, int64_t now_ms) {
  const int64_t end = r.stopped_ms.value_or(now_ms);
  int64_t paused = r.paused_total_ms;
  if (r.paused_since_ms) paused += end - *r.paused_since_ms;
  const int64_t alive = std::max<int64_t>(0, end - r.started_ms);
  const int64_t ran = std::max<int64_t>(0, alive - paused);
  return {int64_t(r.vcpu) * ran, alive * r.memory_mib / 1024};
}

json sandbox_object(const store::SandboxRecord& r, int64_t now_ms, std::optional<double> spent_usd, const PortUrls* urls) {
  json ports = json::array();
  if (urls)
    ports = urls->ports_json(r);
  else
    for (auto& p : r.ports) ports.push_back({{"port", p.port}, {"public", p.is_public}, {"url", nullptr}});
  json secret_names = json::array();
  for (auto& [k, v] : r.secrets) secret_names.push_back(k);
  const bool live = is_live(r.state);
  const int64_t expires = live ? r.last_activity_ms + int64_t(r.timeout_s) * 1000 : r.stopped_ms.value_or(now_ms);
  json api = grant_object(r.api_scopes, r.spend_cap_micros);
  api["spent_usd"] = spent_usd.value_or(0);
  if (!r.budget_id.empty()) api["budget_id"] = r.budget_id;  // `b3os keys spend ID` shows its ledger
  const Usage u = usage_of(r, now_ms);
  return {
      {"id", r.id},
      {"object", "sandbox"},
      {"status", api_status(r.state)},
      {"host_id", host_id_of(r.id)},
      {"template", {{"id", r.template_id.empty() ? "tpl_" + r.template_name : r.template_id}, {"name", r.template_name}}},
      {"snapshot", r.snapshot_id ? json(*r.snapshot_id) : json(nullptr)},
      {"vcpu", r.vcpu},
      {"memory_mib", r.memory_mib},
      {"disk_gib", r.disk_gib},
      {"timeout_s", r.timeout_s},
      {"on_idle", r.on_idle},
      {"expires_at", format_rfc3339(expires)},
      {"env", r.env},
      {"secret_names", secret_names},
      {"ports", ports},
      {"api", api},
      {"egress", {{"mode", r.egress_mode}, {"allow", r.egress_allow}}},
      {"forkable", r.forkable},
      {"open_ports", r.open_ports},
      {"created_at", format_rfc3339(r.created_ms)},
      {"started_at", format_rfc3339(r.started_ms)},
      {"paused_at", opt_time(r.paused_since_ms)},
      {"stopped_at", opt_time(r.stopped_ms)},
      {"stop_reason", r.stop_reason ? json(std::string(store::stop_reason_name(*r.stop_reason))) : json(nullptr)},
      {"stop_message", r.stop_message.empty() ? json(nullptr) : json(r.stop_message)},
      {"usage", {{"vcpu_ms", u.vcpu_ms}, {"gib_ms", u.gib_ms}}},
      {"metadata", r.metadata},
  };
}

json snapshot_object(const store::SnapshotRecord& r) {
  json secret_names = json::array();
  for (auto& [k, v] : r.secrets) secret_names.push_back(k);
  return {{"id", r.id},
          {"object", "snapshot"},
          {"sandbox_id", r.sandbox_id},
          {"template", {{"id", r.template_id.empty() ? "tpl_" + r.template_name : r.template_id}, {"name", r.template_name}}},
          {"vcpu", r.vcpu},
          {"memory_mib", r.memory_mib},
          {"disk_gib", r.disk_gib},
          {"env", r.env},
          {"secret_names", secret_names},
          {"egress", {{"mode", r.egress_mode}, {"allow", r.egress_allow}}},
          {"api", grant_object(r.api_scopes, r.spend_cap_micros)},
          {"forkable", r.forkable},
          {"size_bytes", r.size_bytes},
          {"created_at", format_rfc3339(r.created_ms)}};
}

}  // namespace b3os::sandbox
