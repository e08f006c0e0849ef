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

/// PATCH /v1/sandboxes/{id}: what may change on a live sandbox: its egress, between public
/// and allowlist and between allow lists (deny is fixed at create: no network), and its
/// timeout_s (counted again from now).
struct UpdateRequest {
  std::optional<EgressSpec> egress;
  std::optional<int> timeout_s;
};
Result<UpdateRequest> parse_update(const nlohmann::json& body, int max_timeout_s = 86400);

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

/// The page a files/list asks for: `cursor` (a next_cursor: the last name of the page before,
/// in hex) and `limit` (1-1000, default 1000).
struct ListPage {
  std::string after;
  int limit = 1000;
};
Result<ListPage> parse_list_page(const Params& params);

/// The {proc} of a process route: "proc_N" or a pid; anything else is 404 process_not_found.
bool valid_process_key(const std::string& key);

/// GET /v1/sandboxes/{id}/pty: ?rows=24&cols=80&term=xterm-256color&cmd=...&cwd=...&user=...
Result<TerminalSpec> parse_terminal(const Params& params);

/// POST .../processes/{proc}/signal: {"signal": "TERM" | "SIGTERM" | 15, "group": true}.
struct SignalRequest {
  int signal = 15;
  bool group = true;  // the process group (the command and what it started), else the process
};
Result<SignalRequest> parse_signal(const nlohmann::json& body);

/// POST .../processes/{proc}/stdin: {"data": "...", "encoding": "base64", "eof": false}.
struct StdinRequest {
  std::string data;
  bool eof = false;
};
inline constexpr size_t kMaxStdinRequest = 1u << 20;
Result<StdinRequest> parse_stdin(const nlohmann::json& body);

/// POST .../processes/{proc}/wait: {"timeout_ms": 30000} (1 to 3,600,000).
Result<int64_t> parse_wait(const nlohmann::json& body);

/// GET .../processes/{proc}/output?since=N&follow=true&timeout_ms=T; a Last-Event-ID (an SSE
/// client that reconnects) stands for `since` when that is not given.
struct OutputRequest {
  uint64_t since = 0;
  bool follow = false;
  int64_t timeout_ms = 3'600'000;  // how long a follow may last before it ends (resume at `next`)
};
Result<OutputRequest> parse_output_request(const Params& params, const std::string& last_event_id);

/// GET /v1/sandboxes/{id}/files/watch?path=...&recursive=true&timeout_ms=T.
struct WatchRequest {
  std::string path;
  bool recursive = false;
  int64_t timeout_ms = 3'600'000;  // how long a watch lasts before it ends (open another)
};
Result<WatchRequest> parse_watch_request(const Params& params);

}  // namespace b3os::sandbox
