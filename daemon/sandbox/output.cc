#include "daemon/sandbox/output.h"

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

std::string sse_event(std::string_view name, const json& data, std::optional<uint64_t> id) {
  std::string out;
  if (id) out += "id: " + std::to_string(*id) + "\n";
  out += "event: ";
  out += name;
  out += "\ndata: ";
  out += data.dump(-1, ' ', false, json::error_handler_t::replace);
  out += "\n\n";
  return out;
}

}  // namespace b3os::sandbox
