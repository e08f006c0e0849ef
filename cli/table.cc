#include "cli/table.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace b3os::cli {

namespace {

// Timestamps above this are taken as milliseconds (1e11 seconds is the year 5138).
constexpr double kMillisThreshold = 1e11;

std::string pad(std::string_view s, size_t width) {
  std::string out(s);
  size_t w = display_width(s);
  if (w < width) out.append(width - w, ' ');
  return out;
}

bool ends_with_at(std::string_view key) { return key.ends_with("_at"); }

void flatten_into(const Json& v, const std::string& prefix,
                  std::vector<std::pair<std::string, std::string>>& out) {
  if (v.is_object() && !v.empty()) {
    for (const auto& [key, child] : v.items()) {
      flatten_into(child, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  std::string leaf = prefix.substr(prefix.rfind('.') == std::string::npos ? 0 : prefix.rfind('.') + 1);
  if (ends_with_at(leaf) && (v.is_number() || v.is_string())) {
    out.emplace_back(prefix, format_time(v));
  } else {
    out.emplace_back(prefix, format_cell(v));
  }
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<size_t> widths(headers_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], display_width(row[i]));
  };
  measure(headers_);
  for (const auto& row : rows_) measure(row);

  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 < row.size()) {
        line += pad(row[i], widths[i]);
        line += "  ";
      } else {
        line += row[i];
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

size_t display_width(std::string_view s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  }
  return n;
}

std::string format_epoch_ms(int64_t ms) {
  std::time_t secs = static_cast<std::time_t>(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr) return std::to_string(ms);
  char buf[32];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

std::string format_time(const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number()) {
    double d = v.get<double>();
    auto ms = static_cast<int64_t>(d >= kMillisThreshold || d <= -kMillisThreshold ? d : d * 1000);
    return format_epoch_ms(ms);
  }
  return format_cell(v);
}

std::string format_cell(const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    if (v.empty()) return "-";
    bool scalars = std::all_of(v.begin(), v.end(), [](const auto& e) { return e.is_primitive(); });
    if (!scalars) return v.dump();
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ",";
      out += e.is_string() ? e.get<std::string>() : e.dump();
    }
    return out;
  }
  if (v.is_object() && v.empty()) return "-";
  return v.dump();
}

std::string format_mode(const Json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    auto mode = v.get<int64_t>();
    if (mode < 0) return std::to_string(mode);
    char buf[24];
    std::snprintf(buf, sizeof buf, "%04llo", static_cast<unsigned long long>(mode));
    return buf;
  }
  return format_cell(v);
}

std::vector<std::pair<std::string, std::string>> flatten_object(
    const Json& obj, const std::vector<std::string>& skip) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!obj.is_object()) {
    out.emplace_back("value", format_cell(obj));
    return out;
  }
  for (const auto& [key, child] : obj.items()) {
    if (std::find(skip.begin(), skip.end(), key) != skip.end()) continue;
    flatten_into(child, key, out);
  }
  return out;
}

std::string render_key_values(const std::vector<std::pair<std::string, std::string>>& pairs) {
  size_t width = 0;
  for (const auto& [k, v] : pairs) width = std::max(width, display_width(k) + 1);
  std::string out;
  for (const auto& [k, v] : pairs) {
    out += pad(k + ":", width);
    out += ' ';
    out += v;
    out += '\n';
  }
  return out;
}

}  // namespace b3os::cli
