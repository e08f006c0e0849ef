#pragma once
// TLS inside a cluster (docs/cluster.md, "TLS between routers and nodes"), on OpenSSL:
//
//   - connect_tls: a router's (or a node's) connection to a node's internal listener, as an
//     Upstream, the node's certificate checked against the cluster's CA and the node's name.
//   - TlsFront: a node's internal listener with TLS: it accepts TLS connections, completes
//     the handshake, and relays the bytes to the plain listener behind it on 127.0.0.1 (the
//     same http::Server, the same signature checks). A thread per connection, bounded.
//
// The HTTP server itself stays plain (its WebSockets and relays work on the socket's fd); the
// TLS is a layer in front of it, as a terminating proxy would be, inside b3osd.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/result.h"
#include "daemon/http/server.h"

namespace b3os::http {

/// A TLS connection to host:port whose certificate chains to `ca_file` and names `host`
/// (DNS name or IP address). kNodeUnavailable when nothing answers or the handshake fails.
Result<std::unique_ptr<Upstream>> connect_tls(const std::string& host, int port, std::chrono::milliseconds timeout,
                                              const std::string& ca_file);

class TlsFront {
 public:
  /// Listens on host:port (0: any free port) with the certificate chain `cert_file` and its key
  /// `key_file`, and relays each connection's plaintext to 127.0.0.1:`backend_port`. At most
  /// `max_connections` at once (a new one past that is closed at once).
  static Result<std::unique_ptr<TlsFront>> start(const std::string& host, int port, const std::string& cert_file,
                                                 const std::string& key_file, int backend_port, int max_connections);
  ~TlsFront();
  int port() const { return port_; }
  struct State;  // the listener and its connections' count (tls.cc)

 private:
  TlsFront() = default;
  std::shared_ptr<State> state_;
  int port_ = 0;
};

}  // namespace b3os::http
