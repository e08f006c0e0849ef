#include "cli/events.h"

#include <openssl/evp.h>

#include <cstdio>

namespace b3os::cli {

void SseParser::feed(std::string_view bytes, const Handler& on_event) {
  buf_.append(bytes);
  for (;;) {
    // An event ends at a blank line ("\n\n"; b3osd never sends "\r").
    const size_t end = buf_.find("\n\n");
    if (end == std::string::npos) return;
    std::string event = "message", data, id;
    size_t i = 0;
    while (i < end) {
      size_t j = buf_.find('\n', i);
      if (j == std::string::npos || j > end) j = end;
      std::string_view line(buf_.data() + i, j - i);
      const size_t colon = line.find(':');
      std::string_view field = line.substr(0, colon);
      std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (field == "event") event = value;
      else if (field == "id") id = value;
      else if (field == "data") data += (data.empty() ? "" : "\n") + std::string(value);
      i = j + 1;
    }
    buf_.erase(0, end + 2);
    if (!data.empty()) on_event(event, data, id);
  }
}

bool write_output_event(const std::string& event, const nlohmann::json& chunk) {
  if (event != "stdout" && event != "stderr") return false;
  auto bytes = chunk_bytes(chunk.value("data", ""), chunk.value("encoding", "") == "base64");
  if (!bytes) return true;
  std::FILE* f = event == "stdout" ? stdout : stderr;
  std::fwrite(bytes->data(), 1, bytes->size(), f);
  std::fflush(f);
  return true;
}

Result<std::string> chunk_bytes(const std::string& data, bool base64) {
  if (!base64) return data;
  if (data.size() % 4 != 0) return fail(ErrorCode::kInvalidRequest, "a base64 chunk of b3osd is malformed");
  std::string out(data.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  if (n < 0) return fail(ErrorCode::kInvalidRequest, "a base64 chunk of b3osd is malformed");
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the padding's bytes as zeros: take them off.
  if (!data.empty() && data.back() == '=') --len;
  if (data.size() >= 2 && data[data.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

}  // namespace b3os::cli
