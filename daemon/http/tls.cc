#include "daemon/http/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

namespace b3os::http {

namespace {

using Clock = std::chrono::steady_clock;

int tls_ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, 1 << 30));
}

// OpenSSL's queued errors as one line (and the queue emptied).
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out.empty() ? "no detail" : out;
}

struct CtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using CtxPtr = std::shared_ptr<SSL_CTX>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

// The poll events an SSL call that returned `rc` waits for: 0 when it failed for good.
short wants(SSL* ssl, int rc) {
  switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ: return POLLIN;
    case SSL_ERROR_WANT_WRITE: return POLLOUT;
    default: return 0;
  }
}

// A client context per CA file, made once: loading the CA for every connection would cost a
// file read and a parse per relayed request.
Result<CtxPtr> client_context(const std::string& ca_file) {
  static std::mutex mu;
  static std::map<std::string, CtxPtr> made;
  std::lock_guard lk(mu);
  if (auto it = made.find(ca_file); it != made.end()) return it->second;
  CtxPtr ctx(SSL_CTX_new(TLS_client_method()), CtxFree{});
  if (!ctx) return fail(ErrorCode::kInternal, "TLS: SSL_CTX_new: " + ssl_errors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr) != 1)
    return fail(ErrorCode::kInvalidRequest, "TLS: the cluster CA " + ca_file + " could not be read: " + ssl_errors());
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  made.emplace(ca_file, ctx);
  return ctx;
}

class TlsUpstream final : public Upstream {
 public:
  TlsUpstream(int fd, CtxPtr ctx, SslPtr ssl) : fd_(fd), ctx_(std::move(ctx)), ssl_(std::move(ssl)) {}
  ~TlsUpstream() override { ::close(fd_); }

  Result<size_t> read(char* buf, size_t cap, Deadline deadline) override {
    for (;;) {
      ERR_clear_error();
      const int n = SSL_read(ssl_.get(), buf, static_cast<int>(std::min<size_t>(cap, 1 << 30)));
      if (n > 0) return static_cast<size_t>(n);
      const int e = SSL_get_error(ssl_.get(), n);
      if (e == SSL_ERROR_ZERO_RETURN) return size_t{0};
      if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return size_t{0};  // closed without close_notify
      const short ev = wants(ssl_.get(), n);
      if (!ev) return fail(ErrorCode::kUpstreamError, "reading from the node over TLS: " + ssl_errors());
      pollfd p{fd_, ev, 0};
      if (::poll(&p, 1, tls_ms_until(deadline)) == 0) return fail(ErrorCode::kUpstreamTimeout, "the node sent nothing in time");
    }
  }

  Result<void> write(std::string_view bytes, Deadline deadline) override {
    while (!bytes.empty()) {
      ERR_clear_error();
      const int n = SSL_write(ssl_.get(), bytes.data(), static_cast<int>(std::min<size_t>(bytes.size(), 1 << 30)));
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      const short ev = wants(ssl_.get(), n);
      if (!ev) return fail(ErrorCode::kUpstreamError, "writing to the node over TLS: " + ssl_errors());
      pollfd p{fd_, ev, 0};
      if (::poll(&p, 1, tls_ms_until(deadline)) == 0) return fail(ErrorCode::kUpstreamTimeout, "the node took nothing in time");
    }
    return {};
  }

  // TLS 1.3 has a half-close: close_notify says nothing more comes; the answer may still.
  void close_write() override { (void)SSL_shutdown(ssl_.get()); }

 private:
  int fd_;
  CtxPtr ctx_;
  SslPtr ssl_;
};

bool is_ip(const std::string& host) {
  in6_addr a6;
  in_addr a4;
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

}  // namespace

