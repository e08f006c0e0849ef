#pragma once
// Calls to a gVisor sandbox's control server without the runsc CLI.
//
// Every runsc sandbox serves "urpc" on a unix socket: the client writes one JSON object
// {"method": M, "arg": A} (files ride along as SCM_RIGHTS on the first write) and reads back one
// JSON object {"success": bool, "err": string, "result": R}. The runsc CLI is a thin client of
// it, but each CLI invocation spends ~40 ms here starting the Go runtime before it sends a byte;
// start, checkpoint and restore make their calls themselves instead (docs/design.md).
//
// The message shapes are those of the runsc versions listed in control.cc; Runsc only uses this
// path for those versions and falls back to the CLI for any other.

#include <chrono>
#include <span>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::runtime {

/// One connection to a sandbox's control socket. Calls on it are made one at a time.
class ControlConnection {
 public:
  /// Connects to `socket_path` (a filesystem path; longer paths are reached via /proc/self/fd).
  static Result<ControlConnection> connect(const std::string& socket_path);

  /// Makes one call and waits up to `timeout` for its answer. `fds` are sent with the request
  /// (the server takes its own copies; the caller keeps and closes its fds). A call the server
  /// refused ("success": false) is an error carrying the server's message.
  Result<nlohmann::json> call(std::string_view method, const nlohmann::json& arg, std::span<const int> fds,
                              std::chrono::milliseconds timeout);

 private:
  explicit ControlConnection(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

/// The length of the first complete JSON object at the start of `buf`, or 0 while it is still
/// incomplete. Only an object may start the buffer (leading whitespace is skipped); anything
/// else is reported as -1.
long json_object_length(std::string_view buf);

/// The argument runsc sends to Network.CreateLinksAndRoutes for --network=none: a loopback
/// interface with 127.0.0.1/8 and ::1/128 and their routes.
nlohmann::json loopback_links_arg();
/// The sandbox's eth0 as runsc's CLI hands it over under --network=sandbox (read from its
/// namespace: runsc start/restore's createInterfacesAndRoutesFromNS), its packet socket
/// going with the call.
struct PacketLink {
  std::string mac;  // 6 bytes
  int mtu = 1500;
  uint32_t addr = 0;  // host byte order
  int prefix = 0;
  uint32_t gateway = 0;  // the default route's
};
/// Network.CreateLinksAndRoutes for --network=sandbox --net-disconnect-ok: loopback and one
/// fd-based link (checked byte for byte against runsc 0.0~20240729.0's CLI with strace).
nlohmann::json sandbox_links_arg(const PacketLink& link);

/// Whether this runsc version's control messages are the ones this file speaks.
bool control_protocol_known(std::string_view runsc_version);

}  // namespace b3os::runtime
