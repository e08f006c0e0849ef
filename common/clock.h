#pragma once
// Wall-clock and monotonic time helpers, and RFC 3339 formatting.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>
#include <string>

namespace b3os {

/// Milliseconds since the Unix epoch.
int64_t now_unix_ms();
/// Milliseconds of the steady clock (never goes back; for durations and deadlines).
int64_t steady_ms();
/// RFC 3339 UTC with milliseconds: "2026-11-30T03:46:25.123Z".
std::string format_rfc3339(int64_t unix_ms);
/// Parses what format_rfc3339 writes (UTC, "Z", optional fraction); nullopt otherwise.
std::optional<int64_t> parse_rfc3339(std::string_view text);

/// Measures phases of one operation for Server-Timing and `timing`.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  /// Milliseconds (fractional) since construction or the last reset.
  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace b3os
