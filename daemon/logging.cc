#include "daemon/logging.h"

#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/request_id.h"

namespace b3os {

namespace {

int64_t unix_ms(spdlog::log_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

/// `%*` in the text pattern: " [req_...]" inside a request, nothing outside.
class RequestIdFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string& id = current_request_id();
    if (id.empty()) return;
    dest.append(std::string_view(" ["));
    dest.append(std::string_view(id));
    dest.push_back(']');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<RequestIdFlag>(); }
};

/// {"time": RFC 3339 UTC, "level", "msg", "request_id" (inside a request), "thread"}.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json j;
    j["time"] = format_rfc3339(unix_ms(msg.time));
    const auto level = spdlog::level::to_string_view(msg.level);
    j["level"] = std::string(level.data(), level.size());
    j["msg"] = std::string(msg.payload.data(), msg.payload.size());
    if (const std::string& id = current_request_id(); !id.empty()) j["request_id"] = id;
    j["thread"] = msg.thread_id;
    // Invalid UTF-8 in a message (a path a client sent) becomes U+FFFD: a line always parses.
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(std::string_view(line));
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

}  // namespace

bool set_log_format(const std::string& format) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
    return true;
  }
  if (format == "text") {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<RequestIdFlag>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$%* %v");
    spdlog::set_formatter(std::move(f));
    return true;
  }
  return false;
}

}  // namespace b3os
