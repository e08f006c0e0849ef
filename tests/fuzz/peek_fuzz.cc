// libFuzzer target for the connection peek (daemon/net/peek.h). Arbitrary bytes go to
// peek_tls and peek_http, whole and as prefixes: an answer of kDone or kInvalid on a prefix
// must be the answer for the whole, and a host from kDone must be canonical. The first byte
// may ask for the rest to be wrapped as a ClientHello in records of a chosen size, so that
// the fuzzer reaches the hello's insides without first having to find its lengths. The input
// is also the message of forbidden_response, whose body must be JSON of its Content-Length.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/net/peek.h"
#include "daemon/net/policy.h"

namespace {

using b3os::net::Peek;
using b3os::net::PeekStatus;

void require(bool ok) {
  if (!ok) std::abort();
}

// `body` as a ClientHello handshake message, in handshake records of `fragment` bytes.
std::vector<uint8_t> wrap_hello(std::span<const uint8_t> body, size_t fragment) {
  std::vector<uint8_t> hs = {0x01, static_cast<uint8_t>(body.size() >> 16), static_cast<uint8_t>(body.size() >> 8),
                             static_cast<uint8_t>(body.size())};
  hs.insert(hs.end(), body.begin(), body.end());
  std::vector<uint8_t> out;
  for (size_t off = 0; off < hs.size(); off += fragment) {
    const size_t n = std::min(fragment, hs.size() - off);
    out.insert(out.end(), {0x16, 0x03, 0x01, static_cast<uint8_t>(n >> 8), static_cast<uint8_t>(n)});
    out.insert(out.end(), hs.begin() + off, hs.begin() + off + n);
  }
  return out;
}

void check_answer(const Peek& p, bool tls) {
  switch (p.status) {
    case PeekStatus::kNeedMore:
      require(p.host.empty() && p.why.empty());
      break;
    case PeekStatus::kDone:
      require(p.why.empty());
      if (p.host.empty()) {
        require(tls);
      } else {
        require(b3os::net::canonical_host(p.host) == p.host);
        require(!b3os::net::parse_ipv4(p.host));
      }
      break;
    case PeekStatus::kInvalid:
      require(p.host.empty() && !p.why.empty());
      break;
  }
}

bool same(const Peek& a, const Peek& b) { return a.status == b.status && a.host == b.host && a.why == b.why; }

// The whole input's answer, and the answers of some of its prefixes (all of them for short
// inputs): a prefix that answers must answer as the whole does.
template <class PeekFn>
void check_stable(PeekFn peek, std::span<const uint8_t> d, uint32_t seed, bool tls) {
  const Peek whole = peek(d);
  check_answer(whole, tls);
  std::vector<size_t> cuts;
  if (d.size() <= 64) {
    for (size_t n = 0; n < d.size(); ++n) cuts.push_back(n);
  } else {
    cuts = {0, 1, 5, 9, d.size() / 2, d.size() - 1};
    for (int i = 0; i < 8; ++i) {
      seed = seed * 1103515245u + 12345u;
      cuts.push_back((seed >> 8) % d.size());
    }
  }
  for (size_t n : cuts) {
    const Peek part = peek(d.first(n));
    check_answer(part, tls);
    if (part.status != PeekStatus::kNeedMore) require(same(part, whole));
  }
  // More bytes after the whole never change an answer either.
  if (whole.status != PeekStatus::kNeedMore) {
    std::vector<uint8_t> longer(d.begin(), d.end());
    longer.insert(longer.end(), {0x16, 0x03, 0x01, '\r', '\n', 0x00});
    require(same(peek(longer), whole));
  }
}

void check_forbidden(std::string_view message) {
  const std::string r = b3os::net::forbidden_response(message);
  require(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
  const size_t end = r.find("\r\n\r\n");
  require(end != std::string::npos);
  const std::string head = r.substr(0, end + 2);
  const std::string body = r.substr(end + 4);
  require(head.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  require(head.find("\r\nContent-Type: application/json\r\n") != std::string::npos);
  require(head.find("\r\nConnection: close\r\n") != std::string::npos);
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  require(!j.is_discarded());
  require(j.at("error").at("code") == "egress_denied");
  const std::string got = j.at("error").at("message").get<std::string>();
  bool utf8 = true;
  try {
    (void)nlohmann::json(std::string(message)).dump();
  } catch (const nlohmann::json::exception&) {
    utf8 = false;
  }
  if (utf8) require(got == message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const size_t fragment = std::max<size_t>(1, data[1]) * ((mode & 2) ? 64 : 1);
  const uint32_t seed = static_cast<uint32_t>(size) * 2654435761u ^ data[1];
  const std::span<const uint8_t> rest(data + 2, size - 2);

  std::vector<uint8_t> input;
  if (mode & 1) {
    input = wrap_hello(rest, fragment);
  } else {
    input.assign(rest.begin(), rest.end());
  }
  const std::span<const uint8_t> in(input);
  check_stable(b3os::net::peek_tls, in, seed, true);
  check_stable(b3os::net::peek_http, in, seed, false);
  require(b3os::net::looks_like_tls(in) == (in.size() >= 3 && in[0] == 0x16 && in[1] == 3 && in[2] <= 4));
  if (b3os::net::peek_tls(in).status == PeekStatus::kDone) require(b3os::net::looks_like_tls(in));
  check_forbidden(std::string_view(reinterpret_cast<const char*>(rest.data()), rest.size()));
  return 0;
}
