#pragma once
// Server-sent events as the CLI reads them (a streamed exec, followed process output): a
// parser fed the body as it arrives, and the decoding of an output chunk's bytes.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace b3os::cli {

class SseParser {
 public:
  using Handler = std::function<void(const std::string& event, const std::string& data, const std::string& id)>;
  /// Takes the next bytes of the body; calls `on_event` for each event completed by them.
  void feed(std::string_view bytes, const Handler& on_event);

 private:
  std::string buf_;
};

/// The bytes of an output chunk {"data", "encoding"?}: base64 decoded where it says so.
Result<std::string> chunk_bytes(const std::string& data, bool base64);

/// Writes a `stdout` or `stderr` event's chunk (its parsed data) to the CLI's own stdout or
/// stderr, flushed; false for another event.
bool write_output_event(const std::string& event, const nlohmann::json& chunk);

}  // namespace b3os::cli
