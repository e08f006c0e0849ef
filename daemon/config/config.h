#pragma once
// b3osd's configuration: embedded defaults, overridden by flags (see docs/configuration.md).

#include <cstdint>
#include <string>

#include "daemon/runtime/runsc.h"
#include "daemon/sandbox/spec.h"

namespace b3os::config {

struct Config {
  std::string listen_host = "127.0.0.1";
  int listen_port = 7070;
  std::string data_dir = "/var/lib/b3os";       // b3os.db, templates/
  std::string run_dir = "/run/b3os";            // per-sandbox bundles, shim sockets, logs
  std::string templates_dir_override;           // default: data_dir/templates
  std::string agent_path;                       // default: b3os-agent beside b3osd
  std::string shim_path;                        // default: b3os-shim beside b3osd
  runtime::RuntimeConfig runtime;
  sandbox::SpecLimits limits;

  size_t max_json_body = 1 << 20;                          // 413 above this
  uint64_t max_upload_bytes = 16ULL * 1024 * 1024 * 1024;  // 413 above this
  size_t max_exec_output = 1 << 20;                        // per stream, then truncated
  int max_sandboxes_per_project = 64;                      // 429 concurrency_limited
  int max_sandboxes_per_node = 256;                        // 503 capacity_unavailable
  int warm_pool_size = 2;  // booted `base` sandboxes kept ready for non-forkable creates
  int fork_pool_size = 3;  // created, not started containers kept for forks, snapshot restores and boots
  // Template checkpoints: "auto" builds one per template at start and restores it for creates
  // when a restore measured faster than a boot; "on" always restores it; "off" never builds one.
  std::string template_checkpoints = "auto";
  double rate_per_second = 50;                             // per API key
  double rate_burst = 100;
  int max_connections = 1024;

  std::string db_path() const { return data_dir + "/b3os.db"; }
  std::string templates_dir() const { return templates_dir_override.empty() ? data_dir + "/templates" : templates_dir_override; }
  std::string snapshots_dir() const { return data_dir + "/snapshots"; }
  /// Fork images live only while a fork runs; on the data disk rather than RUN_DIR, which is
  /// often a small tmpfs (an image is as large as the source's memory). Swept at start.
  std::string fork_images_dir() const { return data_dir + "/fork-images"; }
  std::string sandboxes_dir() const { return run_dir + "/sandboxes"; }
};

}  // namespace b3os::config
