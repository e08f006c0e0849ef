#pragma once
// Internals shared by the translation units of SandboxService (service.cc: lifecycle and
// recovery; pool.cc: warm pool, fork pool and template images; fork.cc: fork, pause, snapshots;
// io.cc: exec and files). Not part of the service's interface.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/file.h"
#include "daemon/sandbox/service.h"
#include "daemon/sys/process.h"

namespace b3os::sandbox {

namespace detail {
using nlohmann::json;
using namespace std::chrono_literals;
inline constexpr auto kHelloTimeout = 15s;
inline constexpr auto kControlTimeout = 5s;
inline constexpr auto kFileIdleTimeout = 60s;
inline constexpr auto kExecGrace = 10s;
inline constexpr const char* kInferBaseUrl = "http://127.0.0.1:7700/v1/infer";
inline constexpr const char* kInferPlaceholderKey = "b3os-sandbox-no-key-needed";
inline constexpr const char* kUnconfiguredModel = "b3os/unconfigured";

inline const std::map<std::string, std::string> kTemplateDescriptions = {
    {"base", "Debian 12 minbase with python3, curl, ca-certificates and procps"},
};

/// True when a sandbox document's grant has the infer:run scope.
inline bool grants_infer(const json& doc) {
  if (!doc.contains("api") || !doc["api"].is_object() || !doc["api"].contains("scopes")) return false;
  const json& scopes = doc["api"]["scopes"];
  return scopes.is_array() && std::find(scopes.begin(), scopes.end(), "infer:run") != scopes.end();
}

inline json map_to_json(const std::map<std::string, std::string>& m) {
  json j = json::object();
  for (auto& [k, v] : m) j[k] = v;
  return j;
}

inline Error agent_error(const json& end) {
  const json& e = end.contains("error") ? end["error"] : json::object();
  Error err;
  err.code = error_code_from_name(e.value("code", "internal"));
  err.message = e.value("message", "the agent reported an error");
  err.err_no = e.value("errno", 0);
  return err;
}

inline Result<json> parse_end(const protocol::Frame& f) {
  json j = json::parse(f.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(ErrorCode::kInternal, "unreadable answer from the agent");
  if (!j.value("ok", false)) return fail(agent_error(j));
  return j;
}

inline bool is_shim_process(pid_t pid) {
  auto cmd = read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 4096);
  return cmd && cmd->find("b3os-shim") != std::string::npos;
}

inline void kill_and_wait(pid_t pid) {
  if (pid <= 0 || !is_shim_process(pid)) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (sys::try_reap(pid) && ::kill(pid, 0) != 0) return;  // reaped, or not our child and gone
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);
  sys::try_reap(pid);
}

inline pid_t read_pid_file(const std::string& path) {
  auto text = read_small_file(path, 64);
  if (!text || text->empty()) return -1;
  char* end = nullptr;
  long pid = std::strtol(text->c_str(), &end, 10);
  return end != text->c_str() && pid > 0 ? static_cast<pid_t>(pid) : -1;
}
}  // namespace detail

struct SandboxService::Sandbox {
  std::mutex mu;
  std::string id, project_id;
  nlohmann::json doc;
  nlohmann::json secrets = nlohmann::json::object();
  std::shared_ptr<agentlink::AgentChannel> channel;
  pid_t shim_pid = -1;
  std::atomic<int64_t> last_activity_ms{0};
  int64_t persisted_activity_ms = 0;
  bool finished = false;
  std::atomic<int> active_ops{0};  // execs and transfers in flight: the sandbox is not idle
  std::string hostname;
  // Checkpoint images of this sandbox still charged to its memory cgroup (fork.cc ImageRoom).
  std::mutex room_mu;
  int image_rooms = 0;
};

namespace detail {
/// Marks a sandbox busy for the life of one operation.
class ActiveOp {
 public:
  explicit ActiveOp(std::atomic<int>& n) : n_(n) { ++n_; }
  ~ActiveOp() { --n_; }
  ActiveOp(const ActiveOp&) = delete;
  ActiveOp& operator=(const ActiveOp&) = delete;

 private:
  std::atomic<int>& n_;
};
}  // namespace detail

}  // namespace b3os::sandbox
