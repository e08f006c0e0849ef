// libFuzzer target for HttpGuard (daemon/net/http_guard.h), the check of every request on a
// plain-HTTP connection. Arbitrary client bytes (optionally after an allowed request or a
// websocket Upgrade, so that the fuzzer starts past the first head) and server bytes are fed
// whole and in pieces of a chosen size, the way the proxy feeds them (bytes not cleared are
// presented again with the next ones). Checked:
//   - in pieces the guard never clears more than whole, nor refuses what whole does not; when
//     neither refuses, the same bytes went on and the same requests were counted. A head
//     refused whole may still be held in pieces (Beast reads a head that came in pieces only
//     once its blank line is there): then ending it with a blank line refuses it;
//   - a prefix of the input never refuses what the whole input does not, nor clears more;
//   - the cleared bytes start with a head peek_http reads as the allowed host;
//   - nothing held ever reaches kMaxPeek while requests are read;
//   - the server's bytes are held only while a status is awaited, and all go on after it.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include "daemon/net/http_guard.h"
#include "daemon/net/peek.h"

namespace {

using b3os::net::HttpGuard;
using State = HttpGuard::State;

constexpr std::string_view kHost = "a.b3t.test";

void require(bool ok) {
  if (!ok) std::abort();
}

std::span<const uint8_t> bytes(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// The proxy's loop: returns the bytes that went on; nothing of a refusing read goes on.
struct Feed {
  std::string held, sent;
  bool client = true;
  void step(HttpGuard& g, std::string_view in) {
    held += in;
    const size_t n = client ? g.on_client(bytes(held)) : g.on_server(bytes(held));
    require(n <= held.size());
    if (g.state() == State::kRefused) return;
    sent += held.substr(0, n);
    held.erase(0, n);
    if (client && g.state() == State::kRequests) require(held.size() < b3os::net::kMaxPeek);
  }
  void all(HttpGuard& g, std::string_view in, size_t piece) {
    for (size_t i = 0; i < in.size() && g.state() != State::kRefused; i += piece) step(g, in.substr(i, piece));
  }
};

void check_cleared_start(const std::string& sent) {
  if (sent.empty()) return;
  const auto pk = b3os::net::peek_http(bytes(sent));
  require(pk.status == b3os::net::PeekStatus::kDone && pk.host == kHost);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t mode = data[0];
  const size_t piece = 1 + data[1] % 97;
  const size_t client_len = std::min<size_t>(size - 4, (size_t{data[2]} << 8) | data[3]);
  const std::string_view rest(reinterpret_cast<const char*>(data + 4), size - 4);
  std::string client;
  if (mode & 1) client = "GET / HTTP/1.1\r\nHost: a.b3t.test\r\n\r\n";
  if (mode & 2)
    client += "GET /ws HTTP/1.1\r\nHost: a.b3t.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
  client += rest.substr(0, client_len);
  const std::string server(rest.substr(client_len));

  // Whole.
  HttpGuard whole{std::string(kHost)};
  const size_t cleared = whole.on_client(bytes(client));
  require(cleared <= client.size());
  if (whole.state() != State::kRefused) check_cleared_start(client.substr(0, cleared));
  if (whole.state() == State::kRefused) require(!whole.why().empty());

  // In pieces.
  HttpGuard parts{std::string(kHost)};
  Feed up;
  up.all(parts, client, piece);
  require(client.compare(0, up.sent.size(), up.sent) == 0);
  check_cleared_start(up.sent);
  if (parts.state() == State::kRefused) require(whole.state() == State::kRefused);
  if (whole.state() != State::kRefused) {
    require(parts.state() == whole.state());
    require(up.sent.size() == cleared);
    require(parts.requests() == whole.requests());
  } else {
    require(up.sent.size() <= cleared);
    if (parts.state() != State::kRefused) {
      require(parts.state() == State::kRequests);
      up.step(parts, "\r\n\r\n");
      require(parts.state() == State::kRefused);
    }
  }

  // A prefix answers no more than the whole.
  HttpGuard prefix{std::string(kHost)};
  const size_t cut = client.size() * (data[1] & 0x7F) / 128;
  const size_t pc = prefix.on_client(bytes(std::string_view(client).substr(0, cut)));
  require(pc <= cleared || whole.state() == State::kRefused);
  if (prefix.state() == State::kRefused) require(whole.state() == State::kRefused);

  // The server's side: held only while a status is awaited.
  for (HttpGuard* g : {&whole, &parts}) {
    const State before = g->state();
    Feed down;
    down.client = false;
    down.all(*g, server, g == &whole ? server.size() + 1 : piece);
    if (before != State::kAwaitStatus) {
      require(g->state() == before);
      require(before == State::kRefused ? down.sent.empty() : down.sent == server);
      continue;
    }
    if (g->state() == State::kRequests || g->state() == State::kTunnel) require(down.sent == server);
    if (g->state() == State::kAwaitStatus) require(down.held.size() < b3os::net::kMaxPeek);
    // What the client sent after the upgrade goes on (tunnel), is judged (requests) or waits.
    const std::string after = g == &whole ? client.substr(cleared) : up.held;
    const size_t n = g->on_client(bytes(after));
    if (g->state() == State::kTunnel) require(n == after.size());
    if (g->state() == State::kAwaitStatus) require(n == 0);
    require(n <= after.size());
  }
  return 0;
}
