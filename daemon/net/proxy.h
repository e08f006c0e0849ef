#pragma once
// The egress proxy of allowlist sandboxes (docs/network.md). The host's firewall sends it
// every TCP connection an allowlist sandbox opens to a port of one of its name entries; it
// learns the connection's real destination (SO_ORIGINAL_DST) and its source (the sandbox's
// uplink address), then decides on what the connection really asks for:
//   - TLS: the ClientHello's server_name; plain HTTP: the Host header (and an absolute
//     target must agree with it). The name must be allowed for that port; b3osd resolves it
//     itself (resolver.h: always-denied answers dropped) and connects to that answer, not to
//     the address the sandbox chose: a forged /etc/hosts, a bare IP or an SNI naming another
//     host reaches nothing the list does not allow.
//   - Anything else (another protocol, a client that waits for the server to speak first, a
//     ClientHello without server_name): only a destination address the resolver gave this
//     sandbox for an allowed name, on an allowed port, is dialled.
//   - TLS with Encrypted Client Hello (or ESNI) is refused (peek.h): its name is hidden.
// Refused: plain HTTP gets a 403 with an `egress_denied` JSON body, everything else a TCP
// reset, at once. The bytes peeked are sent on first, then both directions are spliced; for
// plain HTTP through an HttpGuard (http_guard.h), which checks every later request of the
// connection the same way (a later request refused resets the connection).
// No connection is dialled to an address of the host itself (host_addrs.h), whatever name
// led there; the proxy's sockets carry kProxyMark, and the firewall refuses a connection of
// theirs to any local address as well.
// Everything runs on the network's asio thread; a connection costs two sockets and two
// buffers. They are shared fairly (common/fair_share.h): a sandbox may hold kMaxPerSource, the
// node kMaxTotal, and kFloor of each sandbox's are kept for it whatever the others hold (half
// the node is kept for floors: FairShare::for_node).

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <boost/asio.hpp>

#include "common/fair_share.h"
#include "common/result.h"
#include "daemon/net/host_addrs.h"
#include "daemon/net/resolver.h"

namespace b3os::net {

class EgressProxy {
 public:
  static constexpr size_t kMaxPerSource = 256;
  static constexpr size_t kMaxTotal = 8192;
  static constexpr size_t kFloor = 16;
  static constexpr int kListenBacklog = 16384;
  static constexpr std::chrono::milliseconds kPeekTimeout{5000};
  /// How long a client on a port other than 80/443 may stay silent before the proxy decides
  /// by its destination alone (servers that speak first: SSH, SMTP, MySQL).
  static constexpr std::chrono::milliseconds kSilentClient{300};
  static constexpr std::chrono::milliseconds kConnectTimeout{10000};

  /// `max_total`: the node's connections (--net-proxy-max-connections); half of them are kept
  /// for sandboxes' floors (FairShare::for_node).
  EgressProxy(boost::asio::io_context& io, const PolicyTable& policies, Resolver& resolver, HostAddresses& host,
              size_t max_total = kMaxTotal);
  ~EgressProxy();
  Result<void> start(uint32_t addr, uint16_t port);
  void stop();
  /// After `source`'s policy changed (or it is gone): closes the connections it no longer
  /// allows. On the network thread.
  void recheck(uint32_t source);
  size_t connections() const { return share_.total(); }
  uint64_t refused() const { return refused_; }

  class Connection;

 private:
  friend class Connection;
  void accept();
  void done(Connection* c);

  boost::asio::io_context& io_;
  const PolicyTable& policies_;
  Resolver& resolver_;
  HostAddresses& host_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  FairShare<uint32_t> share_;
  uint64_t refused_ = 0;
  std::map<uint32_t, std::set<Connection*>> by_source_;
};

}  // namespace b3os::net