Result<std::unique_ptr<Upstream>> connect_tls(const std::string& host, int port, std::chrono::milliseconds timeout,
                                              const std::string& ca_file) {
  const auto deadline = Clock::now() + timeout;
  auto ctx = client_context(ca_file);
  if (!ctx) return fail(ctx.error());
  auto fd = connect_tcp_socket(host, port, timeout);
  if (!fd) return fail(fd.error());
  SslPtr ssl(SSL_new(ctx->get()));
  if (!ssl) {
    ::close(*fd);
    return fail(ErrorCode::kInternal, "TLS: SSL_new: " + ssl_errors());
  }
  // The node's certificate must name the address dialed: its IP, or its DNS name (SNI too).
  if (is_ip(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl.get()), host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), host.c_str());
    SSL_set1_host(ssl.get(), host.c_str());
  }
  SSL_set_fd(ssl.get(), *fd);
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_connect(ssl.get());
    if (rc == 1) break;
    const short ev = wants(ssl.get(), rc);
    pollfd p{*fd, ev, 0};
    if (!ev || ::poll(&p, 1, tls_ms_until(deadline)) == 0) {
      const long verify = SSL_get_verify_result(ssl.get());
      std::string why = verify != X509_V_OK ? X509_verify_cert_error_string(verify) : ssl_errors();
      if (ev) why = "no handshake in time";
      ::close(*fd);
      return fail(ErrorCode::kNodeUnavailable, "TLS to " + host + ":" + std::to_string(port) + ": " + why);
    }
  }
  return std::unique_ptr<Upstream>(new TlsUpstream(*fd, *ctx, std::move(ssl)));
}

// ---- the front of a node's internal listener ----

struct TlsFront::State {
  CtxPtr ctx;
  int listen_fd = -1;
  int backend_port = 0;
  int max_connections = 0;
  std::atomic<bool> stopping{false};
  std::atomic<int> active{0};
  std::thread acceptor;
};

namespace {

constexpr auto kHandshakeTime = std::chrono::seconds(15);
constexpr size_t kPumpBuffer = 256 * 1024;

// One connection: the handshake, then bytes both ways until both sides are done.
void serve_tls(const std::shared_ptr<TlsFront::State>& st, int client) {
  struct Done {
    const std::shared_ptr<TlsFront::State>& st;
    int client;
    ~Done() {
      ::close(client);
      --st->active;
    }
  } done{st, client};
  SslPtr ssl(SSL_new(st->ctx.get()));
  if (!ssl) return;
  SSL_set_fd(ssl.get(), client);
  const auto deadline = Clock::now() + kHandshakeTime;
  for (;;) {
    ERR_clear_error();
    const int rc = SSL_accept(ssl.get());
    if (rc == 1) break;
    const short ev = wants(ssl.get(), rc);
    pollfd p{client, ev, 0};
    if (!ev || ::poll(&p, 1, tls_ms_until(deadline)) == 0 || st->stopping) {
      spdlog::debug("cluster TLS: a handshake failed: {}", ssl_errors());
      return;
    }
  }
  auto backend = connect_tcp_socket("127.0.0.1", st->backend_port, std::chrono::seconds(2));
  if (!backend) return;
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } close_backend{*backend};
  const int b = *backend;
  std::string up, down;  // client -> backend, backend -> client
  bool client_eof = false, backend_eof = false, backend_shut = false, client_shut = false;
  short client_wants = POLLIN;  // what the last SSL call waits for besides reading
  char buf[16 * 1024];
  while (!st->stopping) {
    bool progress = false;
    if (!client_eof && up.size() < kPumpBuffer) {
      ERR_clear_error();
      const int n = SSL_read(ssl.get(), buf, sizeof buf);
      if (n > 0) {
        up.append(buf, static_cast<size_t>(n));
        progress = true;
      } else {
        const int e = SSL_get_error(ssl.get(), n);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
          client_wants = e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN;
        } else {
          client_eof = true;  // close_notify, or the connection is gone
          progress = true;
        }
      }
    }
    if (!up.empty()) {
      const ssize_t n = ::send(b, up.data(), up.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        up.erase(0, static_cast<size_t>(n));
        progress = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return;
      }
    }
    if (client_eof && up.empty() && !backend_shut) {
      ::shutdown(b, SHUT_WR);
      backend_shut = true;
    }
    if (!backend_eof && down.size() < kPumpBuffer) {
      const ssize_t n = ::recv(b, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        down.append(buf, static_cast<size_t>(n));
        progress = true;
      } else if (n == 0) {
        backend_eof = true;
        progress = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return;
      }
    }
    if (!down.empty()) {
      ERR_clear_error();
      const int n = SSL_write(ssl.get(), down.data(), static_cast<int>(down.size()));
      if (n > 0) {
        down.erase(0, static_cast<size_t>(n));
        progress = true;
      } else {
        const short ev = wants(ssl.get(), n);
        if (!ev) return;
        client_wants = ev;
      }
    }
    if (backend_eof && down.empty() && !client_shut) {
      (void)SSL_shutdown(ssl.get());
      client_shut = true;
    }
    if (client_shut) return;  // the server closed and all it said went out
    if (progress) continue;
    pollfd p[2] = {{client, 0, 0}, {b, 0, 0}};
    if (!client_eof) p[0].events |= POLLIN;
    if (!down.empty() || client_wants == POLLOUT) p[0].events |= POLLOUT;
    if (!backend_eof) p[1].events |= POLLIN;
    if (!up.empty()) p[1].events |= POLLOUT;
    // Long-lived streams (a terminal relayed by a router) may be quiet for long: the plain
    // server behind ends what is idle, and that ends this.
    if (::poll(p, 2, 1000) < 0 && errno != EINTR) return;
  }
}

}  // namespace

