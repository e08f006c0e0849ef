#pragma once
// The records the store keeps, as typed structs. The store owns their shape (this is its
// schema); the sandbox module owns their behaviour (sandbox/state.h: which transitions are
// legal, and how the API object is built from a record).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/money.h"
#include "common/result.h"

namespace b3os::store {

/// Where a sandbox is in its life. Stored as its name (state_name). The API shows four of
/// them (running, paused, stopped, failed); the others are the moments between, held while
/// the runtime works, so that concurrent calls see a definite state instead of waiting on a
/// lock. A stop is recorded before the host resources are released (a crash mid-release leaves
/// a stopped record and orphans that the next start sweeps), so it needs no state between.
enum class State {
  kCreating,       // being launched; not yet visible
  kRunning,
  kPausing,        // runtime pause in progress (shown as running)
  kPaused,
  kResuming,       // runtime resume in progress (shown as paused)
  kCheckpointing,  // one or more forks or snapshots are saving it (shown as running)
  kStopped,
  kFailed,
};

std::string_view state_name(State s);
/// Where a state settles: the moments between become the state they show (pausing and
/// checkpointing are running, resuming is paused). It is what the API shows as `status` and
/// what the store keeps (a restart reconciles with the runtime instead of resuming a moment).
State settled(State s);
/// The state with this stored name; nullopt for an unknown one.
std::optional<State> state_from_name(std::string_view name);

/// Why a sandbox stopped.
enum class StopReason { kDeleted, kTimeout, kFailed };
std::string_view stop_reason_name(StopReason r);
std::optional<StopReason> stop_reason_from_name(std::string_view name);

struct PortRecord {
  int port = 0;
  bool is_public = false;
};

/// A minted preview URL's token (docs/ports.md): only its SHA-256 is kept, with what it opens
/// and until when. Public ports' tokens are derived, never stored.
struct PortTokenRecord {
  std::string token_sha256;  // lowercase hex
  std::string sandbox_id;
  int port = 0;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;
};

/// One version of a template: a build (from a JSON spec or an image) and, once ready, its
/// root filesystem under the templates directory (`artifact`). The template is every row with
/// its `template_id`; the newest ready version is what creates get. `doc` holds what only the
/// template module reads (the spec, the defaults for its sandboxes, the steps, the error).
struct TemplateBuildRecord {
  std::string id;           // bld_...
  std::string template_id;  // tpl_...: the same for every version of a template
  std::string project_id;   // "" for a node-wide template the operator published
  std::string name;
  int version = 1;
  std::string status = "queued";  // queued, building, ready, failed
  std::string content_hash;       // of the spec and its parent: identical builds share an artifact
  std::string artifact;           // directory name under the templates directory ("" until ready)
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0;
  std::optional<int64_t> deleted_ms;  // the template was deleted: hidden, its files kept while used
  nlohmann::json doc = nlohmann::json::object();
  /// The node that runs the build and holds its log (a shared store; "" in a single node's,
  /// and on a record this node is about to save as its own).
  std::string node_id;
};

/// One sandbox, as kept across restarts. Times are Unix milliseconds.
struct SandboxRecord {
  std::string id;          // sbx_...
  std::string project_id;  // prj_...
  State state = State::kCreating;
  std::string template_name = "base";
  std::optional<std::string> snapshot_id;  // the snapshot it was restored from
  int vcpu = 1;
  int memory_mib = 512;
  int disk_gib = 1;
  int timeout_s = 300;
  std::string on_idle = "stop";  // stop | pause
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> secrets;  // values never leave the daemon
  std::map<std::string, std::string> metadata;
  std::vector<PortRecord> ports;
  std::vector<std::string> api_scopes;
  std::optional<int64_t> spend_cap_micros;  // the grant's own cap (micro-dollars)
  std::string egress_mode = "deny";
  std::vector<std::string> egress_allow;
  bool forkable = false;
  /// Every port is served by its preview host without a token (a sandbox E2B's API created
  /// with public traffic, E2B's default; docs/e2b.md). Forks keep it.
  bool open_ports = false;

  int64_t created_ms = 0;
  int64_t started_ms = 0;
  std::optional<int64_t> paused_since_ms;  // set while paused
  int64_t paused_total_ms = 0;             // earlier pauses
  std::optional<int64_t> stopped_ms;
  std::optional<StopReason> stop_reason;
  std::string stop_message;  // why, in a sentence ("" when none)
  int64_t last_activity_ms = 0;

  std::string hostname;     // inside the sandbox
  std::string rootfs;       // the template's root filesystem on the host
  std::string budget_id;    // the model grant's budget ("" without infer:run)
  std::string forked_from;  // the source of a fork ("" otherwise)
  std::string template_id;  // tpl_... of a template users built ("" for base and the others on disk)
  /// The node that holds it, in a shared store (docs/cluster.md); "" in a single node's. The
  /// store sets it from the node that saves the record, and reads it back.
  std::string node_id;

  /// True once the sandbox is over (stopped or failed).
  bool ended() const { return state == State::kStopped || state == State::kFailed; }
};

/// One snapshot: what a later create restores. Its image lives on disk under its id.
struct SnapshotRecord {
  std::string id;          // snp_...
  std::string project_id;
  std::string sandbox_id;  // the sandbox it was taken of
  std::string template_name = "base";
  int vcpu = 1;
  int memory_mib = 512;
  int disk_gib = 1;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> secrets;
  std::vector<std::string> api_scopes;
  std::optional<int64_t> spend_cap_micros;
  std::string egress_mode = "deny";
  std::vector<std::string> egress_allow;
  bool forkable = false;
  uint64_t size_bytes = 0;
  int64_t created_ms = 0;
  std::string rootfs, budget_id;
  std::string template_id;  // as SandboxRecord::template_id
  std::string node_id;      // where its image was taken, in a shared store ("" in a single node's)
  /// The object-store root its image was taken against ("rootfs/FP"), in a cluster with an
  /// object store; what keeps that root from the collector ("" in a single node's).
  std::string object_root;
};

/// The record a release before typed columns kept as a JSON document (the sandbox object plus
/// private "_b3os" keys) and a JSON object of secrets. Used by the migration.
Result<SandboxRecord> sandbox_from_legacy(const nlohmann::json& doc, const nlohmann::json& secrets);
Result<SnapshotRecord> snapshot_from_legacy(const nlohmann::json& doc, const nlohmann::json& secrets);


}  // namespace b3os::store
