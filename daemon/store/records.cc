#include "daemon/store/records.h"

#include <array>
#include <cmath>

#include "common/clock.h"

namespace b3os::store {

using nlohmann::json;

namespace {

constexpr std::array<std::pair<State, std::string_view>, 8> kStates = {{
    {State::kCreating, "creating"},
    {State::kRunning, "running"},
    {State::kPausing, "pausing"},
    {State::kPaused, "paused"},
    {State::kResuming, "resuming"},
    {State::kCheckpointing, "checkpointing"},
    {State::kStopped, "stopped"},
    {State::kFailed, "failed"},
}};

constexpr std::array<std::pair<StopReason, std::string_view>, 3> kReasons = {{
    {StopReason::kDeleted, "deleted"},
    {StopReason::kTimeout, "timeout"},
    {StopReason::kFailed, "failed"},
}};

std::map<std::string, std::string> string_map(const json& j) {
  std::map<std::string, std::string> m;
  if (!j.is_object()) return m;
  for (auto& [k, v] : j.items())
    if (v.is_string()) m[k] = v.get<std::string>();
  return m;
}

std::vector<std::string> string_list(const json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (auto& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::optional<int64_t> opt_i64(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<int64_t>();
}

std::string str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

std::optional<int64_t> cap_micros(const json& api) {
  if (!api.is_object() || !api.contains("spend_cap_usd") || !api["spend_cap_usd"].is_number()) return std::nullopt;
  return usd_to_micros(api["spend_cap_usd"].get<double>());
}

/// The api grant and the egress of an old document (a sandbox's or a snapshot's).
template <typename Record>
void read_grant_and_egress(const json& doc, Record& r) {
  const json api = doc.value("api", json::object());
  r.api_scopes = string_list(api.is_object() ? api.value("scopes", json::array()) : json::array());
  r.spend_cap_micros = cap_micros(api);
  const json egress = doc.value("egress", json::object());
  r.egress_mode = egress.is_object() ? egress.value("mode", "deny") : "deny";
  r.egress_allow = string_list(egress.is_object() ? egress.value("allow", json::array()) : json::array());
}

}  // namespace

std::string_view state_name(State s) {
  for (auto& [v, n] : kStates)
    if (v == s) return n;
  return "failed";
}

State settled(State s) {
  switch (s) {
    case State::kPausing:
    case State::kCheckpointing: return State::kRunning;
    case State::kResuming: return State::kPaused;
    default: return s;
  }
}

std::optional<State> state_from_name(std::string_view name) {
  for (auto& [v, n] : kStates)
    if (n == name) return v;
  return std::nullopt;
}

std::string_view stop_reason_name(StopReason r) {
  for (auto& [v, n] : kReasons)
    if (v == r) return n;
  return "failed";
}

std::optional<StopReason> stop_reason_from_name(std::string_view name) {
  for (auto& [v, n] : kReasons)
    if (n == name) return v;
  return std::nullopt;
}

Result<SandboxRecord> sandbox_from_legacy(const json& doc, const json& secrets) {
  if (!doc.is_object() || !doc.contains("id") || !doc["id"].is_string())
    return fail(ErrorCode::kInternal, "store: a sandbox document without an id");
  const json in = doc.contains("_b3os") && doc["_b3os"].is_object() ? doc["_b3os"] : json::object();
  SandboxRecord r;
  r.id = doc["id"].get<std::string>();
  auto st = state_from_name(str(doc, "status"));
  if (!st) return fail(ErrorCode::kInternal, "store: sandbox " + r.id + " has an unknown status \"" + str(doc, "status") + "\"");
  r.state = *st;
  if (doc.contains("template") && doc["template"].is_object()) r.template_name = str(doc["template"], "name");
  if (r.template_name.empty()) r.template_name = "base";
  if (doc.contains("snapshot") && doc["snapshot"].is_string()) r.snapshot_id = doc["snapshot"].get<std::string>();
  r.vcpu = doc.value("vcpu", 1);
  r.memory_mib = doc.value("memory_mib", 512);
  r.disk_gib = doc.value("disk_gib", 1);
  r.timeout_s = doc.value("timeout_s", 300);
  r.on_idle = doc.value("on_idle", "stop");
  r.env = string_map(doc.value("env", json::object()));
  r.secrets = string_map(secrets);
  r.metadata = string_map(doc.value("metadata", json::object()));
  if (doc.contains("ports") && doc["ports"].is_array())
    for (auto& p : doc["ports"])
      if (p.is_object()) r.ports.push_back({p.value("port", 0), p.value("public", false)});
  read_grant_and_egress(doc, r);
  r.forkable = doc.value("forkable", false);
  r.started_ms = opt_i64(in, "started_ms").value_or(0);
  r.created_ms = r.started_ms;
  if (auto c = doc.contains("created_at") && doc["created_at"].is_string() ? parse_rfc3339(doc["created_at"].get<std::string>())
                                                                          : std::nullopt)
    r.created_ms = *c;
  r.paused_since_ms = opt_i64(in, "paused_since_ms");
  r.paused_total_ms = opt_i64(in, "paused_total_ms").value_or(0);
  r.stopped_ms = opt_i64(in, "stopped_ms");
  if (doc.contains("stop_reason") && doc["stop_reason"].is_string())
    r.stop_reason = stop_reason_from_name(doc["stop_reason"].get<std::string>());
  r.stop_message = str(doc, "stop_message");
  r.last_activity_ms = opt_i64(in, "last_activity_ms").value_or(r.started_ms);
  r.hostname = str(in, "hostname");
  r.rootfs = str(in, "rootfs");
  r.budget_id = str(in, "budget_id");
  r.forked_from = str(in, "forked_from");
  return r;
}

Result<SnapshotRecord> snapshot_from_legacy(const json& doc, const json& secrets) {
  if (!doc.is_object() || !doc.contains("id") || !doc["id"].is_string())
    return fail(ErrorCode::kInternal, "store: a snapshot document without an id");
  const json in = doc.contains("_b3os") && doc["_b3os"].is_object() ? doc["_b3os"] : json::object();
  SnapshotRecord r;
  r.id = doc["id"].get<std::string>();
  r.sandbox_id = str(doc, "sandbox_id");
  if (doc.contains("template") && doc["template"].is_object()) r.template_name = str(doc["template"], "name");
  if (r.template_name.empty()) r.template_name = "base";
  r.vcpu = doc.value("vcpu", 1);
  r.memory_mib = doc.value("memory_mib", 512);
  r.disk_gib = doc.value("disk_gib", 1);
  r.env = string_map(doc.value("env", json::object()));
  r.secrets = string_map(secrets);
  read_grant_and_egress(doc, r);
  r.forkable = doc.value("forkable", false);
  r.size_bytes = doc.value("size_bytes", uint64_t{0});
  if (doc.contains("created_at") && doc["created_at"].is_string())
    r.created_ms = parse_rfc3339(doc["created_at"].get<std::string>()).value_or(0);
  r.rootfs = str(in, "rootfs");
  r.budget_id = str(in, "budget_id");
  return r;
}

}  // namespace b3os::store
