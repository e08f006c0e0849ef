#include "daemon/net/proxy.h"

#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/net/http_guard.h"
#include "daemon/net/peek.h"
#include "daemon/net/policy.h"

namespace b3os::net {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {
constexpr size_t kSpliceBuffer = 32 * 1024;
// What the guard holds of a direction (less than kMaxPeek, or the rest of the first peek)
// fits in its buffer with room left to read.
static_assert(kSpliceBuffer > kMaxPeek);

bool is_web_port(uint16_t p) { return p == 80 || p == 443; }

// A request line starts with a method token and a space: worth reading as HTTP. So does an
// empty line: servers may skip empty lines before a request (RFC 9112 2.2), and taken for
// another protocol the request after them would go on unread. peek_http refuses them.
bool looks_like_http(std::span<const uint8_t> b) {
  if (!b.empty() && (b[0] == '\r' || b[0] == '\n')) return true;
  size_t i = 0;
  while (i < b.size() && i < 16 && b[i] >= 'A' && b[i] <= 'Z') ++i;
  return i > 0 && (i == b.size() || (i < b.size() && b[i] == ' '));
}
}  // namespace

class EgressProxy::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(EgressProxy& p, tcp::socket client, uint32_t source, uint32_t dst_ip, uint16_t dst_port)
      : p_(p), alive_(p.alive_), client_(std::move(client)), upstream_(p.io_), timer_(p.io_), source_(source),
        dst_ip_(dst_ip), dst_port_(dst_port), peek_(kMaxPeek) {}
  // A handler still queued when the proxy is gone may be the last owner.
  ~Connection() {
    if (*alive_) p_.done(this);
  }

