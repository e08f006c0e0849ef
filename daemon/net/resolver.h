#pragma once
// The resolver every networked sandbox uses (docs/network.md). A sandbox's DNS, to whatever
// address it sends it, is turned by its namespace to the service address, where this answers:
//   public:    the question is forwarded upstream (AAAA answered empty: sandboxes have no
//              IPv6) and the answer relayed;
//   allowlist: only A questions for names the list allows are asked upstream; the answer's
//              addresses in always-denied ranges are dropped; every other name gets NXDOMAIN
//              here and is never sent anywhere, so DNS is not a way out. The addresses a
//              sandbox was given are remembered (its "learned" addresses) for the proxy.
// In both modes no sandbox is given an address of the host itself (host_addrs.h), and public
// answers lose their always-denied addresses too (an internal zone's names do not resolve to
// its private addresses); PTR questions for always-denied ranges are not sent upstream.
// Everything runs on the network's one asio thread; a question costs a socket and a timer
// while it waits for upstream, never a thread. Questions in flight are shared fairly
// (common/fair_share.h): a sandbox may have kMaxPendingPerSource, the node kMaxPending, and
// kPendingFloor of each sandbox's are kept for it whatever the others do, so a flood of slow
// names from any number of sandboxes (half the node is kept for floors) cannot stall
// another's DNS. TCP connections are shared the same way.

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <boost/asio.hpp>

#include "common/fair_share.h"
#include "common/result.h"
#include "daemon/net/answer_cache.h"
#include "daemon/net/host_addrs.h"
#include "daemon/net/policy.h"

namespace b3os::net {

/// What the resolver and the proxy need to know of one source (a sandbox's uplink address).
struct SourcePolicy {
  std::string sandbox_id;
  std::string mode;  // public | allowlist
  Allowlist list;
};

/// Source address -> its policy; read on the network thread, written by API threads.
class PolicyTable {
 public:
  void set(uint32_t source, std::shared_ptr<const SourcePolicy> p);
  void erase(uint32_t source);
  std::shared_ptr<const SourcePolicy> get(uint32_t source) const;

 private:
  mutable std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<const SourcePolicy>> by_source_;
};

struct DnsQuestion;

struct DnsUpstream {
  uint32_t addr = 0;
  uint16_t port = 53;
};

class Resolver {
 public:
  static constexpr size_t kMaxPending = 4096;
  static constexpr size_t kMaxPendingPerSource = 64;
  static constexpr size_t kPendingFloor = 8;
  static constexpr size_t kMaxTcp = 2048;
  static constexpr size_t kMaxTcpPerSource = 16;
  static constexpr size_t kTcpFloor = 2;
  static constexpr size_t kMaxCache = 4096;
  static constexpr int kUdpReceiveBuffer = 8 << 20;
  static constexpr size_t kMaxLearnedPerSource = 4096;
  static constexpr std::chrono::milliseconds kUpstreamTimeout{1500};

  using Addresses = std::function<void(std::vector<uint32_t> addrs, uint32_t ttl, std::string error)>;

  /// `max_pending`: the node's questions in flight (--net-dns-max-pending); half of them are
  /// kept for sandboxes' floors (FairShare::for_node).
  Resolver(boost::asio::io_context& io, const PolicyTable& policies, std::vector<DnsUpstream> upstreams,
           HostAddresses& host, size_t max_pending = kMaxPending);
  /// Binds UDP and TCP on addr:port.
  Result<void> start(uint32_t addr, uint16_t port);
  void stop();

  /// The addresses of `name` not in an always-denied range and not the host's (cached for
  /// their TTL); for the proxy and for allowlist answers. On the network thread.
  void resolve(const std::string& name, Addresses done);
  /// Whether `source` was answered `ip` for some name (allowlist mode), and which names.
  std::vector<std::string> learned(uint32_t source, uint32_t ip);
  /// Forgets what `source` learned (its sandbox is gone or its policy changed). Any thread.
  void forget(uint32_t source);

  /// Counts, for tests and logs.
  uint64_t forwarded() const { return forwarded_; }
  uint64_t refused() const { return refused_; }
  size_t pending() const { return pending_.total(); }
  size_t cached() const { return cache_.size(); }

 private:
  struct Learned {
    std::set<std::string> names;
    std::chrono::steady_clock::time_point until;
  };
  using Reply = std::function<void(std::vector<uint8_t>)>;

  void receive_udp();
  void accept_tcp();
  void serve_tcp(std::shared_ptr<boost::asio::ip::tcp::socket> sock, uint32_t source);
  /// Answers one question from `source` through `reply` (exactly once).
  void answer(uint32_t source, std::vector<uint8_t> packet, Reply reply);
  /// Sends `packet` (a query with id `id`) to the upstreams in turn until one answers.
  void ask_upstream(std::vector<uint8_t> packet, size_t which,
                    std::function<void(Result<std::vector<uint8_t>>)> done);
  void learn(uint32_t source, const std::string& name, const std::vector<uint32_t>& addrs, uint32_t ttl);
  /// Whether no sandbox may be given `ip`: always denied, or the host's own.
  bool withheld(uint32_t ip) { return denied_reason(ip) || host_.is_local(ip); }
  /// Public mode: the upstream's answer to `q` with the addresses no sandbox may be given
  /// taken out (the reply rebuilt only when there were some).
  std::vector<uint8_t> filter_public(const DnsQuestion& q, std::vector<uint8_t> reply);

  boost::asio::io_context& io_;
  const PolicyTable& policies_;
  std::vector<DnsUpstream> upstreams_;
  HostAddresses& host_;
  boost::asio::ip::udp::socket udp_;
  boost::asio::ip::tcp::acceptor tcp_;
  std::array<uint8_t, 4096> udp_buf_{};
  boost::asio::ip::udp::endpoint udp_peer_;

  FairShare<uint32_t> pending_;
  FairShare<uint32_t> tcp_share_{FairShare<uint32_t>::for_node(kMaxTcp, kMaxTcpPerSource, kTcpFloor)};
  AnswerCache cache_{kMaxCache};
  std::map<std::string, std::vector<Addresses>> resolving_;  // names asked upstream, and who waits

  mutable std::mutex learned_mu_;  // learned_: the proxy reads it on the network thread,
                                   // forget() may come from any
  std::map<uint32_t, std::map<uint32_t, Learned>> learned_;
  std::atomic<uint64_t> forwarded_{0}, refused_{0};
};

}  // namespace b3os::net
