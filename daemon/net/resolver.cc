#include "daemon/net/resolver.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/net/dns.h"

namespace b3os::net {

namespace asio = boost::asio;
using asio::ip::tcp;
using asio::ip::udp;
using Clock = std::chrono::steady_clock;

namespace {
constexpr auto kTcpIdle = std::chrono::seconds(10);
// A sandbox keeps using an address after its TTL (clients cache answers): the proxy still
// recognises it this much longer.
constexpr auto kLearnedGrace = std::chrono::seconds(300);

uint16_t random_id() {
  uint16_t id = 0;
  if (::getrandom(&id, sizeof id, 0) != sizeof id) id = static_cast<uint16_t>(Clock::now().time_since_epoch().count());
  return id;
}

uint32_t v4(const asio::ip::address& a) { return a.is_v4() ? a.to_v4().to_uint() : 0; }

// Holds a unit of a FairShare for as long as its handlers hold it.
struct ShareSlot {
  FairShare<uint32_t>& share;
  uint32_t source;
  ShareSlot(FairShare<uint32_t>& s, uint32_t src) : share(s), source(src) {}
  ~ShareSlot() { share.give(source); }
  ShareSlot(const ShareSlot&) = delete;
  ShareSlot& operator=(const ShareSlot&) = delete;
};

}  // namespace

void PolicyTable::set(uint32_t source, std::shared_ptr<const SourcePolicy> p) {
  std::lock_guard lk(mu_);
  by_source_[source] = std::move(p);
}

void PolicyTable::erase(uint32_t source) {
  std::lock_guard lk(mu_);
  by_source_.erase(source);
}

std::shared_ptr<const SourcePolicy> PolicyTable::get(uint32_t source) const {
  std::lock_guard lk(mu_);
  auto it = by_source_.find(source);
  return it == by_source_.end() ? nullptr : it->second;
}

Resolver::Resolver(asio::io_context& io, const PolicyTable& policies, std::vector<DnsUpstream> upstreams,
                   HostAddresses& host, size_t max_pending)
    : io_(io), policies_(policies), upstreams_(std::move(upstreams)), host_(host), udp_(io), tcp_(io),
      pending_(FairShare<uint32_t>::for_node(max_pending, kMaxPendingPerSource, kPendingFloor)) {}

Result<void> Resolver::start(uint32_t addr, uint16_t port) {
  boost::system::error_code ec;
  const asio::ip::address_v4 a(addr);
  udp_.open(udp::v4(), ec);
  if (!ec) {
    // Every sandbox's questions arrive on this one socket: a buffer of the default size
    // (about 200 packets of a question's size) is filled by a burst of a few sandboxes, and
    // the kernel drops the next question whoever sent it. 8 MiB holds thousands; FORCE since
    // rmem_max is usually lower (b3osd runs as root).
    const int bytes = kUdpReceiveBuffer;
    if (::setsockopt(udp_.native_handle(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
      spdlog::warn("resolver: cannot set an {} byte receive buffer: {}", bytes, std::strerror(errno));
    udp_.bind({a, port}, ec);
  }
  if (ec) return fail(ErrorCode::kInternal, "the resolver cannot listen on udp " + a.to_string() + ":" +
                                                std::to_string(port) + ": " + ec.message());
  tcp_.open(tcp::v4(), ec);
  if (!ec) tcp_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) tcp_.bind({a, port}, ec);
  if (!ec) tcp_.listen(128, ec);
  if (ec) return fail(ErrorCode::kInternal, "the resolver cannot listen on tcp " + a.to_string() + ":" +
                                                std::to_string(port) + ": " + ec.message());
  receive_udp();
  accept_tcp();
  return {};
}

void Resolver::stop() {
  boost::system::error_code ec;
  udp_.close(ec);
  tcp_.close(ec);
}

void Resolver::receive_udp() {
  udp_.async_receive_from(asio::buffer(udp_buf_), udp_peer_, [this](boost::system::error_code ec, size_t n) {
    if (ec == asio::error::operation_aborted || !udp_.is_open()) return;
    if (!ec) {
      const udp::endpoint peer = udp_peer_;
      answer(v4(peer.address()), std::vector<uint8_t>(udp_buf_.begin(), udp_buf_.begin() + n),
             [this, peer](std::vector<uint8_t> out) {
               boost::system::error_code ignored;
               if (!out.empty() && udp_.is_open()) udp_.send_to(asio::buffer(out), peer, 0, ignored);
             });
    }
    receive_udp();
  });
}

void Resolver::accept_tcp() {
  tcp_.async_accept([this](boost::system::error_code ec, tcp::socket s) {
    if (ec == asio::error::operation_aborted || !tcp_.is_open()) return;
    if (!ec) {
      boost::system::error_code e2;
      const uint32_t source = v4(s.remote_endpoint(e2).address());
      if (!e2 && tcp_share_.try_take(source)) serve_tcp(std::make_shared<tcp::socket>(std::move(s)), source);
    }
    accept_tcp();
  });
}

// DNS over TCP: a 2-byte length, then the message; one question at a time, closed after
// kTcpIdle without one.
void Resolver::serve_tcp(std::shared_ptr<tcp::socket> sock, uint32_t source) {
  struct Conn {
    std::shared_ptr<tcp::socket> sock;
    asio::steady_timer idle;
    std::array<uint8_t, 2> len{};
    std::vector<uint8_t> body;
    std::function<void()> next;
    ShareSlot slot;
    Conn(std::shared_ptr<tcp::socket> s, asio::io_context& io, FairShare<uint32_t>& share, uint32_t src)
        : sock(std::move(s)), idle(io), slot(share, src) {}
  };
  auto c = std::make_shared<Conn>(std::move(sock), io_, tcp_share_, source);
  std::weak_ptr<Conn> weak = c;
  c->next = [this, weak, source] {
    auto c = weak.lock();
    if (!c) return;
    c->idle.expires_after(kTcpIdle);
    c->idle.async_wait([weak](boost::system::error_code ec) {
      if (auto c = weak.lock(); c && !ec) c->sock->close(ec);
    });
    asio::async_read(*c->sock, asio::buffer(c->len), [this, c, source](boost::system::error_code ec, size_t) {
      if (ec) return (void)(c->next = nullptr);
      const size_t n = (size_t{c->len[0]} << 8) | c->len[1];
      if (n == 0 || n > kMaxQuerySize) return (void)(c->next = nullptr);
      c->body.resize(n);
      asio::async_read(*c->sock, asio::buffer(c->body), [this, c, source](boost::system::error_code ec, size_t) {
        if (ec) return (void)(c->next = nullptr);
        c->idle.cancel();
        answer(source, std::move(c->body), [c](std::vector<uint8_t> out) {
          if (out.empty() || out.size() > 65535) return (void)(c->next = nullptr);
          auto framed = std::make_shared<std::vector<uint8_t>>(out.size() + 2);
          (*framed)[0] = static_cast<uint8_t>(out.size() >> 8);
          (*framed)[1] = static_cast<uint8_t>(out.size());
          std::copy(out.begin(), out.end(), framed->begin() + 2);
          asio::async_write(*c->sock, asio::buffer(*framed), [c, framed](boost::system::error_code ec, size_t) {
            if (ec || !c->next) return (void)(c->next = nullptr);
            auto next = c->next;
            next();
          });
        });
      });
    });
  };
  auto first = c->next;
  first();
}

void Resolver::answer(uint32_t source, std::vector<uint8_t> packet, Reply reply) {
  auto q = parse_query(packet);
  if (!q) {
    if (auto id = packet_id(packet)) reply(make_formerr(*id));
    return;
  }
  auto pol = policies_.get(source);
  if (!pol || q->qclass != kClassIN) return reply(make_reply(*q, kRcodeRefused));
  // Sandboxes have no IPv6: an empty answer, at once, so clients go straight to IPv4.
  if (q->qtype == kTypeAAAA) return reply(make_reply(*q, kRcodeNoError));
  if (!pending_.try_take(source)) return reply(make_reply(*q, kRcodeServFail));
  auto slot = std::make_shared<ShareSlot>(pending_, source);

  if (pol->mode == "allowlist") {
    if (!pol->list.resolvable(q->name)) {
      ++refused_;
      return reply(make_reply(*q, kRcodeNxDomain));
    }
    // Only addresses are given out: the list allows connections, not other records.
    if (q->qtype != kTypeA) return reply(make_reply(*q, kRcodeNoError));
    ++forwarded_;
    resolve(q->name, [this, q = *q, source, reply, slot](std::vector<uint32_t> addrs, uint32_t ttl, std::string err) {
      if (!err.empty()) return reply(make_reply(q, kRcodeServFail));
      learn(source, q.name, addrs, ttl);
      std::vector<ARecord> rr;
      for (auto ip : addrs) rr.push_back({ip, ttl});
      reply(make_a_reply(q, rr, kRcodeNxDomain));
    });
    return;
  }
  // public: the question goes upstream under an id of ours, the answer comes back with its own.
  // The reverse names of always-denied ranges are internal zones: not asked.
  if (q->qtype == kTypePTR) {
    if (auto net = reverse_name_network(q->name); net && denied_overlap(*net)) {
      ++refused_;
      return reply(make_reply(*q, kRcodeNxDomain));
    }
  }
  ++forwarded_;
  DnsQuestion sent = *q;
  sent.id = random_id();
  packet[0] = static_cast<uint8_t>(sent.id >> 8);
  packet[1] = static_cast<uint8_t>(sent.id);
  ask_upstream(std::move(packet), 0, [this, q = *q, sent, reply, slot](Result<std::vector<uint8_t>> r) {
    if (!r) return reply(make_reply(q, kRcodeServFail));
    auto out = reanswer(*r, sent, q.id);
    reply(out ? filter_public(q, std::move(*out)) : make_reply(q, kRcodeServFail));
  });
}

std::vector<uint8_t> Resolver::filter_public(const DnsQuestion& q, std::vector<uint8_t> reply) {
  if (q.qtype != kTypeA) return reply;
  auto ans = parse_upstream(reply, q.id, q.name, kTypeA);
  if (!ans || ans->rcode != kRcodeNoError) return reply;
  std::vector<ARecord> kept;
  for (auto& a : ans->a)
    if (!withheld(a.ip)) kept.push_back(a);
  if (kept.size() == ans->a.size()) return reply;
  spdlog::info("resolver: a public answer for {} held {} addresses no sandbox may be given: left out", q.name,
               ans->a.size() - kept.size());
  return make_a_reply(q, kept, kRcodeNxDomain);
}

void Resolver::ask_upstream(std::vector<uint8_t> packet, size_t which,
                            std::function<void(Result<std::vector<uint8_t>>)> done) {
  if (which >= upstreams_.size()) {
    return done(fail(ErrorCode::kUpstreamUnavailable, "no upstream resolver answered"));
  }
  auto pkt = std::make_shared<std::vector<uint8_t>>(std::move(packet));
  auto sock = std::make_shared<udp::socket>(io_);
  auto timer = std::make_shared<asio::steady_timer>(io_, kUpstreamTimeout);
  auto buf = std::make_shared<std::vector<uint8_t>>(kMaxReplySize);
  auto finished = std::make_shared<bool>(false);
  boost::system::error_code ec;
  sock->open(udp::v4(), ec);
  if (!ec) sock->connect({asio::ip::address_v4(upstreams_[which].addr), upstreams_[which].port}, ec);
  if (ec) return ask_upstream(std::move(*pkt), which + 1, std::move(done));
  auto next = [this, pkt, which, done] { ask_upstream(std::move(*pkt), which + 1, done); };
  sock->async_send(asio::buffer(*pkt), [](boost::system::error_code, size_t) {});
  sock->async_receive(asio::buffer(*buf), [sock, timer, buf, finished, done, next](boost::system::error_code ec, size_t n) {
    if (*finished) return;
    *finished = true;
    timer->cancel();
    if (ec) return next();
    buf->resize(n);
    done(std::move(*buf));
  });
  timer->async_wait([sock, finished, next](boost::system::error_code ec) {
    if (ec || *finished) return;
    *finished = true;
    sock->close(ec);
    next();
  });
}

void Resolver::resolve(const std::string& name, Addresses done) {
  const auto now = Clock::now();
  if (auto hit = cache_.get(name, now)) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(hit->left).count();
    // Judged again on the way out: an address the host has taken since it was cached (or a
    // range an operator denied since) is not handed out for the rest of its TTL.
    std::erase_if(hit->addrs, [this](uint32_t ip) { return withheld(ip); });
    return done(std::move(hit->addrs), static_cast<uint32_t>(std::max<int64_t>(left, kMinTtl)), "");
  }
  auto& waiting = resolving_[name];
  waiting.push_back(std::move(done));
  if (waiting.size() > 1) return;  // already asked: this one waits for the same answer
  const uint16_t id = random_id();
  ask_upstream(make_query(name, kTypeA, id), 0, [this, name, id](Result<std::vector<uint8_t>> r) {
    auto waiters = std::move(resolving_[name]);
    resolving_.erase(name);
    std::string err;
    std::vector<uint32_t> kept;
    uint32_t ttl = kMinTtl;
    if (!r) {
      err = r.error().message;
    } else if (auto ans = parse_upstream(*r, id, name, kTypeA); !ans) {
      err = ans.error().message;
    } else if (ans->rcode != kRcodeNoError && ans->rcode != kRcodeNxDomain) {
      err = "the upstream resolver answered rcode " + std::to_string(ans->rcode);
    } else {
      uint32_t min_ttl = kMaxTtl;
      for (auto& a : ans->a) {
        if (withheld(a.ip)) {
          spdlog::info("resolver: {} resolves to {}, which no sandbox may reach{}: dropped", name, ipv4_str(a.ip),
                       denied_reason(a.ip) ? "" : " (an address of this host)");
          continue;
        }
        kept.push_back(a.ip);
        min_ttl = std::min(min_ttl, a.ttl);
      }
      ttl = kept.empty() ? kMinTtl : std::clamp(min_ttl, kMinTtl, kMaxTtl);
      cache_.put(name, kept, Clock::now() + std::chrono::seconds(ttl));
    }
    for (auto& w : waiters) w(kept, ttl, err);
  });
}

void Resolver::learn(uint32_t source, const std::string& name, const std::vector<uint32_t>& addrs, uint32_t ttl) {
  if (addrs.empty()) return;
  const auto now = Clock::now();
  std::lock_guard lk(learned_mu_);
  auto& mine = learned_[source];
  if (mine.size() + addrs.size() > kMaxLearnedPerSource) {
    std::erase_if(mine, [&](auto& e) { return e.second.until <= now; });
    if (mine.size() + addrs.size() > kMaxLearnedPerSource) mine.clear();
  }
  for (auto ip : addrs) {
    auto& l = mine[ip];
    l.names.insert(name);
    l.until = std::max(l.until, now + std::chrono::seconds(ttl) + kLearnedGrace);
  }
}

std::vector<std::string> Resolver::learned(uint32_t source, uint32_t ip) {
  std::lock_guard lk(learned_mu_);
  auto s = learned_.find(source);
  if (s == learned_.end()) return {};
  auto it = s->second.find(ip);
  if (it == s->second.end() || it->second.until <= Clock::now()) return {};
  return {it->second.names.begin(), it->second.names.end()};
}

void Resolver::forget(uint32_t source) {
  std::lock_guard lk(learned_mu_);
  learned_.erase(source);
}

}  // namespace b3os::net
