#pragma once
// The b3os subcommands: their options, the pure pieces that turn options into requests and
// replies into text (unit-tested), and the registration of each command with CLI11.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/args.h"
#include "cli/http_client.h"
#include "common/result.h"

namespace CLI {
class App;
}

namespace b3os::cli {

/// Options every command may use; flags override B3OS_API_URL / B3OS_API_KEY / B3OS_DATA_DIR.
struct GlobalOptions {
  std::string api_url = std::string(kDefaultApiUrl);
  std::string api_key;
  std::string data_dir = "/var/lib/b3os";
  std::string store;  // b3osd's --store (empty: DATA_DIR/b3os.db)
};

/// What the parsed command will do; returns the process exit status.
using Action = std::function<int()>;

/// Exit status when the command ran but failed (API error, connection refused, bad input).
inline constexpr int kExitFailure = 1;
/// Exit status of a usage error: CLI11's own (main.cc), and options that do not go together.
inline constexpr int kExitUsage = 2;
/// Exit status of `exec` when the command timed out (as timeout(1) does).
inline constexpr int kExitTimedOut = 124;

struct CreateOptions {
  std::optional<std::string> template_name;
  std::optional<std::string> snapshot;
  std::optional<int64_t> disk_gib;
  bool forkable = false;
  std::optional<std::string> egress;   // public | allowlist | deny
  std::vector<std::string> allow;      // allowlist entries
  std::vector<std::string> ports;      // PORT or PORT:public
  std::optional<int64_t> timeout_s;
  std::optional<int64_t> vcpu;
  std::optional<int64_t> memory_mib;
  std::vector<std::string> env;
  std::vector<std::string> secrets;
  std::vector<std::string> metadata;
  bool json = false;
};

struct ListOptions {
  std::optional<std::string> status;
  std::vector<std::string> metadata;
  std::optional<int64_t> limit;
  bool all = false;
  bool json = false;
};

struct ExecOptions {
  std::string id;
  std::vector<std::string> cmd;
  std::optional<int64_t> timeout_ms;
  std::optional<std::string> cwd;
  std::optional<std::string> user;
  std::vector<std::string> env;
  bool read_stdin = false;
  bool json = false;
};

/// The body of POST /v1/sandboxes; only options that were given are sent.
Result<Json> build_create_body(const CreateOptions& o);

/// The path and query of one page of GET /v1/sandboxes. With --all and no --limit, pages are
/// as large as the API allows.
Result<std::string> build_list_path(const ListOptions& o, const std::optional<std::string>& cursor);

/// The body of POST exec: one argument is sent as a string (run by /bin/sh -c), several as argv.
Result<Json> build_exec_body(const ExecOptions& o, const std::optional<std::string>& stdin_text);

/// The exit status `b3os exec` ends with: 124 if timed out, else the command's exit code
/// (negative codes, i.e. signals, become 128+signal; anything out of range becomes 255).
int exec_exit_status(const Json& reply);

/// Table of sandboxes: ID, STATUS, TEMPLATE, CREATED, EXPIRES.
std::string render_sandbox_table(const Json& sandboxes);
/// "key: value" lines of one sandbox, without `object` and `timing`.
std::string render_sandbox_details(const Json& sandbox);
/// Table of a directory listing: NAME, TYPE, SIZE, MODE, MODIFIED.
std::string render_file_table(const Json& entries);

/// Prints `doc` as indented JSON on stdout.
void print_json(const Json& doc);
/// Prints "error: <message>" on stderr and returns kExitFailure.
int report_error(const Error& e);
/// A client for the global options; fails on a malformed API URL.
Result<HttpClient> make_client(const GlobalOptions& g);
/// Sends a request and parses the JSON reply, adding a hint when the key is missing.
Result<Json> call_api(HttpClient& client, std::string_view method, const std::string& path,
                      const Json* body = nullptr);

/// A field of an API object as a table cell ("-" when absent or null).
std::string field(const Json& o, const char* k);
/// One request; the reply printed as JSON (--json) or by `human`. Exit 0, or the error's.
int simple(const GlobalOptions& g, std::string_view method, const std::string& path, const Json* body, bool json,
           const std::function<void(const Json&)>& human);

/// Registers create, list, get, rm/delete and exec (templates: cli/templates.h).
void add_sandbox_commands(CLI::App& app, const GlobalOptions& g, Action& action);
/// Registers upload, download, ls and rmfile.
void add_file_commands(CLI::App& app, const GlobalOptions& g, Action& action);
/// ps, start, kill, logs, attach, fork, pause, resume, snapshot (cli/process_commands.cc).
void add_process_commands(CLI::App& app, const GlobalOptions& g, Action& action);
/// watch, ports, url, egress (cli/sandbox_commands.cc).
void add_more_sandbox_commands(CLI::App& app, const GlobalOptions& g, Action& action);
/// `b3os completion bash|zsh`: a completion script made from the commands registered in `app`.
void add_completion_command(CLI::App& app, Action& action);
/// The completion script for `shell` ("bash" or "zsh") of `app`'s commands and options.
Result<std::string> completion_script(const CLI::App& app, const std::string& shell);
/// `b3os mcp`: the MCP tools over stdio, bridged to b3osd's /mcp (cli/mcp_bridge.cc).
void add_mcp_command(CLI::App& app, const GlobalOptions& g, Action& action);
/// Registers `keys create` and `keys list` (local store, no API).
void add_key_commands(CLI::App& app, GlobalOptions& g, Action& action);

/// `b3os status` (cli/status.cc).
void add_status_command(CLI::App& app, const GlobalOptions& g, Action& action);
/// One sample of the Prometheus text format: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
/// The samples of a /metrics answer (comments and malformed lines skipped).
std::vector<Sample> parse_metrics_text(std::string_view text);
/// What `b3os status` prints, from /healthz's status and the node's metrics.
std::string render_status(const std::string& api_url, const std::string& health, const std::vector<Sample>& m,
                          double now_unix_s);

}  // namespace b3os::cli
