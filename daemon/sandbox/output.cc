#include "daemon/sandbox/output.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "daemon/sys/codec.h"

namespace b3os::sandbox {

using nlohmann::json;

bool textual(std::string_view bytes) {
  // Control characters JSON writes as \u00XX: six bytes each. Past one in 16, the chunk is
  // binary in all but name (a process writing \x01 bytes made an answer six times its output),
  // and base64 (4 for 3) is both smaller and what a reader of binary expects.
  size_t escaped = 0;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    escaped += c < 0x20 && c != '\n' && c != '\r' && c != '\t';
  }
  return escaped * 16 <= bytes.size() && sys::valid_utf8(bytes);
}

namespace {
json encode(const std::string& bytes) {
  if (textual(bytes)) return json{{"data", bytes}};
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

namespace {
void append_escaped(std::string& out, std::string_view s);
}  // namespace

bool OutputEncoder::append_event(std::string& out, bool is_stderr, std::string_view bytes) {
  std::string& carry = carry_[is_stderr ? 1 : 0];
  std::string joined;  // only when a character was cut at the end of the last chunk
  std::string_view all = bytes;
  if (!carry.empty()) {
    joined = carry;
    joined.append(bytes);
    carry.clear();
    all = joined;
  }
  const size_t tail = sys::utf8_incomplete_tail(all);
  std::string_view body = all.substr(0, all.size() - tail);
  bool text = textual(body);
  if (tail > 0) {
    if (text) carry.assign(all.substr(all.size() - tail));
    else body = all;  // not text before the cut either: all of it as base64
  }
  if (body.empty()) return false;
  out += is_stderr ? "event: stderr\ndata: {\"data\":" : "event: stdout\ndata: {\"data\":";
  if (text) {
    append_escaped(out, body);
    out += "}\n\n";
  } else {
    out += '"';
    out += sys::base64_encode(body);
    out += "\",\"encoding\":\"base64\"}\n\n";
  }
  return true;
}

std::optional<json> OutputEncoder::flush(bool is_stderr) {
  std::string& carry = carry_[is_stderr ? 1 : 0];
  if (carry.empty()) return std::nullopt;
  json j = encode(carry);
  carry.clear();
  return j;
}

namespace {

// How many bytes from `p` need no JSON escape (none below 0x20, no '"', no '\\'): 16 at a
// time with SSE2 (every x86-64 has it), else 8 at a time with bit tricks on a word.
size_t clean_run(const char* p, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1f);
  for (; i + 16 <= n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(v, ctl), v);  // v <= 0x1f, unsigned
    const __m128i hit = _mm_or_si128(low, _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, slash)));
    if (const int m = _mm_movemask_epi8(hit)) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(m)));
  }
#else
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    const uint64_t quote = w ^ (kOnes * '"'), slash = w ^ (kOnes * '\\');
    const uint64_t hit = ((w - kOnes * 0x20) & ~w) | ((quote - kOnes) & ~quote) | ((slash - kOnes) & ~slash);
    if (hit & kHigh) break;
  }
#endif
  for (; i < n; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c < 0x20 || c == '"' || c == '\\') return i;
  }
  return n;
}

// A string that is valid UTF-8, as JSON: runs of bytes that need no escape are copied whole.
// nlohmann's dump decodes every byte through its UTF-8 state machine, which made it half of
// b3osd's time when a command streams output fast (docs/benchmarks.md, "Living in a sandbox").
void append_escaped(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + s.size() / 32 + 2);
  out += '"';
  for (size_t i = 0;;) {
    const size_t k = clean_run(s.data() + i, s.size() - i);
    out.append(s.data() + i, k);
    i += k;
    if (i >= s.size()) break;
    const auto c = static_cast<unsigned char>(s[i++]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: {
        const char u[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out.append(u, 6);
      }
    }
  }
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
