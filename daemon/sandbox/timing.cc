#include "daemon/sandbox/timing.h"

#include "common/metrics.h"

namespace b3os::sandbox {

// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_total = metrics::metrics().histogram(
    "b3os_operation_duration_seconds",
    "time of a sandbox operation from its request to its answer, by operation, interface (rest, mcp) and outcome "
    "(ok; client_error: refused for the request, a 4xx; error: failed on the node, a 5xx)",
    {"operation", "interface", "outcome"});
static auto& m_phases = metrics::metrics().histogram(
    "b3os_operation_phase_seconds",
    "time of each phase of a successful sandbox operation (the phases of its Server-Timing), by operation and phase",
    {"operation", "phase"});

Outcome outcome_of(int http_status) {
  return http_status < 400 ? Outcome::kOk : http_status < 500 ? Outcome::kClientError : Outcome::kError;
}

void record_operation(std::string_view operation, std::string_view interface, const Timing& t, double total_ms,
                      Outcome outcome) {
  const std::string op(operation);
  const char* name = outcome == Outcome::kOk ? "ok" : outcome == Outcome::kClientError ? "client_error" : "error";
  m_total.with({op, std::string(interface), name}).observe(total_ms / 1000.0);
  if (outcome != Outcome::kOk) return;
  for (auto& [name, ms] : t.phases) m_phases.with({op, name}).observe(ms / 1000.0);
}

}  // namespace b3os::sandbox
