#pragma once
// Timing: phase durations of one operation, for Server-Timing and the `timing` object.

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace b3os::sandbox {

struct Timing {
  std::vector<std::pair<std::string, double>> phases;
  void add(std::string name, double ms) { phases.emplace_back(std::move(name), ms); }
  /// Runs the stopwatch's lap into `name` and restarts it.
  void lap(std::string name, Stopwatch& sw) {
    add(std::move(name), sw.elapsed_ms());
    sw.reset();
  }
  double total() const {
    double t = 0;
    for (auto& [n, ms] : phases) t += ms;
    return t;
  }
};

/// How an operation ended, for its metrics: done, refused for the caller's request (a 4xx:
/// bad input, no such sandbox, a limit), or failed on the node's side (a 5xx).
enum class Outcome { kOk, kClientError, kError };
/// The outcome of an answer with this HTTP status.
Outcome outcome_of(int http_status);

/// Counts one finished operation (create, fork, exec, snapshot...) into the node's metrics:
/// b3os_operation_duration_seconds{operation, interface, outcome} and, for a success, each
/// phase into b3os_operation_phase_seconds{operation, phase}. `interface` is "rest" or "mcp";
/// `operation` and the phase names come from the code, never from a client.
void record_operation(std::string_view operation, std::string_view interface, const Timing& t, double total_ms,
                      Outcome outcome);

}  // namespace b3os::sandbox