  void start() {
    timer_.expires_after(is_web_port(dst_port_) ? kPeekTimeout : kSilentClient);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed_ || self->decided_) return;
      // A client that said nothing: servers that speak first are judged by the address.
      if (self->peeked_ == 0 && !is_web_port(self->dst_port_)) return self->decide_by_address();
      self->refuse(false, "nothing to tell where the connection goes");
    });
    read_peek();
  }

  /// Whether the connection is still allowed by `pol` (after a policy change).
  bool still_allowed(const SourcePolicy* pol) const {
    if (!pol) return false;
    if (pol->mode == "public") return !denied_reason(dialled_);
    return !name_.empty() && pol->list.allows_name(name_, dst_port_);
  }

  void close(bool reset) {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    timer_.cancel();
    if (reset) client_.set_option(asio::socket_base::linger(true, 0), ec);
    client_.close(ec);
    upstream_.close(ec);
  }

  uint32_t source() const { return source_; }

 private:
  void read_peek() {
    client_.async_read_some(asio::buffer(peek_.data() + peeked_, peek_.size() - peeked_),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              if (self->closed_ || self->decided_) return;
                              if (ec) return self->close(false);
                              self->peeked_ += n;
                              self->on_peek();
                            });
  }

  void on_peek() {
    const std::span<const uint8_t> got(peek_.data(), peeked_);
    Peek pk;
    if (got[0] == 0x16) {
      pk = peek_tls(got);
      http_ = false;
    } else if (dst_port_ == 80 || looks_like_http(got)) {
      // Port 80 is HTTP's: whatever is not TLS there is read as HTTP, so a request a lenient
      // server takes (a method in small letters) is not spliced unread by its address.
      pk = peek_http(got);
      http_ = true;
    } else {
      // Another protocol: the destination decides.
      return decide_by_address();
    }
    if (pk.status == PeekStatus::kNeedMore) {
      if (peeked_ >= peek_.size()) return refuse(http_, "the request head is too large to read");
      return read_peek();
    }
    if (pk.status == PeekStatus::kInvalid) return refuse(http_, "unreadable " + std::string(http_ ? "HTTP request" : "TLS ClientHello") + ": " + pk.why);
    if (pk.host.empty()) return decide_by_address();  // a ClientHello without server_name
    decide_by_name(pk.host);
  }

  void decide_by_name(const std::string& host) {
    decided_ = true;
    timer_.cancel();
    auto pol = p_.policies_.get(source_);
    if (!pol || pol->mode != "allowlist" || !pol->list.allows_name(host, dst_port_))
      return refuse(http_, host + ":" + std::to_string(dst_port_) + " is not on this sandbox's egress allowlist");
    name_ = host;
    if (http_) {
      // Every request of the connection must name `host`, the first included; what the first
      // read brought is judged before anything is dialled, so a refusal there is still a 403.
      guard_ = std::make_unique<HttpGuard>(host);
      first_cleared_ = guard_->on_client(std::span<const uint8_t>(peek_.data(), peeked_));
      if (guard_->state() == HttpGuard::State::kRefused) return refuse(true, guard_->why());
    }
    p_.resolver_.resolve(host, [self = shared_from_this(), host](std::vector<uint32_t> addrs, uint32_t, std::string err) {
      if (self->closed_) return;
      if (!err.empty()) return self->refuse(self->http_, "resolving " + host + ": " + err);
      if (addrs.empty()) return self->refuse(self->http_, host + " resolves to no address a sandbox may reach");
      self->dial(std::move(addrs), 0);
    });
  }

  void decide_by_address() {
    decided_ = true;
    timer_.cancel();
    auto pol = p_.policies_.get(source_);
    if (pol && pol->mode == "allowlist" && !denied_reason(dst_ip_) && !p_.host_.is_local(dst_ip_)) {
      for (auto& n : p_.resolver_.learned(source_, dst_ip_)) {
        if (pol->list.allows_name(n, dst_port_)) {
          name_ = n;
          return dial({dst_ip_}, 0);
        }
      }
    }
    refuse(http_, ipv4_str(dst_ip_) + ":" + std::to_string(dst_port_) +
                      " is not an address this sandbox was given for a name on its egress allowlist");
  }

  void dial(std::vector<uint32_t> addrs, size_t i) {
    // The host's own addresses are checked now, not when the name was resolved: an address
    // the host took since is refused too (and the firewall's `out` chain refuses what this
    // list has not caught up with yet).
    while (i < addrs.size() && (denied_reason(addrs[i]) || p_.host_.is_local(addrs[i]))) {
      spdlog::info("egress proxy: {} of {} is an address of this host or always denied: not dialled",
                   ipv4_str(addrs[i]), name_);
      ++i;
    }
    if (i >= addrs.size()) {
      if (dialled_ == 0) return refuse(http_, name_ + " resolves to no address a sandbox may reach");
      return refuse(false, "no address of " + name_ + " answered");
    }
    dialled_ = addrs[i];
    error_code oe;
    upstream_.open(tcp::v4(), oe);
    const int mark = static_cast<int>(kProxyMark);
    if (oe || ::setsockopt(upstream_.native_handle(), SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) {
      spdlog::warn("egress proxy: cannot mark a socket: {}", oe ? oe.message() : std::strerror(errno));
      return refuse(http_, "the egress proxy cannot open a connection");
    }
    timer_.expires_after(kConnectTimeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec && !self->connected_) {
        error_code e2;
        self->upstream_.close(e2);  // the connect below fails and tries the next address
      }
    });
    // The endpoint before the handler takes the addresses (argument order is unspecified).
    const tcp::endpoint to(asio::ip::address_v4(addrs[i]), dst_port_);
    upstream_.async_connect(to, [self = shared_from_this(), addrs = std::move(addrs), i](error_code ec) mutable {
                              if (self->closed_) return;
                              if (ec) {
                                error_code e2;
                                self->upstream_.close(e2);
                                self->timer_.cancel();
                                return self->dial(std::move(addrs), i + 1);
                              }
                              self->connected_ = true;
                              self->timer_.cancel();
                              error_code e3;  // small writes (a ClientHello, a request) go at once
                              self->upstream_.set_option(tcp::no_delay(true), e3);
                              self->send_peeked();
                            });
  }

  void send_peeked() {
    const size_t n = guard_ ? first_cleared_ : peeked_;
    asio::async_write(upstream_, asio::buffer(peek_.data(), n), [self = shared_from_this(), n](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close(true);
      if (self->guard_) {
        // What the guard held (a request not complete yet, or what followed a websocket
        // Upgrade) waits at the start of the client's buffer; it is under kMaxPeek.
        self->held_[0] = self->peeked_ - n;
        std::memcpy(self->up_.data(), self->peek_.data() + n, self->held_[0]);
      }
      self->peek_.clear();
      self->peek_.shrink_to_fit();
      if (self->guard_) {
        self->up_next();
        self->down_read();
        return;
      }
      self->pump(self->client_, self->upstream_, self->up_, 0);
      self->pump(self->upstream_, self->client_, self->down_, 1);
    });
  }

  // ---- plain HTTP: both directions through the guard (http_guard.h) ----
  // The client's side: read, let the guard clear a prefix, send it, keep the rest.

  void up_read() {
    client_.async_read_some(asio::buffer(up_.data() + held_[0], up_.size() - held_[0]),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              if (self->closed_) return;
                              if (ec) return self->ended(ec, self->upstream_);
                              self->held_[0] += n;
                              self->up_filter();
                            });
  }

  void up_filter() {
    const size_t ok = guard_->on_client(std::span<const uint8_t>(up_.data(), held_[0]));
    // A later request refused: what came before it may still be in flight, so no 403 can
    // be put in order behind it; the client is reset (nothing of this read goes on).
    if (guard_->state() == HttpGuard::State::kRefused) return refuse(false, guard_->why());
    if (ok == 0) return up_next();
    asio::async_write(upstream_, asio::buffer(up_.data(), ok), [self = shared_from_this(), ok](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->close(true);
      std::memmove(self->up_.data(), self->up_.data() + ok, self->held_[0] - ok);
      self->held_[0] -= ok;
      self->up_next();
    });
  }

  void up_next() {
    // After a websocket Upgrade no client byte is read until the server's status is known.
    if (guard_->state() == HttpGuard::State::kAwaitStatus) {
      up_paused_ = true;
      return;
    }
    if (up_recheck_) {  // the status came while a write was in flight: judge what is held
      up_recheck_ = false;
      return up_filter();
    }
    up_read();
  }

  // The server's side: everything goes on, except while the answer to a websocket Upgrade is
  // awaited: then its status head is held until complete.
  void down_read() {
    upstream_.async_read_some(
        asio::buffer(down_.data() + held_[1], down_.size() - held_[1]), [self = shared_from_this()](error_code ec, size_t n) {
          if (self->closed_) return;
          if (ec) {
            // The server ended before it answered the Upgrade: the client's side, paused, would
            // never see the client end.
            if (self->up_paused_) return self->close(ec != asio::error::eof);
            return self->ended(ec, self->client_);
          }
          self->held_[1] += n;
          const bool awaiting = self->guard_->state() == HttpGuard::State::kAwaitStatus;
          const size_t ok = self->guard_->on_server(std::span<const uint8_t>(self->down_.data(), self->held_[1]));
          if (self->guard_->state() == HttpGuard::State::kRefused) return self->refuse(false, self->guard_->why());
          if (awaiting && self->guard_->state() != HttpGuard::State::kAwaitStatus) {
            if (self->up_paused_) {
              self->up_paused_ = false;
              self->up_filter();
            } else {
              self->up_recheck_ = true;
            }
          }
          if (ok == 0) return self->down_read();
          asio::async_write(self->client_, asio::buffer(self->down_.data(), ok), [self, ok](error_code ec, size_t) {
            if (self->closed_) return;
            if (ec) return self->close(true);
            std::memmove(self->down_.data(), self->down_.data() + ok, self->held_[1] - ok);
            self->held_[1] -= ok;
            self->down_read();
          });
        });
  }

  // A read of one direction ended: at its end the other side is told; with an error, reset.
  void ended(error_code ec, tcp::socket& to) {
    if (ec != asio::error::eof) return close(true);
    error_code e2;
    to.shutdown(tcp::socket::shutdown_send, e2);
    if (++ended_ == 2) close(false);
  }

  void pump(tcp::socket& from, tcp::socket& to, std::array<uint8_t, kSpliceBuffer>& buf, int dir) {
    from.async_read_some(asio::buffer(buf), [self = shared_from_this(), &from, &to, &buf, dir](error_code ec, size_t n) {
      if (self->closed_) return;
      if (ec) return self->ended(ec, to);
      asio::async_write(to, asio::buffer(buf.data(), n), [self, &from, &to, &buf, dir](error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) return self->close(true);
        self->pump(from, to, buf, dir);
      });
    });
  }

  void refuse(bool http, const std::string& why) {
    decided_ = true;
    ++p_.refused_;
    spdlog::info("egress proxy: refused a connection of {} to {}:{}{}: {}", ipv4_str(source_), ipv4_str(dst_ip_), dst_port_,
                 connected_ ? " (after its connect)" : "", why);
    if (!http) return close(true);
    auto body = std::make_shared<std::string>(forbidden_response(why));
    asio::async_write(client_, asio::buffer(*body), [self = shared_from_this(), body](error_code, size_t) {
      self->close(false);
    });
  }

  EgressProxy& p_;
  std::shared_ptr<bool> alive_;
  tcp::socket client_, upstream_;
  asio::steady_timer timer_;
  const uint32_t source_, dst_ip_;
  const uint16_t dst_port_;
  std::vector<uint8_t> peek_;
  size_t peeked_ = 0;
  bool http_ = false, decided_ = false, connected_ = false, closed_ = false;
  int ended_ = 0;
  std::string name_;      // the allowed name the connection was matched to
  uint32_t dialled_ = 0;  // the address it was sent to
  std::array<uint8_t, kSpliceBuffer> up_{}, down_{};
  // Plain HTTP only: the guard of every request, and what it has not cleared yet in each
  // direction (at the start of up_ and down_).
  std::unique_ptr<HttpGuard> guard_;
  size_t first_cleared_ = 0;
  size_t held_[2] = {0, 0};
  bool up_paused_ = false, up_recheck_ = false;
};

