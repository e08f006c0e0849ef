#pragma once
// Network: what the sandbox module needs to give a sandbox a network of its own, as an
// interface (tests/fakes/fake_network.h is the fake; HostNetwork, host_network.h, the real
// one). A sandbox with egress `public` or `allowlist` runs in a network namespace of its own
// (docs/network.md): the namespace is made before its container (runsc joins it), brought up
// after its start or restore, given its policy, and removed after the container is gone.
// `deny` sandboxes have no namespace at all (runsc --network=none).

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace b3os::net {

/// The egress of one sandbox, as the API and the store hold it.
struct EgressPolicy {
  std::string mode = "deny";       // public | allowlist | deny
  std::vector<std::string> allow;  // allowlist entries (policy.h), validated
};

/// A sandbox's network namespace and its uplink to the host.
struct NetSlot {
  int index = 0;             // 1..: which /30 of the uplink range it has
  std::string netns;         // b3s-<sandbox id>
  std::string netns_path;    // /run/netns/<netns>, for the OCI config
  std::string uplink;        // the host end of its uplink (b3u...)
  uint32_t host_addr = 0;    // the host's end of the uplink
  uint32_t sandbox_addr = 0; // the namespace's end: the source address its traffic has on the host
};

class Network {
 public:
  virtual ~Network() = default;
  /// Makes the namespace of `sandbox_id` (interfaces addressed, its own links still down so
  /// runsc takes only eth0). On failure nothing is left.
  virtual Result<NetSlot> prepare(const std::string& sandbox_id) = 0;
  /// Brings the namespace's gateway and uplink up, after the container's start or restore.
  virtual Result<void> activate(const std::string& sandbox_id) = 0;
  /// Sets (or replaces) the sandbox's egress policy, atomically: connections it opens from
  /// now on get the new one, and connections the old one allowed that the new one does not
  /// are cut. Stored by the caller before it is applied.
  virtual Result<void> apply(const std::string& sandbox_id, const EgressPolicy& policy) = 0;
  /// Removes the namespace, its uplink and every firewall entry of the sandbox; a sandbox
  /// without one is not an error.
  virtual void release(const std::string& sandbox_id) = 0;
  /// After a restart: takes back the namespace a previous b3osd made for `sandbox_id`.
  virtual Result<NetSlot> recover(const std::string& sandbox_id) = 0;
  /// Ids of every sandbox namespace on the host (to sweep those no sandbox owns).
  virtual std::vector<std::string> list() = 0;
  /// The OCI bind mount source for the sandbox's /etc/resolv.conf.
  virtual std::string resolv_conf() const = 0;
};

}  // namespace b3os::net
