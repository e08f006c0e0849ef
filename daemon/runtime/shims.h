#pragma once
// ShimProcesses: the real Shims, one b3os-shim process per sandbox holding a copy of the
// daemon's end of its agent channel, handing it back over DIR/shim.sock after a restart.

#include <string>

#include "daemon/runtime/runtime.h"

namespace b3os::runtime {

class ShimProcesses : public Shims {
 public:
  explicit ShimProcesses(std::string shim_path) : shim_path_(std::move(shim_path)) {}
  Result<pid_t> start(const std::string& dir, int fd, int log_fd = -1) override;
  void stop(const std::string& dir, pid_t pid, int watch = -1) override;
  pid_t recorded_pid(const std::string& dir) override;
  Result<Held> reclaim(const std::string& dir) override;
  Watched watch(const std::string& dir, pid_t child = -1) override;
  void reap(int watch, pid_t pid) override;

 private:
  std::string shim_path_;
};

}  // namespace b3os::runtime
