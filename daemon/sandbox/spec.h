#pragma once
// What a user asks for, as plain structs, and the validation that turns request JSON into
// them. Pure logic: no I/O (unit-tested and fuzzed).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace b3os::sandbox {

struct EgressSpec {
  std::string mode = "deny";  // public | allowlist | deny
  std::vector<std::string> allow;
};

struct ApiGrantSpec {
  std::vector<std::string> scopes;
  std::optional<double> spend_cap_usd;
};

struct PortSpec {
  int port = 0;
  bool is_public = false;
};

/// The create fields of the sandbox object.
struct SandboxSpec {
  std::string template_name = "base";
  std::optional<std::string> snapshot;
  int timeout_s = 300;
  std::string on_idle = "stop";
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> secrets;
  std::map<std::string, std::string> metadata;
  int vcpu = 1;
  int memory_mib = 512;
  int disk_gib = 1;
  /// Which sizes the request gave: the others may come from the template's defaults.
  bool vcpu_given = false, memory_given = false, disk_given = false;
  bool forkable = false;
  /// Every port served without a token: not a field of b3os's create, set by E2B's (its
  /// public traffic, docs/e2b.md).
  bool open_ports = false;
  EgressSpec egress;
  ApiGrantSpec api;
  std::vector<PortSpec> ports;
};

/// Limits a deployment places on create fields.
struct SpecLimits {
  int max_vcpu = 8;
  int max_memory_mib = 65536;
  int max_disk_gib = 256;
  int max_timeout_s = 86400;
};

/// An exec request.
struct ExecSpec {
  std::vector<std::string> argv;  // a string cmd becomes {"/bin/sh", "-c", cmd}
  std::map<std::string, std::string> env;
  std::string cwd = "/workspace";
  bool cwd_given = false;  // else a template's workdir may stand in
  int64_t timeout_ms = 60000;
  std::optional<std::string> stdin_data;
  std::string user;  // a name in the sandbox's /etc/passwd, "UID" or "UID:GID"; empty: root
  bool stream = false;  // the output is streamed as it comes (server-sent events), not kept
};

/// A background process to start (POST /v1/sandboxes/{id}/processes): the command as exec
/// takes it, whether its stdin stays open for writes, a tag, and its output ring's size.
struct ProcessSpec {
  ExecSpec cmd;
  bool stdin_open = false;
  std::string tag;
  uint64_t output_bytes = 1u << 20;
  /// On a terminal of (rows, cols): its output is stdout, its stdin what is typed, and it can
  /// be resized (Exec::resize_process). E2B's PTY API runs its shells so (docs/e2b.md).
  std::optional<std::pair<int, int>> pty;
};
inline constexpr uint64_t kMaxProcessOutputBytes = 64ull << 20;

/// A terminal to open (GET /v1/sandboxes/{id}/pty): the program (a login shell when `cmd`
/// gives none), its size and TERM.
struct TerminalSpec {
  ExecSpec cmd;  // argv empty: the default shell
  int rows = 24;
  int cols = 80;
  std::string term = "xterm-256color";
};

/// Validates a create body; errors are 400 invalid_request naming the field.
Result<SandboxSpec> parse_create(const nlohmann::json& body, const SpecLimits& limits);
/// Returns 501 not_implemented if the spec needs a feature this build does not have yet.
Result<void> check_supported(const SandboxSpec& spec);
/// The `egress` object (create, and PATCH of a running sandbox): mode, and the allow list
/// checked entry by entry (net/policy.h).
Result<EgressSpec> parse_egress(const nlohmann::json& j);
/// An `env` object: names [A-Za-z_][A-Za-z0-9_]*, string values, bounded (errors name `field`).
Result<std::map<std::string, std::string>> parse_env_object(const nlohmann::json& j, const std::string& field);
/// Validates an exec body. `user` is checked for form only (1-32 of `A-Z a-z 0-9 _ . -`, not
/// starting with `-`, or UID[:GID]); whether the sandbox knows the name is the agent's to say.
Result<ExecSpec> parse_exec(const nlohmann::json& body);
/// Validates a process start body: exec's `cmd`, `env`, `cwd`, `user`, and `stdin` (bool),
/// `tag` (at most 128 printable characters), `output_bytes` (4096 to 64 MiB; default given).
Result<ProcessSpec> parse_process(const nlohmann::json& body, uint64_t default_output_bytes);
/// Validates metadata rules (used by create and fork): up to 16 pairs, keys 1-40 of
/// `A-Z a-z 0-9 _ . : -`, values strings of at most 500 characters.
Result<std::map<std::string, std::string>> parse_metadata(const nlohmann::json& j, const std::string& field);
/// Resolves a file path from the API: absolute, or relative to /workspace; no NUL, no "..".
Result<std::string> resolve_path(const std::string& path);

}  // namespace b3os::sandbox
