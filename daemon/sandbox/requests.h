#pragma once
// The command layer: each operation's request as a plain struct, parsed and validated once,
// from JSON arguments (a REST body, or an MCP tool's arguments) or from query parameters.
// Pure (no I/O); the REST handlers and the MCP tools call the same parsers. Create and exec
// are in spec.h (SandboxSpec, ExecSpec).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/sandbox/spec.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// Query parameters as they came (name, value), in order.
using Params = std::vector<std::pair<std::string, std::string>>;

inline constexpr int kMaxForkCount = 16;

/// POST /v1/sandboxes/{id}/fork.
struct ForkRequest {
  int count = 1;
  std::optional<std::map<std::string, std::string>> metadata;  // replaces the source's
};
Result<ForkRequest> parse_fork(const nlohmann::json& body);

/// POST /v1/sandboxes/{id}/ports/{port}/url: a preview URL that expires (docs/ports.md).
struct PortUrlRequest {
  int port = 0;
  int ttl_s = 3600;
};
/// `port`: the path segment (1-65535); the body's `ttl_s` 1 to 604800 (7 days).
Result<PortUrlRequest> parse_port_url(const std::string& port, const nlohmann::json& body);

/// PATCH /v1/sandboxes/{id}: what may change on a live sandbox. Today its egress, between
/// public and allowlist and between allow lists (deny is fixed at create: no network).
struct UpdateRequest {
  std::optional<EgressSpec> egress;
};
Result<UpdateRequest> parse_update(const nlohmann::json& body);

/// GET /v1/sandboxes: a page, newest first, filtered by status and metadata.
Result<store::SandboxQuery> parse_list_sandboxes(const Params& params);

/// GET /v1/snapshots.
struct ListSnapshotsRequest {
  std::optional<std::string> cursor;
  int limit = 20;
};
Result<ListSnapshotsRequest> parse_list_snapshots(const Params& params);

/// A path inside a sandbox (files routes), resolved against /workspace; `recursive` for removals.
struct FileRequest {
  std::string path;
  bool recursive = false;
};
/// `path` is required; `recursive` (true|false) only where `allow_recursive`.
Result<FileRequest> parse_file_request(const Params& params, bool allow_recursive);

}  // namespace b3os::sandbox
