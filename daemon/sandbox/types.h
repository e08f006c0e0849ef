#pragma once
// The plain types the sandbox module's interface speaks: who asks, what an exec returns, and
// how file bytes come in and go out without HTTP types crossing into the module.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "daemon/sandbox/timing.h"

namespace b3os::sandbox {

/// Who is asking: the project a key belongs to.
struct Principal {
  std::string project_id;
  std::string key_id;
  std::string project_name;  // as the operator named it (b3os keys create PROJECT)
};

/// The outcome of an exec.
struct ExecResult {
  int exit_code = -1;
  std::string stdout_data, stderr_data;
  bool timed_out = false;
  bool stdout_truncated = false, stderr_truncated = false;
  double duration_ms = 0;
  int signal = 0;  // the signal that ended it, or 0
};

/// Returns true when the client that asked has gone away (its work is then cancelled).
using CancelCheck = std::function<bool()>;
/// Reads the next chunk of an upload into buf; 0 at the end.
using ChunkSource = std::function<Result<size_t>(char* buf, size_t cap)>;
/// Receives a download: `begin(size)` once, then `data` chunks.
struct FileSink {
  std::function<Result<void>(uint64_t size)> begin;
  std::function<Result<void>(std::string_view chunk)> data;
};

}  // namespace b3os::sandbox