Result<std::unique_ptr<TlsFront>> TlsFront::start(const std::string& host, int port, const std::string& cert_file,
                                                   const std::string& key_file, int backend_port, int max_connections) {
  auto st = std::make_shared<State>();
  st->ctx = CtxPtr(SSL_CTX_new(TLS_server_method()), CtxFree{});
  if (!st->ctx) return fail(ErrorCode::kInternal, "TLS: SSL_CTX_new: " + ssl_errors());
  SSL_CTX_set_min_proto_version(st->ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_mode(st->ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(st->ctx.get(), cert_file.c_str()) != 1)
    return fail(ErrorCode::kInvalidRequest, "TLS: the certificate " + cert_file + ": " + ssl_errors());
  if (SSL_CTX_use_PrivateKey_file(st->ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(st->ctx.get()) != 1)
    return fail(ErrorCode::kInvalidRequest, "TLS: the key " + key_file + " (or it is not the certificate's): " + ssl_errors());
  st->backend_port = backend_port;
  st->max_connections = max_connections;

  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found); rc != 0)
    return fail(ErrorCode::kInvalidRequest, "TLS listener " + host + ": " + ::gai_strerror(rc));
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool bound = fd >= 0 && ::bind(fd, found->ai_addr, found->ai_addrlen) == 0 && ::listen(fd, 1024) == 0;
  const int err = errno;
  ::freeaddrinfo(found);
  if (!bound) {
    if (fd >= 0) ::close(fd);
    return fail(ErrorCode::kInvalidRequest, "TLS listener " + host + ":" + service + ": " + std::strerror(err));
  }
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::unique_ptr<TlsFront> out(new TlsFront());
  out->port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  st->listen_fd = fd;
  st->acceptor = std::thread([st] {
    while (!st->stopping) {
      const int c = ::accept4(st->listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c < 0) {
        if (st->stopping) return;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      if (st->active.load() >= st->max_connections) {
        ::close(c);
        continue;
      }
      int on = 1;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      ::setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
      ++st->active;
      try {
        std::thread([st, c] { serve_tls(st, c); }).detach();
      } catch (const std::system_error&) {
        ::close(c);
        --st->active;
      }
    }
  });
  out->state_ = st;
  return out;
}

TlsFront::~TlsFront() {
  if (!state_) return;
  state_->stopping = true;
  ::shutdown(state_->listen_fd, SHUT_RDWR);  // wakes accept
  if (state_->acceptor.joinable()) state_->acceptor.join();
  ::close(state_->listen_fd);
}

}  // namespace b3os::http
