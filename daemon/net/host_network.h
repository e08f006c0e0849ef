#pragma once
// HostNetwork: the real Network (network.h). It owns the node's sandbox networks: the slots
// of the uplink range, each sandbox's namespace (netns.h), the host's firewall table
// (firewall.h), and the resolver and egress proxy (resolver.h, proxy.h) on one asio thread.

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>

#include "common/unique_fd.h"
#include "daemon/net/firewall.h"
#include "daemon/net/host_addrs.h"
#include "daemon/net/netns.h"
#include "daemon/net/network.h"
#include "daemon/net/proxy.h"
#include "daemon/net/resolver.h"

namespace b3os::net {

struct HostNetworkConfig {
  NetLayout layout;
  /// Where the resolver asks; empty: the nameservers of the host's /etc/resolv.conf.
  std::vector<DnsUpstream> dns_upstreams;
  std::string run_dir = "/run/b3os";  // resolv.conf for sandboxes, the forwarding marker
  /// How many sandboxes the node runs at most: the host's conntrack table is made to hold
  /// that many sandboxes' layout.max_flows, with room to spare for the host's own.
  int max_sandboxes = 256;
  /// The node's egress proxy connections and resolver questions in flight, shared fairly.
  size_t proxy_max_connections = EgressProxy::kMaxTotal;
  size_t dns_max_pending = Resolver::kMaxPending;
};

/// "IP" or "IP:PORT" (IPv4 only).
Result<DnsUpstream> parse_dns_upstream(std::string_view text);
/// The nameservers of a resolv.conf text (IPv4 only).
std::vector<DnsUpstream> nameservers_of(std::string_view resolv_conf);

class HostNetwork : public Network {
 public:
  explicit HostNetwork(HostNetworkConfig cfg);
  ~HostNetwork() override;

  /// Host set-up (service interface, forwarding, firewall table), resolver and proxy up.
  Result<void> start();
  void stop();

  Result<NetSlot> prepare(const std::string& sandbox_id) override;
  Result<void> activate(const std::string& sandbox_id) override;
  Result<void> apply(const std::string& sandbox_id, const EgressPolicy& policy) override;
  void release(const std::string& sandbox_id) override;
  Result<NetSlot> recover(const std::string& sandbox_id) override;
  /// Only namespaces whose uplink is in this node's range: another b3osd on the host (with a
  /// range of its own) has namespaces of the same b3s- form, and they are not ours to sweep.
  std::vector<std::string> list() override;
  std::string resolv_conf() const override { return cfg_.run_dir + "/net/resolv.conf"; }

  const NetLayout& layout() const { return cfg_.layout; }
  const std::vector<DnsUpstream>& upstreams() const { return cfg_.dns_upstreams; }

 private:
  struct Sandbox {
    NetSlot slot;
    FirewallEntries entries;  // what the firewall holds for it now
    bool has_policy = false;
  };
  static constexpr uint64_t kHostConntrackRoom = 65536;
  Result<int> take_slot();
  void free_slot(int index);
  /// Runs `fn` on the network thread and waits for it.
  void on_net_thread(std::function<void()> fn);

  HostNetworkConfig cfg_;
  UniqueFd lock_;  // flock of /run/<table>.lock, held for the process's life
  Firewall firewall_;
  HostAddresses host_addrs_;
  boost::asio::io_context io_;
  PolicyTable policies_;
  Resolver resolver_;
  EgressProxy proxy_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread thread_;
  bool started_ = false;

  std::mutex apply_mu_;  // one firewall change at a time: each knows what the table holds
  std::mutex mu_;        // below
  std::map<std::string, Sandbox> sandboxes_;
  std::set<int> used_slots_;
  int next_slot_ = 1;
};

}  // namespace b3os::net
