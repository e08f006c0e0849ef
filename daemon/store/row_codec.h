#pragma once
// How sandbox, snapshot and template-build records map to table rows, shared by the SQLite
// and Postgres stores: the same columns in the same order. `Binder` has bind(i, text|int64)
// and bind_null(i) (1-based); `Row` has text(col), i64(col) and is_null(col) (0-based).
// Maps and lists are JSON text in their own columns.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/store/records.h"

namespace b3os::store::codec {

constexpr const char* kSandboxColumnsV3 =
    "id, project_id, state, template, snapshot_id, vcpu, memory_mib, disk_gib, timeout_s, on_idle, env, secrets, "
    "metadata, ports, api_scopes, spend_cap_micros, egress_mode, egress_allow, forkable, created_ms, started_ms, "
    "paused_since_ms, paused_total_ms, stopped_ms, stop_reason, stop_message, last_activity_ms, hostname, rootfs, "
    "budget_id, forked_from";
#define B3OS_V6_COLUMNS ", template_id"
constexpr const char* kSnapshotColumnsV3 =
    "id, project_id, sandbox_id, template, vcpu, memory_mib, disk_gib, env, secrets, api_scopes, spend_cap_micros, "
    "egress_mode, egress_allow, forkable, size_bytes, created_ms, rootfs, budget_id";

// Version 6 added template_id to both, version 7 (Postgres: 5) open_ports to sandboxes (the
// migration to version 3 wrote the columns before them; binding the record's extra last
// columns there is out of range and ignored).
const std::string kSandboxColumnsNow = std::string(kSandboxColumnsV3) + B3OS_V6_COLUMNS + ", open_ports";
const std::string kSnapshotColumnsNow = std::string(kSnapshotColumnsV3) + B3OS_V6_COLUMNS;
#undef B3OS_V6_COLUMNS
const char* const kSandboxColumns = kSandboxColumnsNow.c_str();

// Ended sandboxes' records (both stores; SQLite runs them with ?N for $N).
// Each reads an index by state and stopped_ms (sandboxes_ended_at; sandboxes_ended with the
// project first: schema version 8 in SQLite, 6 in Postgres).
// Those that ended before $1, at most $2.
constexpr const char* kForgetEndedBeforeSql =
    "DELETE FROM sandboxes WHERE id IN (SELECT id FROM sandboxes WHERE state IN ('stopped', 'failed') "
    "AND stopped_ms < $1 LIMIT $2)";
// Project $1's past its $2 newest ended ones (ended last first, a record with no end time as the
// oldest, ids breaking ties), at most $3.
constexpr const char* kForgetEndedPastSql =
    "DELETE FROM sandboxes WHERE id IN (SELECT id FROM sandboxes WHERE project_id = $1 AND state IN "
    "('stopped', 'failed') ORDER BY COALESCE(stopped_ms, 0) DESC, id DESC LIMIT $3 OFFSET $2)";
constexpr const char* kEndedProjectsSql =
    "SELECT DISTINCT project_id FROM sandboxes WHERE state IN ('stopped', 'failed')";
const char* const kSnapshotColumns = kSnapshotColumnsNow.c_str();

inline std::string placeholders(const char* columns) {
  std::string out = "?";
  for (const char* c = columns; *c; ++c)
    if (*c == ',') out += ", ?";
  return out;
}

template <typename Binder>
void bind_opt(Binder& st, int i, const std::optional<int64_t>& v) {
  if (v) st.bind(i, *v); else st.bind_null(i);
}

inline std::string ports_json(const std::vector<PortRecord>& ports) {
  nlohmann::json j = nlohmann::json::array();
  for (auto& p : ports) j.push_back({{"port", p.port}, {"public", p.is_public}});
  return j.dump();
}

template <typename Binder>
void bind_sandbox(Binder& st, const SandboxRecord& r) {
  int i = 0;
  st.bind(++i, r.id).bind(++i, r.project_id).bind(++i, state_name(settled(r.state))).bind(++i, r.template_name);
  if (r.snapshot_id) st.bind(++i, *r.snapshot_id); else st.bind_null(++i);
  st.bind(++i, int64_t{r.vcpu}).bind(++i, int64_t{r.memory_mib}).bind(++i, int64_t{r.disk_gib});
  st.bind(++i, int64_t{r.timeout_s}).bind(++i, r.on_idle);
  // An ended sandbox keeps no env or secret values (docs/api.md): nothing runs with them
  // again, and its record is kept for days, up to 10,000 a project.
  const bool ended = r.ended();
  st.bind(++i, ended ? std::string("{}") : nlohmann::json(r.env).dump())
      .bind(++i, ended ? std::string("{}") : nlohmann::json(r.secrets).dump());
  st.bind(++i, nlohmann::json(r.metadata).dump()).bind(++i, ports_json(r.ports));
  st.bind(++i, nlohmann::json(r.api_scopes).dump());
  bind_opt(st, ++i, r.spend_cap_micros);
  st.bind(++i, r.egress_mode).bind(++i, nlohmann::json(r.egress_allow).dump()).bind(++i, int64_t{r.forkable});
  st.bind(++i, r.created_ms).bind(++i, r.started_ms);
  bind_opt(st, ++i, r.paused_since_ms);
  st.bind(++i, r.paused_total_ms);
  bind_opt(st, ++i, r.stopped_ms);
  if (r.stop_reason) st.bind(++i, stop_reason_name(*r.stop_reason)); else st.bind_null(++i);
  st.bind(++i, r.stop_message).bind(++i, r.last_activity_ms).bind(++i, r.hostname).bind(++i, r.rootfs);
  st.bind(++i, r.budget_id).bind(++i, r.forked_from).bind(++i, r.template_id).bind(++i, int64_t{r.open_ports});
}

template <typename T>
bool parse_into(const std::string& text, T& out) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return false;
  try {
    out = j.get<T>();
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

template <typename Row>
std::optional<int64_t> opt_i64(Row& st, int col) {
  if (st.is_null(col)) return std::nullopt;
  return st.i64(col);
}

template <typename Row>
Result<SandboxRecord> sandbox_from(Row& st) {
  SandboxRecord r;
  int c = 0;
  r.id = st.text(c++);
  r.project_id = st.text(c++);
  auto corrupt = [&](const char* what) {
    return fail(ErrorCode::kInternal, "store: sandbox " + r.id + " has a corrupt record (" + what + ")");
  };
  auto state = state_from_name(st.text(c++));
  if (!state) return corrupt("state");
  r.state = *state;
  r.template_name = st.text(c++);
  if (!st.is_null(c)) r.snapshot_id = st.text(c);
  ++c;
  r.vcpu = static_cast<int>(st.i64(c++));
  r.memory_mib = static_cast<int>(st.i64(c++));
  r.disk_gib = static_cast<int>(st.i64(c++));
  r.timeout_s = static_cast<int>(st.i64(c++));
  r.on_idle = st.text(c++);
  if (!parse_into(st.text(c++), r.env) || !parse_into(st.text(c++), r.secrets) || !parse_into(st.text(c++), r.metadata))
    return corrupt("env, secrets or metadata");
  auto ports = nlohmann::json::parse(st.text(c++), nullptr, false);
  if (!ports.is_array()) return corrupt("ports");
  for (auto& p : ports)
    if (p.is_object()) r.ports.push_back({p.value("port", 0), p.value("public", false)});
  if (!parse_into(st.text(c++), r.api_scopes)) return corrupt("api_scopes");
  r.spend_cap_micros = opt_i64(st, c++);
  r.egress_mode = st.text(c++);
  if (!parse_into(st.text(c++), r.egress_allow)) return corrupt("egress_allow");
  r.forkable = st.i64(c++) != 0;
  r.created_ms = st.i64(c++);
  r.started_ms = st.i64(c++);
  r.paused_since_ms = opt_i64(st, c++);
  r.paused_total_ms = st.i64(c++);
  r.stopped_ms = opt_i64(st, c++);
  if (!st.is_null(c)) r.stop_reason = stop_reason_from_name(st.text(c));
  ++c;
  r.stop_message = st.text(c++);
  r.last_activity_ms = st.i64(c++);
  r.hostname = st.text(c++);
  r.rootfs = st.text(c++);
  r.budget_id = st.text(c++);
  r.forked_from = st.text(c++);
  r.template_id = st.text(c++);
  r.open_ports = st.i64(c++) != 0;
  return r;
}

template <typename Binder>
void bind_snapshot(Binder& st, const SnapshotRecord& r) {
  int i = 0;
  st.bind(++i, r.id).bind(++i, r.project_id).bind(++i, r.sandbox_id).bind(++i, r.template_name);
  st.bind(++i, int64_t{r.vcpu}).bind(++i, int64_t{r.memory_mib}).bind(++i, int64_t{r.disk_gib});
  st.bind(++i, nlohmann::json(r.env).dump()).bind(++i, nlohmann::json(r.secrets).dump());
  st.bind(++i, nlohmann::json(r.api_scopes).dump());
  bind_opt(st, ++i, r.spend_cap_micros);
  st.bind(++i, r.egress_mode).bind(++i, nlohmann::json(r.egress_allow).dump()).bind(++i, int64_t{r.forkable});
  st.bind(++i, static_cast<int64_t>(r.size_bytes)).bind(++i, r.created_ms).bind(++i, r.rootfs).bind(++i, r.budget_id);
  st.bind(++i, r.template_id);
}

template <typename Row>
Result<SnapshotRecord> snapshot_from(Row& st) {
  SnapshotRecord r;
  int c = 0;
  r.id = st.text(c++);
  r.project_id = st.text(c++);
  r.sandbox_id = st.text(c++);
  r.template_name = st.text(c++);
  r.vcpu = static_cast<int>(st.i64(c++));
  r.memory_mib = static_cast<int>(st.i64(c++));
  r.disk_gib = static_cast<int>(st.i64(c++));
  if (!parse_into(st.text(c++), r.env) || !parse_into(st.text(c++), r.secrets) ||
      !parse_into(st.text(c++), r.api_scopes))
    return fail(ErrorCode::kInternal, "store: snapshot " + r.id + " has a corrupt record");
  r.spend_cap_micros = opt_i64(st, c++);
  r.egress_mode = st.text(c++);
  if (!parse_into(st.text(c++), r.egress_allow))
    return fail(ErrorCode::kInternal, "store: snapshot " + r.id + " has a corrupt record");
  r.forkable = st.i64(c++) != 0;
  r.size_bytes = static_cast<uint64_t>(st.i64(c++));
  r.created_ms = st.i64(c++);
  r.rootfs = st.text(c++);
  r.budget_id = st.text(c++);
  r.template_id = st.text(c++);
  return r;
}

constexpr const char* kBuildColumns =
    "id, template_id, project_id, name, version, status, content_hash, artifact, created_ms, started_ms, "
    "finished_ms, deleted_ms, doc";

template <typename Row>
Result<TemplateBuildRecord> build_from(Row& st) {
  TemplateBuildRecord r;
  r.id = st.text(0);
  r.template_id = st.text(1);
  r.project_id = st.text(2);
  r.name = st.text(3);
  r.version = static_cast<int>(st.i64(4));
  r.status = st.text(5);
  r.content_hash = st.text(6);
  r.artifact = st.text(7);
  r.created_ms = st.i64(8);
  r.started_ms = st.i64(9);
  r.finished_ms = st.i64(10);
  if (!st.is_null(11)) r.deleted_ms = st.i64(11);
  r.doc = nlohmann::json::parse(st.text(12), nullptr, false);
  if (r.doc.is_discarded() || !r.doc.is_object()) return fail(ErrorCode::kInternal, "template build " + r.id + ": unreadable document");
  return r;
}

}  // namespace b3os::store::codec
