#pragma once
// How command output is written in the API's events and answers (docs/api.md, "Output
// chunks"): a chunk is {"data": text} when its bytes are text (textual()), else {"data": base64,
// "encoding": "base64"}, so bytes come out exact either way. A UTF-8 character cut between two
// chunks of one stream is carried to the next chunk rather than making both base64.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace b3os::sandbox {

/// True when `bytes` go out as text: valid UTF-8, with at most one byte in 16 a control
/// character other than tab, newline and carriage return (each of those costs six bytes of
/// JSON). Otherwise a chunk is base64.
bool textual(std::string_view bytes);

class OutputEncoder {
 public:
  /// The chunk for these bytes of stdout or stderr (nullopt when all of them are carried).
  std::optional<nlohmann::json> chunk(bool is_stderr, std::string_view bytes);
  /// What is still carried of that stream (bytes that never became a character), as base64.
  std::optional<nlohmann::json> flush(bool is_stderr);
  /// The server-sent event of these bytes, "event: stdout|stderr\ndata: CHUNK\n\n", appended to
  /// `out`: the same bytes as sse_event(name, *chunk(...)), written without building the JSON
  /// (one UTF-8 check and one escaping pass over the bytes: a fast command's stream costs b3osd
  /// little more than the copy). False, and nothing appended, when every byte was carried.
  bool append_event(std::string& out, bool is_stderr, std::string_view bytes);
  /// How many bytes of that stream are carried (0-3).
  size_t carried(bool is_stderr) const { return carry_[is_stderr ? 1 : 0].size(); }

 private:
  std::string carry_[2];
};

/// `j` as json::dump(-1, ' ', false, replace) writes it, faster for long UTF-8 strings.
std::string json_text(const nlohmann::json& j);

/// One server-sent event: "event: NAME\ndata: JSON\n\n" (with "id: N" first when given).
std::string sse_event(std::string_view name, const nlohmann::json& data, std::optional<uint64_t> id = std::nullopt);

}  // namespace b3os::sandbox
