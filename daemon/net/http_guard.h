#pragma once
// Every request of a plain-HTTP connection through the egress proxy, not just the first.
//
// The proxy decides where a plain-HTTP connection goes from its first request's Host
// (peek.h). HTTP/1.1 lets a client send more requests on that connection (keep-alive) or
// several at once (pipelining), and a front end serving many names routes each by its own
// Host: checked on the first request only, the second could name any of them. HttpGuard reads
// the client's bytes as a server would, request after request, and clears them for the server
// only once each request's head has been judged:
//   - every head must pass peek_http (the same strict reading as the first request) and name
//     the connection's allowed host (Host, and an absolute-form target with it);
//   - bodies are skipped by their framing (Content-Length or chunked, read by Boost.Beast's
//     parser), so a body that looks like a request is never taken for one, and a request is
//     never hidden in what the guard took for a body: framing a server could read otherwise
//     (Transfer-Encoding other than exactly `chunked`, or in HTTP/1.0; a Content-Length that is
//     not one plain number; trailer fields) is refused;
//   - HTTP/2 is refused in each of its HTTP/1 doors: `Upgrade: h2c`, an `HTTP2-Settings`
//     header, the prior-knowledge preface (`PRI * HTTP/2.0`); so are CONNECT and an Upgrade
//     to anything but `websocket`;
//   - a websocket Upgrade is allowed as the connection's first request only. After it no more
//     client bytes are cleared until the server's first final status: 101 makes the connection
//     a tunnel (nothing more is inspected: it is a websocket to the allowed host), anything else
//     resumes the inspection of requests (1xx other than 101 are skipped).
//
// Sans-IO: the caller owns the bytes. Each call is given every byte of its direction that was
// not cleared yet (those held back by the last call first, then the new ones) and answers how
// many at the start may go on; the caller sends those, keeps the rest and presents them again
// with more. At most kMaxPeek bytes are ever held (a head, a chunk-size line, a status head):
// a call that would hold more refuses. A refusal is final (state() kRefused, why()). A head is
// judged once it is complete (its blank line has come); a bad one may be refused sooner when
// its bytes came at once, never later than that, and nothing of it goes on before.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace b3os::net {

class HttpGuard {
 public:
  enum class State {
    kRequests,     // reading requests
    kAwaitStatus,  // a websocket Upgrade went out: no client byte until the server's final status
    kTunnel,       // the server switched protocols (101): every byte goes on, both ways
    kRefused,      // a request was refused: the connection must end
  };

  /// `host`: the name the connection was allowed for (canonical_host form).
  explicit HttpGuard(std::string host);
  ~HttpGuard();
  HttpGuard(const HttpGuard&) = delete;
  HttpGuard& operator=(const HttpGuard&) = delete;

  /// Client-to-server bytes not cleared yet. Returns how many at the start may be sent to the
  /// server. In kAwaitStatus it clears nothing: the caller must stop reading the client until
  /// state() changes, then present what it holds again. In kTunnel it clears everything. The
  /// call that refuses returns how many bytes came before the refused part (a caller may drop
  /// them too: the proxy does); calls after a refusal clear nothing.
  size_t on_client(std::span<const uint8_t> data);

  /// Server-to-client bytes not cleared yet. Only in kAwaitStatus are any held (until the
  /// status head is complete); otherwise everything is cleared at once.
  size_t on_server(std::span<const uint8_t> data);

  State state() const { return state_; }
  /// Why the connection was refused (kRefused), for logs and the 403's message.
  const std::string& why() const { return why_; }
  /// Requests whose heads were cleared so far.
  size_t requests() const { return requests_; }

  class RequestParser;
  class ResponseParser;

 private:
  void refuse(std::string why);
  // Judges a complete request head (its bytes, which Beast has just read); false: refused.
  bool judge_head(std::span<const uint8_t> head);

  const std::string host_;
  State state_ = State::kRequests;
  std::string why_;
  size_t requests_ = 0;
  size_t pending_ = 0;       // bytes of the current request head Beast consumed, not cleared
  size_t resp_pending_ = 0;  // the same for the status head awaited
  std::unique_ptr<RequestParser> request_;
  std::unique_ptr<ResponseParser> response_;
};

}  // namespace b3os::net
