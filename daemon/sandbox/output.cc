#include "daemon/sandbox/output.h"

#include <cstdint>
#include <cstring>

#include "daemon/sys/codec.h"

namespace b3os::sandbox {

using nlohmann::json;

namespace {
json encode(const std::string& bytes) {
  if (sys::valid_utf8(bytes)) return json{{"data", bytes}};
  return json{{"data", sys::base64_encode(bytes)}, {"encoding", "base64"}};
}
}  // namespace

std::optional<json> OutputEncoder::chunk(bool is_stderr, std::string_view bytes) {
  std::string& carry = carry_[is_stderr ? 1 : 0];
  std::string all = carry + std::string(bytes);
  carry.clear();
  const size_t tail = sys::utf8_incomplete_tail(all);
  if (tail > 0 && sys::valid_utf8(std::string_view(all).substr(0, all.size() - tail))) {
    carry = all.substr(all.size() - tail);
    all.resize(all.size() - tail);
  }
  if (all.empty()) return std::nullopt;
  return encode(all);
}

std::optional<json> OutputEncoder::flush(bool is_stderr) {
  std::string& carry = carry_[is_stderr ? 1 : 0];
  if (carry.empty()) return std::nullopt;
  json j = encode(carry);
  carry.clear();
  return j;
}

namespace {

// A string that is valid UTF-8, as JSON: runs of bytes that need no escape are copied whole.
// nlohmann's dump decodes every byte through its UTF-8 state machine, which made it half of
// b3osd's time when a command streams output fast (docs/benchmarks.md, "Living in a sandbox").
void append_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out += '"';
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    // Eight bytes at a time while none is below 0x20, '"' or '\\' (bit tricks on a word).
    constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
    uint64_t w;
    while (i + 8 <= s.size()) {
      std::memcpy(&w, s.data() + i, 8);
      const uint64_t quote = w ^ (kOnes * '"'), slash = w ^ (kOnes * '\\');
      const uint64_t hit = ((w - kOnes * 0x20) & ~w) | ((quote - kOnes) & ~quote) | ((slash - kOnes) & ~slash);
      if (hit & kHigh) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 15];
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

// What json::dump(-1, ' ', false, replace) writes, the same bytes, with strings that are
// valid UTF-8 escaped by append_escaped (others, and scalars, by nlohmann).
void append_json(std::string& out, const json& j) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ',';
      first = false;
      append_json(out, json(k));
      out += ':';
      append_json(out, v);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ',';
      append_json(out, j[i]);
    }
    out += ']';
  } else if (j.is_string() && sys::valid_utf8(j.get_ref<const std::string&>())) {
    append_escaped(out, j.get_ref<const std::string&>());
  } else {
    out += j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

}  // namespace

std::string json_text(const json& j) {
  std::string out;
  append_json(out, j);
  return out;
}

std::string sse_event(std::string_view name, const json& data, std::optional<uint64_t> id) {
  std::string out;
  if (id) out += "id: " + std::to_string(*id) + "\n";
  out += "event: ";
  out += name;
  out += "\ndata: ";
  append_json(out, data);
  out += "\n\n";
  return out;
}

}  // namespace b3os::sandbox
