// Tests of HttpGuard (daemon/net/http_guard.h), the check of every request on a plain-HTTP
// connection: keep-alive and pipelined requests naming another host, bodies (Content-Length
// and chunked) that look like requests, h2c and the HTTP/2 preface, websocket upgrades
// answered 101 or not, framing a server could read otherwise, and the 16 KiB bound on what
// is held. A small caller (Pipe) does what the proxy does: it keeps the bytes not cleared and
// presents them again with the next ones, so every test can also be fed in pieces.

#include "daemon/net/http_guard.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "daemon/net/peek.h"

namespace b3os::net {
namespace {

using State = HttpGuard::State;

std::span<const uint8_t> bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::string get(std::string_view host, std::string_view path = "/", std::string_view extra = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: " + std::string(host) + "\r\n" + std::string(extra) + "\r\n";
}

// The proxy's side of the contract: what was not cleared is held and presented again.
struct Pipe {
  explicit Pipe(std::string host = "a.b3t.test") : g(std::move(host)) {}
  // Client bytes arrive; returns what went on to the server in this step.
  std::string client(std::string_view in) {
    held_up += in;
    const size_t n = g.on_client(bytes(held_up));
    EXPECT_LE(n, held_up.size());
    if (g.state() == State::kRefused) return "";  // the proxy resets: nothing of this read goes on
    std::string out = held_up.substr(0, n);
    held_up.erase(0, n);
    to_server += out;
    return out;
  }
  // Server bytes arrive; returns what went on to the client.
  std::string server(std::string_view in) {
    held_down += in;
    const size_t n = g.on_server(bytes(held_down));
    std::string out = held_down.substr(0, n);
    held_down.erase(0, n);
    return out;
  }
  // `in` fed in pieces of `step` bytes.
  void client_in_steps(std::string_view in, size_t step) {
    for (size_t i = 0; i < in.size() && g.state() != State::kRefused; i += step) client(in.substr(i, step));
  }
  HttpGuard g;
  std::string held_up, held_down, to_server;
};

void expect_refused(const HttpGuard& g, std::string_view why_part) {
  EXPECT_EQ(g.state(), State::kRefused);
  EXPECT_NE(g.why().find(why_part), std::string::npos) << g.why();
}

// ---- keep-alive and pipelining -------------------------------------------------------------

TEST(HttpGuardTest, KeepAliveWithTheSameHostGoesOn) {
  Pipe p;
  const std::string r1 = get("a.b3t.test", "/one"), r2 = get("A.B3T.test.:80", "/two");
  EXPECT_EQ(p.client(r1), r1);
  EXPECT_EQ(p.client(r2), r2);
  EXPECT_EQ(p.g.state(), State::kRequests);
  EXPECT_EQ(p.g.requests(), 2u);
  // The server's bytes are not inspected outside an upgrade.
  EXPECT_EQ(p.server("HTTP/1.1 200 OK\r\n\r\nanything"), "HTTP/1.1 200 OK\r\n\r\nanything");
}

TEST(HttpGuardTest, KeepAliveRequestNamingAnotherHostIsRefused) {
  Pipe p;
  const std::string r1 = get("a.b3t.test");
  EXPECT_EQ(p.client(r1), r1);
  EXPECT_EQ(p.client(get("b.b3t.test", "/secret")), "");
  expect_refused(p.g, "request 2: names b.b3t.test, but the connection was allowed for a.b3t.test");
  EXPECT_EQ(p.to_server, r1);
  // Refused is final: nothing more is cleared, either way.
  EXPECT_EQ(p.g.on_client(bytes(r1)), 0u);
  EXPECT_EQ(p.g.on_server(bytes("HTTP/1.1 200 OK\r\n\r\n")), 0u);
}

TEST(HttpGuardTest, PipelinedRequestsInOneRead) {
  Pipe ok;
  const std::string two = get("a.b3t.test", "/1") + get("a.b3t.test", "/2");
  EXPECT_EQ(ok.client(two), two);
  EXPECT_EQ(ok.g.requests(), 2u);

  HttpGuard g("a.b3t.test");
  const std::string first = get("a.b3t.test", "/1");
  const std::string bad = first + get("b.b3t.test", "/2") + get("a.b3t.test", "/3");
  // What comes before the refused request is counted as cleared; the proxy sends none of it.
  EXPECT_EQ(g.on_client(bytes(bad)), first.size());
  expect_refused(g, "request 2: names b.b3t.test");
}

TEST(HttpGuardTest, EveryRequestIsReadAsStrictlyAsTheFirst) {
  const std::string first = get("a.b3t.test");
  for (const auto& [second, why] : std::vector<std::pair<std::string, std::string>>{
           {"GET http://b.b3t.test/ HTTP/1.1\r\nHost: a.b3t.test\r\n\r\n", "target names b.b3t.test"},
           {"GET / HTTP/1.1\r\nHost: a.b3t.test\r\nHost: b.b3t.test\r\n\r\n", "two Host headers"},
           {"GET / HTTP/1.1\r\nX: 1\r\n Host: b.b3t.test\r\nHost: a.b3t.test\r\n\r\n", "request 2: "},
           {"GET / HTTP/1.1\r\nHost: 198.51.100.11\r\n\r\n", "IP literal"},
           {"GET / HTTP/1.1\r\n\r\n", "no Host header"},
           {"GET / HTTP/1.0\r\n\r\n", "no Host header"},
           {"GET / HTTP/1.1\nHost: a.b3t.test\n\n", "request 2: "},
           {"CONNECT b.b3t.test:443 HTTP/1.1\r\nHost: b.b3t.test:443\r\n\r\n", "request 2: "},
           {"\r\nGET / HTTP/1.1\r\nHost: a.b3t.test\r\n\r\n", "request 2: "},
           {"get / HTTP/1.1\r\nHost: b.b3t.test\r\n\r\n", "names b.b3t.test"},
           {std::string("\x16\x03\x01\x00\x05hello", 10), "request 2: "},
       }) {
    Pipe p;
    EXPECT_EQ(p.client(first), first);
    EXPECT_EQ(p.client(second), "") << second;
    expect_refused(p.g, why);
  }
}

// ---- bodies -------------------------------------------------------------------------------

TEST(HttpGuardTest, ContentLengthBodyIsSkippedEvenWhenItLooksLikeARequest) {
  const std::string inner = get("b.b3t.test", "/inner");
  const std::string post = "POST /p HTTP/1.1\r\nHost: a.b3t.test\r\nContent-Length: " + std::to_string(inner.size()) +
                           "\r\n\r\n" + inner;
  const std::string all = post + get("a.b3t.test", "/after");
  for (size_t step : {all.size(), size_t{1}, size_t{7}, size_t{40}}) {
    Pipe p;
    p.client_in_steps(all, step);
    EXPECT_EQ(p.g.state(), State::kRequests) << step << ": " << p.g.why();
    EXPECT_EQ(p.to_server, all) << step;
    EXPECT_EQ(p.g.requests(), 2u) << step;
  }
  // And a request after the body naming another host is still refused.
  Pipe p;
  p.client(post);
  p.client("PUT /x HTTP/1.1\r\nHost: b.b3t");
  EXPECT_EQ(p.g.state(), State::kRequests);  // held: an incomplete head clears nothing
  EXPECT_EQ(p.to_server, post);
  p.client(".test\r\n\r\n");
  expect_refused(p.g, "names b.b3t.test");
}

TEST(HttpGuardTest, BodyBytesGoOnAsTheyArrive) {
  Pipe p;
  const std::string head = "PUT /big HTTP/1.1\r\nHost: a.b3t.test\r\nContent-Length: 1000000\r\n\r\n";
  EXPECT_EQ(p.client(head), head);
  size_t sent = 0;
  const std::string piece(4096, 'x');
  while (sent + piece.size() <= 1000000) {
    ASSERT_EQ(p.client(piece), piece);  // nothing of a body is held
    sent += piece.size();
  }
  const std::string last(1000000 - sent, 'y');
  EXPECT_EQ(p.client(last + get("a.b3t.test")), last + get("a.b3t.test"));
  EXPECT_EQ(p.g.requests(), 2u);
}

TEST(HttpGuardTest, ChunkedBodyIsSkippedEvenWhenItLooksLikeARequest) {
  const std::string inner = get("b.b3t.test", "/inner");
  char size_hex[16];
  std::snprintf(size_hex, sizeof size_hex, "%zx", inner.size());
  const std::string post = "POST /c HTTP/1.1\r\nHost: a.b3t.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           std::string(size_hex) + ";ext=1\r\n" + inner + "\r\n3\r\nabc\r\n0\r\n\r\n";
  const std::string all = post + get("a.b3t.test", "/after");
  for (size_t step : {all.size(), size_t{1}, size_t{3}, size_t{17}}) {
    Pipe p;
    p.client_in_steps(all, step);
    EXPECT_EQ(p.g.state(), State::kRequests) << step << ": " << p.g.why();
    EXPECT_EQ(p.to_server, all) << step;
    EXPECT_EQ(p.g.requests(), 2u) << step;
  }
  // After the chunked body, the next head is judged.
  Pipe p;
  p.client(post + get("b.b3t.test"));
  expect_refused(p.g, "request 2: names b.b3t.test");
  EXPECT_EQ(p.to_server, "");  // refused in the same read: the proxy sent none of it
}

TEST(HttpGuardTest, FramingAServerCouldReadOtherwiseIsRefused) {
  const std::string head = "POST / HTTP/1.1\r\nHost: a.b3t.test\r\n";
  for (const auto& [fields, why] : std::vector<std::pair<std::string, std::string>>{
           {"Transfer-Encoding: gzip\r\n", "Transfer-Encoding other than chunked"},
           {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding other than chunked"},
           {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "request 1: "},
           {"Transfer-Encoding: xchunked\r\n", "Transfer-Encoding other than chunked"},
           {"Content-Length: 5\r\nContent-Length: 5\r\n", "two Content-Length headers"},
           {"Content-Length: 5, 5\r\n", "not a plain number"},
           {"Content-Length: +5\r\n", "request 1: "},
           {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "request 1: "},
           {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "request 1: "},
       }) {
    HttpGuard g("a.b3t.test");
    const std::string r = head + fields + "\r\n";
    EXPECT_EQ(g.on_client(bytes(r)), 0u) << fields;
    expect_refused(g, why);
  }
  HttpGuard g10("a.b3t.test");
  const std::string r10 = "POST / HTTP/1.0\r\nHost: a.b3t.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  EXPECT_EQ(g10.on_client(bytes(r10)), 0u);
  expect_refused(g10, "Transfer-Encoding in an HTTP/1.0 request");

  // Trailer fields (a Host among them would be one the guard never judged).
  Pipe p;
  const std::string chunked = head + "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nHost: b.b3t.test\r\n\r\n";
  p.client(chunked);
  expect_refused(p.g, "trailer fields");
  // A bad chunk size.
  Pipe q;
  q.client(head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n");
  expect_refused(q.g, "request 1: not HTTP/1.x");
}

// ---- HTTP/2 and upgrades ------------------------------------------------------------------

TEST(HttpGuardTest, H2cIsRefusedFirstOrLater) {
  const std::string h2c = get("a.b3t.test", "/", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n");
  HttpGuard first("a.b3t.test");
  EXPECT_EQ(first.on_client(bytes(h2c)), 0u);
  expect_refused(first, "request 1: an upgrade to HTTP/2 (h2c)");

  Pipe later;
  later.client(get("a.b3t.test"));
  later.client(h2c);
  expect_refused(later.g, "request 2: an upgrade to HTTP/2 (h2c)");

  for (const std::string extra : {"Upgrade: websocket, h2c\r\n", "Upgrade: H2C\r\n", "HTTP2-Settings: AAMAAABk\r\n"}) {
    HttpGuard g("a.b3t.test");
    g.on_client(bytes(get("a.b3t.test", "/", extra)));
    expect_refused(g, "h2c");
  }
}

TEST(HttpGuardTest, Http2PrefaceIsRefused) {
  const std::string preface = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + std::string("\0\0\0\4\0\0\0\0\0", 9);
  HttpGuard g("a.b3t.test");
  EXPECT_EQ(g.on_client(bytes(preface)), 0u);
  expect_refused(g, "request 1: the HTTP/2 connection preface");
  Pipe p;
  p.client(get("a.b3t.test"));
  p.client(preface);
  expect_refused(p.g, "request 2: the HTTP/2 connection preface");
}

TEST(HttpGuardTest, OtherUpgradesAreRefused) {
  for (const std::string extra : {"Upgrade: TLS/1.0\r\nConnection: Upgrade\r\n", "Upgrade: websocket2\r\n"}) {
    HttpGuard g("a.b3t.test");
    g.on_client(bytes(get("a.b3t.test", "/", extra)));
    expect_refused(g, "only websocket is allowed");
  }
  HttpGuard two("a.b3t.test");
  two.on_client(bytes(get("a.b3t.test", "/", "Upgrade: websocket\r\nUpgrade: websocket\r\n")));
  expect_refused(two, "two Upgrade headers");
}

const std::string kWebsocket = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

TEST(HttpGuardTest, WebsocketThen101IsATunnel) {
  Pipe p;
  const std::string up = get("a.b3t.test", "/ws", kWebsocket);
  // The upgrade request goes on; what the client sends after it is held until the status.
  const std::string frames = "\x81\x05hello" + get("b.b3t.test");
  EXPECT_EQ(p.client(up + frames), up);
  EXPECT_EQ(p.g.state(), State::kAwaitStatus);
  EXPECT_EQ(p.held_up, frames);
  EXPECT_EQ(p.client(""), "");  // still held
  // The status head may come in pieces; a 100 Continue first is skipped.
  EXPECT_EQ(p.server("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Swi"), "HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(p.g.state(), State::kAwaitStatus);
  const std::string rest = "tching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x02hi";
  EXPECT_EQ(p.server(rest), "HTTP/1.1 101 Swi" + rest);
  EXPECT_EQ(p.g.state(), State::kTunnel);
  // Now every byte goes on, both ways, whatever it looks like.
  EXPECT_EQ(p.client(""), frames);
  EXPECT_EQ(p.client(get("b.b3t.test")), get("b.b3t.test"));
  EXPECT_EQ(p.server("\x81\x01x"), "\x81\x01x");
}

TEST(HttpGuardTest, WebsocketRefusedByTheServerResumesInspection) {
  for (const std::string answer : {"HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nno!",
                                   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"}) {
    Pipe p;
    const std::string up = get("a.b3t.test", "/ws", kWebsocket);
    const std::string next = get("a.b3t.test", "/next");
    EXPECT_EQ(p.client(up + next), up);
    EXPECT_EQ(p.g.state(), State::kAwaitStatus);
    EXPECT_EQ(p.server(answer), answer);  // the answer goes on whole, its body uninspected
    EXPECT_EQ(p.g.state(), State::kRequests);
    EXPECT_EQ(p.client(""), next);  // the held request is judged now
    // And a later request naming another host, or another upgrade, is refused.
    p.client(get("b.b3t.test"));
    expect_refused(p.g, "request 3: names b.b3t.test");
    Pipe q;
    q.client(up);
    q.server(answer);
    q.client(get("a.b3t.test", "/again", kWebsocket));
    expect_refused(q.g, "request 2: a websocket Upgrade after the connection's first request");
  }
}

TEST(HttpGuardTest, WebsocketOnlyAsTheFirstRequestAndWithoutABody) {
  Pipe p;
  p.client(get("a.b3t.test"));
  p.client(get("a.b3t.test", "/ws", kWebsocket));
  expect_refused(p.g, "request 2: a websocket Upgrade after the connection's first request");

  HttpGuard body("a.b3t.test");
  body.on_client(bytes(get("a.b3t.test", "/ws", kWebsocket + "Content-Length: 4\r\n") + "abcd"));
  expect_refused(body, "without a body");
  HttpGuard http10("a.b3t.test");
  http10.on_client(bytes("GET / HTTP/1.0\r\nHost: a.b3t.test\r\n" + kWebsocket + "\r\n"));
  expect_refused(http10, "HTTP/1.1 request without a body");
  // Content-Length: 0 is no body.
  HttpGuard zero("a.b3t.test");
  zero.on_client(bytes(get("a.b3t.test", "/ws", kWebsocket + "Content-Length: 0\r\n")));
  EXPECT_EQ(zero.state(), State::kAwaitStatus);
}

TEST(HttpGuardTest, AnUnreadableAnswerToTheUpgradeIsRefused) {
  Pipe p;
  p.client(get("a.b3t.test", "/ws", kWebsocket));
  p.server("SSH-2.0-OpenSSH\r\n\r\n");
  expect_refused(p.g, "not an HTTP/1.x response");
  Pipe q;
  q.client(get("a.b3t.test", "/ws", kWebsocket));
  q.server("HTTP/1.1 101 OK\r\nX: " + std::string(kMaxPeek, 'x'));
  expect_refused(q.g, "the answer to the websocket Upgrade");
}

TEST(HttpGuardTest, ABadHeadInPiecesIsHeldUntilCompleteThenRefused) {
  // Beast reads a head that came in pieces once its blank line is there: until then nothing
  // of it goes on, and then it is refused as it would have been at once.
  Pipe p;
  p.client(get("a.b3t.test"));
  for (std::string_view piece : {"PRI * HT", "TP/2.0\r\n", "junk"}) {
    EXPECT_EQ(p.client(piece), "");
    EXPECT_EQ(p.g.state(), State::kRequests);
  }
  p.client("\r\n\r\n");
  expect_refused(p.g, "request 2: the HTTP/2 connection preface");
  HttpGuard whole("a.b3t.test");
  const std::string all = get("a.b3t.test") + "PRI * HTTP/2.0\r\njunk";
  EXPECT_EQ(whole.on_client(bytes(all)), get("a.b3t.test").size());
  expect_refused(whole, "request 2: the HTTP/2 connection preface");
}

// ---- bounds -------------------------------------------------------------------------------

TEST(HttpGuardTest, HoldsAtMost16KiB) {
  // A head that never ends.
  Pipe p;
  p.client("GET / HTTP/1.1\r\nHost: a.b3t.test\r\n");
  const std::string pad = "X-Pad: " + std::string(100, 'p') + "\r\n";
  while (p.g.state() == State::kRequests && p.held_up.size() < 2 * kMaxPeek) p.client(pad);
  EXPECT_EQ(p.g.state(), State::kRefused);
  EXPECT_LE(p.held_up.size(), kMaxPeek + pad.size());
  EXPECT_EQ(p.to_server, "");

  // A chunk-size line that never ends (chunk extensions).
  Pipe c;
  c.client("POST / HTTP/1.1\r\nHost: a.b3t.test\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b");
  while (c.g.state() == State::kRequests && c.held_up.size() < 2 * kMaxPeek) c.client(";x=" + std::string(97, 'y'));
  expect_refused(c.g, "16 KiB");

  // A head of 16 KiB exactly is fine, as for the first request.
  std::string exact = "GET / HTTP/1.1\r\nHost: a.b3t.test\r\nX-Pad: ";
  exact += std::string(kMaxPeek - exact.size() - 4, 'p') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), kMaxPeek);
  Pipe e;
  e.client(get("a.b3t.test"));
  EXPECT_EQ(e.client(exact), exact) << e.g.why();
  Pipe big;
  big.client(exact.substr(0, exact.size() - 2) + "X: y\r\n\r\n");
  EXPECT_EQ(big.g.state(), State::kRefused);
}

TEST(HttpGuardTest, AnswersDoNotDependOnHowBytesArrive) {
  // A mixed connection, fed whole and in every piece size up to 64: the same bytes go on and
  // the same refusal comes, wherever the reads split it.
  const std::string ok = get("a.b3t.test", "/1") +
                         "POST /2 HTTP/1.1\r\nHost: a.b3t.test\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nGET \r\n0\r\n\r\n" +
                         "PUT /3 HTTP/1.1\r\nHost: a.b3t.test:80\r\nContent-Length: 3\r\n\r\nabc";
  const std::string bad = ok + get("b.b3t.test", "/4");
  for (size_t step = 1; step <= 64; ++step) {
    Pipe p;
    p.client_in_steps(ok, step);
    EXPECT_EQ(p.to_server, ok) << step;
    EXPECT_EQ(p.g.requests(), 3u) << step;
    Pipe q;
    q.client_in_steps(bad, step);
    // What went on is the allowed requests, but for what the refusing read brought and
    // what was held before it.
    EXPECT_EQ(ok.substr(0, q.to_server.size()), q.to_server) << step;
    EXPECT_LE(ok.size() - q.to_server.size(), q.held_up.size()) << step;
    expect_refused(q.g, "request 4: names b.b3t.test");
  }
}

}  // namespace
}  // namespace b3os::net
