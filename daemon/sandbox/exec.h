#pragma once
// Exec: what runs in a sandbox and the files it holds, over its agent channel: commands,
// uploads and downloads, listings and removals.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/sandbox/lifecycle.h"

namespace b3os::sandbox {

class Exec {
 public:
  Exec(const Config& cfg, Lifecycle& lifecycle) : cfg_(cfg), lifecycle_(lifecycle) {}

  Result<ExecResult> exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                          const CancelCheck& cancelled);
  Result<nlohmann::json> write_file(const Principal& p, const std::string& id, const std::string& path,
                                    const ChunkSource& source, Timing& t);
  Result<void> read_file(const Principal& p, const std::string& id, const std::string& path, FileSink& sink, Timing& t);
  Result<nlohmann::json> list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t);
  Result<nlohmann::json> remove_path(const Principal& p, const std::string& id, const std::string& path,
                                     bool recursive, Timing& t);
  /// Output of a command as it comes (stderr or not, the bytes).
  using OutputSink = std::function<void(bool is_stderr, std::string_view bytes)>;
  /// Runs a command in a live sandbox the caller holds (a template build's, which no project
  /// can reach), giving its output to `on_output` as it comes as well as in the result.
  Result<ExecResult> run_live(LiveSandbox& s, const ExecSpec& spec, const CancelCheck& cancelled,
                              const OutputSink& on_output);
  /// Round trip over a sandbox's agent channel (benchmarks).
  Result<double> ping(const Principal& p, const std::string& id);

 private:
  Result<std::shared_ptr<agentlink::Stream>> open_stream(LiveSandbox& s, const nlohmann::json& request);
  /// One request whose whole answer is the agent's END (list, remove).
  Result<nlohmann::json> call_agent(const Principal& p, const std::string& id, const nlohmann::json& request);

  const Config& cfg_;
  Lifecycle& lifecycle_;
};

}  // namespace b3os::sandbox
