#pragma once
// The host's own IPv4 addresses, on every interface, for the resolver and the egress proxy:
// a name a sandbox may reach can still resolve to the node itself (its public address, its
// API or preview domain, an attacker's wildcard record under an allowed "*.name"), and the
// proxy dials from the host, where such an address is one of b3osd's own listeners or any
// other service of the host. Neither the proxy nor the resolver gives out or dials one.
//
// The list is read with getifaddrs and read again when it is older than max_age, so an
// address added to an interface is known within that time. The firewall holds the rule that
// does not wait (firewall.cc, chain `out`: the proxy's sockets carry kProxyMark, and a
// connection of theirs to any local address, as the kernel sees it at that moment, is
// refused); this list is what lets the proxy refuse first, with a message, and keeps such
// addresses out of the answers sandboxes get.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace b3os::net {

/// The firewall mark of the egress proxy's connections to the outside (SO_MARK).
inline constexpr uint32_t kProxyMark = 0x62330001;

class HostAddresses {
 public:
  explicit HostAddresses(std::chrono::milliseconds max_age = std::chrono::seconds(1)) : max_age_(max_age) {}
  /// Whether `ip` (host byte order) is an address of one of the host's interfaces. Any thread.
  bool is_local(uint32_t ip);
  /// Reads the addresses now (after a change the caller made itself).
  void refresh();

 private:
  void refresh_locked();

  const std::chrono::milliseconds max_age_;
  std::mutex mu_;
  std::vector<uint32_t> addrs_;  // sorted
  std::chrono::steady_clock::time_point read_at_{};
  bool read_ = false;
};

/// Every IPv4 address of the host's interfaces (getifaddrs), sorted and unique.
std::vector<uint32_t> local_ipv4_addresses();

}  // namespace b3os::net