EgressProxy::EgressProxy(asio::io_context& io, const PolicyTable& policies, Resolver& resolver, HostAddresses& host,
                         size_t max_total)
    : io_(io), policies_(policies), resolver_(resolver), host_(host), acceptor_(io),
      share_(FairShare<uint32_t>::for_node(max_total, kMaxPerSource, kFloor)) {}

EgressProxy::~EgressProxy() {
  stop();
  *alive_ = false;
}

Result<void> EgressProxy::start(uint32_t addr, uint16_t port) {
  error_code ec;
  const asio::ip::address_v4 a(addr);
  acceptor_.open(tcp::v4(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind({a, port}, ec);
  // Every sandbox's connections queue here before the proxy judges them: a short queue is
  // filled by a burst of a few sandboxes, and the kernel then drops the SYNs of everyone
  // (the quiet sandbox's included) until they are sent again a second later. The kernel caps
  // this at net.core.somaxconn, which HostNetwork raises (host_network.cc).
  if (!ec) acceptor_.listen(kListenBacklog, ec);
  if (ec)
    return fail(ErrorCode::kInternal,
                "the egress proxy cannot listen on " + a.to_string() + ":" + std::to_string(port) + ": " + ec.message());
  accept();
  return {};
}

void EgressProxy::stop() {
  error_code ec;
  acceptor_.close(ec);
  auto all = by_source_;
  for (auto& [src, conns] : all)
    for (auto* c : conns) c->close(true);
}

void EgressProxy::accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      error_code e2;
      const auto peer = s.remote_endpoint(e2);
      sockaddr_in dst{};
      socklen_t len = sizeof dst;
      const bool have_dst = !e2 && peer.address().is_v4() &&
                            ::getsockopt(s.native_handle(), SOL_IP, SO_ORIGINAL_DST, &dst, &len) == 0;
      const uint32_t source = have_dst ? peer.address().to_v4().to_uint() : 0;
      const uint32_t dst_ip = ntohl(dst.sin_addr.s_addr);
      const uint16_t dst_port = ntohs(dst.sin_port);
      const bool to_self = dst_ip == acceptor_.local_endpoint(e2).address().to_v4().to_uint();
      if (!have_dst || to_self || !share_.try_take(source)) {
        ++refused_;
        s.set_option(asio::socket_base::linger(true, 0), e2);
        s.close(e2);
      } else {
        s.set_option(tcp::no_delay(true), e2);
        auto c = std::make_shared<Connection>(*this, std::move(s), source, dst_ip, dst_port);
        by_source_[source].insert(c.get());
        c->start();
      }
    }
    accept();
  });
}

void EgressProxy::done(Connection* c) {
  auto it = by_source_.find(c->source());
  if (it == by_source_.end() || !it->second.erase(c)) return;
  share_.give(c->source());
  if (it->second.empty()) by_source_.erase(it);
}

void EgressProxy::recheck(uint32_t source) {
  auto it = by_source_.find(source);
  spdlog::info("egress proxy: policy of {} changed: {} connections to judge again", ipv4_str(source),
               it == by_source_.end() ? 0 : it->second.size());
  if (it == by_source_.end()) return;
  auto pol = policies_.get(source);
  const auto conns = it->second;  // close() may end a connection, which leaves the set
  for (auto* c : conns)
    if (!c->still_allowed(pol.get())) c->close(true);
}

}  // namespace b3os::net
