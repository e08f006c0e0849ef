#pragma once
// Parsing of request targets ("/v1/sandboxes?limit=5&metadata[team]=a"): pure, fuzzed.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "daemon/sys/codec.h"

namespace b3os::api {

struct Target {
  std::string path;                   // decoded, e.g. "/v1/sandboxes/sbx_x/files"
  std::vector<std::string> segments;  // {"v1", "sandboxes", "sbx_x", "files"}
  std::multimap<std::string, std::string> query;

  /// The first value of a query parameter.
  std::optional<std::string> param(const std::string& name) const;
};

using sys::percent_decode;
/// Splits and decodes a request target.
Result<Target> parse_target(std::string_view target);

}  // namespace b3os::api
