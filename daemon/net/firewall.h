#pragma once
// The host's firewall for sandbox traffic: one nftables table, `inet b3os_<uplink range>`
// (docs/network.md; NetLayout::table()).
//
// Every sandbox's traffic reaches the host from its uplink (b3u...) with its uplink address
// as source, so one table with sets keyed by that address holds every sandbox's policy:
//   public_src   sources whose egress is public
//   allow_cidr   (source . network . port) of allowlist CIDR entries: forwarded as they are
//   proxy_ports  (source . port) of allowlist name entries: sent to b3osd's egress proxy
//   deny4        what no sandbox reaches through the host: the always-denied ranges
//                (policy.h), the uplink range (other sandboxes) among them
// Anything else from a sandbox is refused at once (TCP reset, ICMP otherwise), IPv6 dropped,
// nothing new is forwarded to a sandbox, and the host itself (any of its addresses, whenever
// it got them: this is the input hook) answers a sandbox only on the resolver's and the
// proxy's ports of the service address.
//
// The table's skeleton is static text (addresses and ports b3osd computes, no user data);
// a sandbox's entries, which come from its creator, are written as JSON (`nft -j -f -`), each
// change one transaction.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/net/netns.h"
#include "daemon/net/policy.h"

namespace b3os::net {

/// The firewall entries of one sandbox.
struct FirewallEntries {
  bool is_public = false;
  std::vector<std::pair<Cidr, uint16_t>> cidr_ports;
  std::vector<uint16_t> proxy_ports;
  bool empty() const { return !is_public && cidr_ports.empty() && proxy_ports.empty(); }
};
FirewallEntries entries_for(const std::string& mode, const Allowlist& list);

class Firewall {
 public:
  explicit Firewall(NetLayout layout) : layout_(layout) {}
  /// Replaces the table with an empty one (no sandbox allowed anything yet), atomically.
  /// `guard_forwarding`: forwarding was off before b3osd turned it on, so traffic that neither
  /// comes from nor goes to a sandbox is not forwarded either.
  Result<void> install(bool guard_forwarding);
  /// Replaces the entries of `source` (`before` -> `after`) in one transaction.
  Result<void> replace(uint32_t source, const FirewallEntries& before, const FirewallEntries& after);
  /// Forgets the connections conntrack holds from `source` (its sandbox is gone).
  void forget_connections(uint32_t source);
  /// Marks the connections conntrack holds from `source` (kRejudgeMark), so a changed policy
  /// applies to connections already open: each packet the sandbox sends on them is judged by
  /// the policy again until one is allowed (the mark is then cleared), and one that is not gets
  /// a reset (TCP) or an ICMP error. The entries stay: the far end's packets still reach the
  /// sandbox, whose next ACK is then refused, so neither side waits on a half-dead connection.
  void rejudge_connections(uint32_t source);
  /// The conntrack mark of connections whose sandbox's policy changed since they were opened.
  static constexpr uint32_t kRejudgeMark = 0x62330002;
  /// Removes the table (b3osd's sandboxes are all gone).
  void uninstall();

  /// The JSON of one transaction (exposed for tests).
  static std::string transaction_json(const std::string& table, uint32_t source, const FirewallEntries& before,
                                      const FirewallEntries& after);
  /// The table's skeleton (exposed for tests).
  std::string skeleton(bool guard_forwarding) const;

 private:
  NetLayout layout_;
  std::mutex mu_;  // one nft transaction at a time: their order is the policy's
};

}  // namespace b3os::net
