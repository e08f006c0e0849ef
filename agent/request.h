#pragma once
// Request parsing and reply encoding shared by the stream handlers: typed access to the JSON
// fields of an OPEN, and errors in the shape the channel's END and IDENTITY_ACK carry.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::agent {

using Json = nlohmann::json;

/// Parses an OPEN (or IDENTITY) payload; malformed JSON or a non-object is invalid_request.
Result<Json> parse_request(std::string_view payload);

/// A string field; absent gives `def` (or invalid_request when `def` is nullopt).
Result<std::string> get_string(const Json& req, const char* key,
                               std::optional<std::string> def = std::nullopt);
/// A boolean field; absent or null gives `def`.
Result<bool> get_bool(const Json& req, const char* key, bool def);
/// A non-negative integer field; absent or null gives `def`.
Result<uint64_t> get_u64(const Json& req, const char* key, uint64_t def);
/// The request's `path`: required, absolute and free of NUL bytes.
Result<std::string> get_path(const Json& req);

/// Serialises JSON; invalid UTF-8 (file names may be any bytes) is replaced, never thrown.
std::string dump_json(const Json& j);
/// The error object of a failed reply: {"ok":false,"error":{"code","message","errno"}}.
Json error_json(const Error& e);

}  // namespace b3os::agent
