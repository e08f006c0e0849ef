#pragma once
// b3osd's log lines: text for a person (`--log-format text`, the default) or one JSON object
// per line for a collector (`--log-format json`). Either way a line caused by an API request
// names its id, the X-Request-Id of the request's answer (common/request_id.h).

#include <string>

namespace b3os {

/// Sets spdlog's default logger's format: "text" or "json". False for any other name.
bool set_log_format(const std::string& format);

}  // namespace b3os
