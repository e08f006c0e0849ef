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

/// Which kind of credential a request was authenticated by. Each dispatcher names the kinds
/// it serves and refuses the others (docs/api.md, "Credentials"): a sandbox's envd access
/// token reaches that sandbox's envd routes and nothing else.
enum class CredentialKind {
  kApiKey,     // a project's b3os_sk_ or e2b_ key: the whole project's API
  kEnvdToken,  // one sandbox's envd access token (or a /files URL it signed): that sandbox's envd
  kInternal,   // b3osd itself (a preview's resume, a relay of the cluster): no request carries it
};

/// Who is asking: the project a credential belongs to, and what the credential is.
struct Principal {
  std::string project_id;
  std::string key_id;        // the API key's id; for an envd token "envd:" + the sandbox
  std::string project_name;  // as the operator named it (b3os keys create PROJECT)
  CredentialKind kind = CredentialKind::kApiKey;
  std::string sandbox_id{};  // kEnvdToken: the one sandbox the token reaches
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
