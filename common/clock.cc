#include "common/clock.h"

#include <cstdio>
#include <ctime>

namespace b3os {

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t now_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string format_rfc3339(int64_t unix_ms) {
  std::time_t secs = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(unix_ms % 1000));
  return buf;
}

std::optional<int64_t> parse_rfc3339(std::string_view text) {
  std::tm tm{};
  int ms = 0;
  char rest[8] = {};
  const std::string t(text.substr(0, 40));
  int n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d%7s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                      &tm.tm_min, &tm.tm_sec, &ms, rest);
  if (n != 8) {
    ms = 0;
    n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%7s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                    &tm.tm_sec, rest);
    if (n != 7) return std::nullopt;
  }
  if (std::string_view(rest) != "Z") return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  if (secs == -1) return std::nullopt;
  return int64_t(secs) * 1000 + ms;
}

}  // namespace b3os
