#pragma once
// The host side of a sandbox's network: its namespace, veths and addresses (docs/network.md).
//
//   sandbox (gVisor netstack)        namespace b3s-<id>                       host
//   eth0 10.0.0.2/30 (runsc's) <-veth-> gw0 10.0.0.1/30   up0 S/30 <-veth-> b3u<id> H/30
//                                       DNS to :53 -> SERVICE:53, masquerade on up0
//
// Every sandbox has the same inner addresses (10.0.0.2, gateway 10.0.0.1), so a fork restored
// into another namespace finds its sockets' addresses unchanged; its uplink (H, S: the two
// hosts of slot n's /30 in the uplink range) is its own, and is how the host's firewall, the
// resolver and the egress proxy tell sandboxes apart. runsc takes every interface that is up
// and addressed when it starts or restores the sandbox, so gw0 and up0 stay down until then
// (activate_netns). Commands run with `ip` (iproute2) and `nft`; sysctls and offloads are
// written from a thread that entered the namespace.

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/net/network.h"
#include "daemon/net/policy.h"

namespace b3os::net {

inline constexpr std::string_view kNetnsPrefix = "b3s-";
inline constexpr std::string_view kUplinkPrefix = "b3u";
inline constexpr uint32_t kInnerAddr = 0x0a000002;    // 10.0.0.2: the sandbox
inline constexpr uint32_t kInnerGateway = 0x0a000001; // 10.0.0.1: its gateway and resolver

/// Addresses of the node's sandbox networks.
struct NetLayout {
  Cidr uplinks{0x0ac90000, 16};  // 10.201.0.0/16: a /30 per sandbox; its first /30 is the service's
  uint16_t dns_port = 53;        // the resolver, on the service address
  uint16_t proxy_port = 3129;    // the egress proxy, on the service address
  /// Connections (conntrack entries: TCP, UDP, ICMP, DNS included) one sandbox may hold at
  /// once, in its namespace and on the host; new ones beyond are refused.
  uint32_t max_flows = 2048;
  /// The resolver and the proxy listen here, an address of the host's loopback.
  uint32_t service_addr() const { return uplinks.addr + 1; }
  /// How many sandboxes can have a network at once.
  int slots() const { return static_cast<int>((uint64_t{1} << (32 - uplinks.prefix)) / 4) - 1; }
  uint32_t host_addr(int index) const { return uplinks.addr + 4 * static_cast<uint32_t>(index) + 1; }
  uint32_t sandbox_addr(int index) const { return uplinks.addr + 4 * static_cast<uint32_t>(index) + 2; }
  /// The slot whose namespace end is `addr`, or 0.
  int slot_of(uint32_t addr) const;
  /// The name of this node's nft table: one per uplink range, so two b3osd on one host (each
  /// with a range of its own) never judge each other's sandboxes.
  std::string table() const;
  NetSlot slot(const std::string& sandbox_id, int index) const;
};

std::string netns_name(const std::string& sandbox_id);
/// The host end of a sandbox's uplink: b3u and the id's last 11 characters (random), so that
/// names are unique on the host whichever b3osd made them (15 characters at most).
std::string uplink_name(const std::string& sandbox_id);

/// Puts the service address on the host's loopback if it is missing, and turns on IPv4
/// forwarding (returns whether it was off before).
Result<bool> ensure_host_setup(const NetLayout& layout);
/// Makes slot's namespace, veths and addresses, its nat and filter table; gw0 and up0 down.
/// On failure, removes what it made.
Result<void> create_netns(const NetLayout& layout, const NetSlot& slot);
/// Brings gw0 and up0 up and routes the namespace's traffic to the host.
Result<void> activate_netns(const NetSlot& slot);
/// Removes the namespace of `sandbox_id` (its veths go with it) and the host end of its uplink.
void destroy_netns(const std::string& sandbox_id);
/// Names of the sandbox namespaces there are (b3s-*), without the prefix: sandbox ids.
std::vector<std::string> list_netns();
/// The slot index of an existing namespace, read from its uplink's address.
Result<int> read_slot_index(const NetLayout& layout, const std::string& netns);

}  // namespace b3os::net
