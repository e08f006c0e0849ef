#pragma once
// Timing: phase durations of one operation, for Server-Timing and the `timing` object.

#include <string>
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

}  // namespace b3os::sandbox
