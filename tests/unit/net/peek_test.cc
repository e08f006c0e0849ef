// Tests of the connection peek (daemon/net/peek.h): TLS ClientHellos built by hand (SNI
// present, absent, split over records, arriving byte by byte, malformed in each length) and
// one captured from OpenSSL; plain HTTP request heads; the 403 answer.

#include "daemon/net/peek.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace b3os::net {
namespace {

using Bytes = std::vector<uint8_t>;

// A ClientHello from `openssl s_client -servername a.b3t.test` (OpenSSL 3.0.19), as it came
// off the socket: one record, TLS 1.3 with x25519 key share.
const uint8_t kOpensslClientHello[] = {
    0x16, 0x03, 0x01, 0x01, 0x37, 0x01, 0x00, 0x01, 0x33, 0x03, 0x03, 0x4c, 0x0b, 0x6b, 0x46, 0x78,
    0x5c, 0x78, 0xd8, 0xf8, 0xdc, 0xd0, 0x86, 0xad, 0xbc, 0x83, 0x46, 0xc1, 0x68, 0x8c, 0x3e, 0x81,
    0xed, 0x91, 0x2d, 0x80, 0xb8, 0x52, 0xd0, 0x1d, 0x30, 0xf8, 0x02, 0x20, 0x34, 0x91, 0x64, 0xa4,
    0xfb, 0x99, 0x9e, 0x2a, 0x50, 0xdc, 0x68, 0x9f, 0x3d, 0x88, 0x8b, 0xe6, 0x51, 0x0d, 0xf6, 0x2c,
    0x78, 0x7b, 0x76, 0x0b, 0x94, 0x9f, 0xb6, 0x88, 0x5e, 0x52, 0x0f, 0xf6, 0x00, 0x3e, 0x13, 0x02,
    0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
    0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27,
    0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d,
    0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0xac,
    0x00, 0x00, 0x00, 0x0f, 0x00, 0x0d, 0x00, 0x00, 0x0a, 0x61, 0x2e, 0x62, 0x33, 0x74, 0x2e, 0x74,
    0x65, 0x73, 0x74, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16, 0x00,
    0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01, 0x01,
    0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00,
    0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08,
    0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05,
    0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00,
    0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02,
    0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0xbf, 0x93, 0x4b, 0x3a,
    0xd9, 0x51, 0x02, 0x3a, 0xcc, 0x01, 0x7d, 0x41, 0xda, 0x9d, 0x5b, 0xe7, 0x1d, 0xb3, 0x39, 0x90,
    0x55, 0x2d, 0xc0, 0x44, 0x50, 0x5e, 0x76, 0xbe, 0x5d, 0x0c, 0xe5, 0x17,
};

void put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

void put24(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 16));
  put16(b, v);
}

void append(Bytes& b, const Bytes& more) { b.insert(b.end(), more.begin(), more.end()); }

Bytes str_bytes(std::string_view s) { return Bytes(s.begin(), s.end()); }

struct Extension {
  uint16_t type;
  Bytes data;
};

// The body of a server_name extension with one host_name entry.
Bytes sni_body(std::string_view name, uint8_t name_type = 0) {
  Bytes b;
  put16(b, name.size() + 3);
  b.push_back(name_type);
  put16(b, name.size());
  append(b, str_bytes(name));
  return b;
}

Extension sni(std::string_view name) { return {0, sni_body(name)}; }

// Supported groups and signature algorithms, so the hellos look like a client's.
const Extension kGroups{10, {0x00, 0x04, 0x00, 0x1d, 0x00, 0x17}};
const Extension kSigAlgs{13, {0x00, 0x04, 0x04, 0x03, 0x08, 0x04}};

// A ClientHello handshake message (header included); `with_extensions` false omits the
// extensions block entirely, as TLS 1.0-1.2 clients may.
Bytes client_hello(const std::vector<Extension>& exts, bool with_extensions = true) {
  Bytes body;
  put16(body, 0x0303);
  for (int i = 0; i < 32; ++i) body.push_back(static_cast<uint8_t>(i));  // random
  body.push_back(32);
  for (int i = 0; i < 32; ++i) body.push_back(static_cast<uint8_t>(0xA0 + i));  // session_id
  append(body, {0x00, 0x04, 0x13, 0x01, 0x13, 0x02});                            // cipher_suites
  append(body, {0x01, 0x00});                                                    // compression: null
  if (with_extensions) {
    Bytes block;
    for (const Extension& e : exts) {
      put16(block, e.type);
      put16(block, e.data.size());
      append(block, e.data);
    }
    put16(body, block.size());
    append(body, block);
  }
  Bytes hs = {0x01};
  put24(hs, body.size());
  append(hs, body);
  return hs;
}

// `hs` in handshake records of at most `fragment` bytes each.
Bytes records(const Bytes& hs, size_t fragment = 16384, uint8_t type = 22) {
  Bytes out;
  for (size_t off = 0; off < hs.size(); off += fragment) {
    const size_t n = std::min(fragment, hs.size() - off);
    append(out, {type, 0x03, 0x01});
    put16(out, n);
    out.insert(out.end(), hs.begin() + off, hs.begin() + off + n);
  }
  return out;
}

Bytes hello_with_sni(std::string_view name) { return records(client_hello({kGroups, sni(name), kSigAlgs})); }

Peek tls(const Bytes& b) { return peek_tls(b); }
Peek http(std::string_view s) { return peek_http(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size())); }

void expect_done(const Peek& p, std::string_view host) {
  EXPECT_EQ(p.status, PeekStatus::kDone) << p.why;
  EXPECT_EQ(p.host, host);
}

void expect_invalid(const Peek& p, std::string_view why_part) {
  EXPECT_EQ(p.status, PeekStatus::kInvalid) << "host " << p.host;
  EXPECT_NE(p.why.find(why_part), std::string::npos) << p.why;
}

// ---- TLS ----------------------------------------------------------------------------------

TEST(PeekTlsTest, FindsServerName) {
  expect_done(tls(hello_with_sni("api.github.com")), "api.github.com");
  expect_done(tls(hello_with_sni("API.GitHub.COM")), "api.github.com");
  expect_done(tls(hello_with_sni("a.b3t.test.")), "a.b3t.test");
}

TEST(PeekTlsTest, NoServerNameIsDoneWithoutHost) {
  expect_done(tls(records(client_hello({kGroups, kSigAlgs}))), "");
  expect_done(tls(records(client_hello({}))), "");                 // an empty extensions block
  expect_done(tls(records(client_hello({}, false))), "");          // no extensions block
}

TEST(PeekTlsTest, ReadsTheCapturedOpensslHello) {
  const Bytes b(std::begin(kOpensslClientHello), std::end(kOpensslClientHello));
  ASSERT_TRUE(looks_like_tls(b));
  expect_done(tls(b), "a.b3t.test");
  // Every shorter prefix needs more.
  for (size_t n = 0; n < b.size(); ++n) {
    EXPECT_EQ(peek_tls(std::span(b).first(n)).status, PeekStatus::kNeedMore) << n;
  }
}

TEST(PeekTlsTest, ReassemblesAHelloSplitOverRecords) {
  const Bytes hs = client_hello({kGroups, sni("files.pypi.org"), kSigAlgs});
  expect_done(tls(records(hs, hs.size() / 2 + 1)), "files.pypi.org");  // two records
  expect_done(tls(records(hs, 3)), "files.pypi.org");                  // the header itself split
  expect_done(tls(records(hs, 1)), "files.pypi.org");
}

TEST(PeekTlsTest, NeedsMoreUntilTheHelloIsComplete) {
  Bytes b = records(client_hello({kGroups, sni("files.pypi.org"), kSigAlgs}), 40);
  for (size_t n = 0; n < b.size(); ++n) {
    const Peek p = peek_tls(std::span(b).first(n));
    ASSERT_EQ(p.status, PeekStatus::kNeedMore) << n << ": " << p.why;
  }
  expect_done(tls(b), "files.pypi.org");
  // What follows the hello (a ChangeCipherSpec, early data) does not matter.
  append(b, {20, 0x03, 0x03, 0x00, 0x01, 0x01, 23, 0x03, 0x03, 0x00});
  expect_done(tls(b), "files.pypi.org");
}

TEST(PeekTlsTest, RefusesRecordsThatAreNotHandshakes) {
  const Bytes hs = client_hello({sni("a.com")});
  expect_invalid(tls(records(hs, 16384, 23)), "not a TLS handshake record");
  expect_invalid(tls(Bytes{21, 3, 3, 0, 2, 2, 40}), "not a TLS handshake record");
  expect_invalid(tls(str_bytes("GET / HTTP/1.1\r\n")), "not a TLS handshake record");
  // A record of another type in the middle of the hello.
  Bytes b = records(Bytes(hs.begin(), hs.begin() + 10));
  append(b, records(Bytes(hs.begin() + 10, hs.end()), 16384, 23));
  expect_invalid(tls(b), "record of type 23 inside the ClientHello");
  // Record versions other than 3.0-3.4.
  b = records(hs);
  b[2] = 5;
  expect_invalid(tls(b), "record version 0x0305");
  b[1] = 2;
  b[2] = 0;
  expect_invalid(tls(b), "record version");
  // A handshake message that is not a ClientHello.
  Bytes server_hello = hs;
  server_hello[0] = 2;
  expect_invalid(tls(records(server_hello)), "not ClientHello");
}

TEST(PeekTlsTest, RefusesBadRecordLengths) {
  expect_invalid(tls(Bytes{22, 3, 1, 0, 0}), "handshake record of length 0");
  expect_invalid(tls(Bytes{22, 3, 1, 0x40, 0x01}), "handshake record of length 16385");
  // A hello claiming more than fits in kMaxPeek is refused at once.
  expect_invalid(tls(Bytes{22, 3, 1, 0x00, 0x04, 0x01, 0x00, 0x40, 0x00}), "longer than 16 KiB");
  // A record that goes on past the end of the hello.
  Bytes hs = client_hello({sni("a.com")});
  Bytes b = records(hs);
  b[4] += 1;  // record length one more than the hello
  b.push_back(0);
  expect_invalid(tls(b), "data after the ClientHello");
}

TEST(PeekTlsTest, RefusesTruncatedAndOverrunningLengths) {
  const Bytes good = client_hello({kGroups, sni("a.com"), kSigAlgs});
  // Handshake length one short: the record holds a byte past the message.
  Bytes hs = good;
  hs[3] -= 1;
  expect_invalid(tls(records(hs)), "data after the ClientHello");
  // The message one short as a whole (record and handshake lengths agree): the extensions
  // block overruns it.
  hs = good;
  hs.pop_back();
  hs[3] -= 1;
  expect_invalid(tls(records(hs)), "extensions length does not match");

  // Field offsets in the body: version 4, random 6, session_id length 38, suites at 71.
  hs = good;
  hs[38] = 33;  // session_id longer than 32
  expect_invalid(tls(records(hs)), "bad session_id");
  hs = good;
  hs[72] = 3;  // odd cipher_suites length
  expect_invalid(tls(records(hs)), "bad cipher_suites");
  hs = good;
  hs[72] = 0xFF;  // cipher_suites past the end
  expect_invalid(tls(records(hs)), "bad cipher_suites");
  hs = good;
  hs[77] = 0;  // no compression methods
  expect_invalid(tls(records(hs)), "bad compression_methods");
  hs = good;
  hs[4] = 0x02;  // version 2.3
  expect_invalid(tls(records(hs)), "ClientHello version");

  // The extensions block length one more / one less than what follows.
  hs = good;
  hs[80] += 1;
  expect_invalid(tls(records(hs)), "extensions length does not match");
  hs = good;
  hs[80] -= 1;
  expect_invalid(tls(records(hs)), "extensions length does not match");
  // An extension whose length overruns the block.
  hs = good;
  hs[84] += 1;  // the first extension's length (low byte)
  expect_invalid(tls(records(hs)), "extension overruns");
}

TEST(PeekTlsTest, RefusesBadServerNames) {
  expect_invalid(tls(records(client_hello({sni("a.com"), kGroups, sni("b.com")}))), "two server_name extensions");
  expect_invalid(tls(records(client_hello({kGroups, kGroups}))), "two extensions of type 10");
  expect_invalid(tls(hello_with_sni("203.0.113.7")), "IP literal");
  expect_invalid(tls(hello_with_sni("203.0.113.7.")), "IP literal");
  expect_invalid(tls(hello_with_sni(std::string("a.com\0.evil.com", 15))), "byte 0x00");
  expect_invalid(tls(hello_with_sni("a_b.com")), "byte 0x5f");
  expect_invalid(tls(hello_with_sni("[::1]")), "byte 0x5b");
  expect_invalid(tls(hello_with_sni("a..com")), "not a well-formed host name");
  expect_invalid(tls(hello_with_sni(std::string(64, 'a') + ".com")), "not a well-formed host name");
  expect_invalid(tls(hello_with_sni("")), "empty server_name");
  expect_invalid(tls(records(client_hello({{0, sni_body("a.com", 1)}}))), "entry of type 1");
  expect_invalid(tls(records(client_hello({{0, {}}}))), "server_name list length");

  // Two host_name entries in one extension.
  Bytes two;
  put16(two, 2 * (3 + 5));
  for (const char* n : {"a.com", "b.com"}) {
    two.push_back(0);
    put16(two, 5);
    append(two, str_bytes(n));
  }
  expect_invalid(tls(records(client_hello({{0, two}}))), "more than one server_name entry");
  // A list length that disagrees with the extension's.
  Bytes body = sni_body("a.com");
  body[1] += 1;
  expect_invalid(tls(records(client_hello({{0, body}}))), "server_name list length");
  // A name length past the list.
  body = sni_body("a.com");
  body[4] += 1;
  expect_invalid(tls(records(client_hello({{0, body}}))), "server_name entry overruns");
}

// An ECH extension as a client sends it in its outer hello: type outer (0), HPKE suite
// (HKDF-SHA256, AES-128-GCM), config id, enc (an X25519 key) and the encrypted inner hello.
Extension ech(uint16_t type = 0xfe0d) {
  Bytes b = {0x00, 0x00, 0x01, 0x00, 0x01, 0x2a};
  put16(b, 32);
  append(b, Bytes(32, 0x5a));
  put16(b, 144);
  append(b, Bytes(144, 0xc3));
  return {type, b};
}

TEST(PeekTlsTest, RefusesEncryptedClientHello) {
  // The outer server_name is an allowed name; the one the server would act on is hidden.
  expect_invalid(tls(records(client_hello({kGroups, sni("a.b3t.test"), ech(), kSigAlgs}))),
                 "encrypted_client_hello (ECH, 0xfe0d)");
  // Wherever it is, with or without a server_name, split over records.
  expect_invalid(tls(records(client_hello({ech(), sni("a.b3t.test")}))), "encrypted_client_hello");
  expect_invalid(tls(records(client_hello({kGroups, ech()}))), "encrypted_client_hello");
  expect_invalid(tls(records(client_hello({kGroups, sni("a.b3t.test"), ech()}), 7)), "encrypted_client_hello");
  // Chromium's GREASE ECH looks the same as a real one (that is its point): refused too.
  expect_invalid(tls(records(client_hello({sni("a.b3t.test"), ech(0xfe0d)}))), "0xfe0d");
  // The earlier drafts' numbers, and ESNI's encrypted_server_name.
  for (uint16_t t : {0xfe08, 0xfe09, 0xfe0a, 0xfe0b, 0xfe0c}) {
    SCOPED_TRACE(t);
    expect_invalid(tls(records(client_hello({sni("a.b3t.test"), ech(t)}))), "encrypted_client_hello");
  }
  expect_invalid(tls(records(client_hello({sni("a.b3t.test"), {0xffce, Bytes(40, 1)}}))),
                 "encrypted_server_name (ESNI, 0xffce)");
  // Neighbours are ordinary unknown extensions.
  for (uint16_t t : {0xfe07, 0xfe0e, 0xffcd, 0xffcf, 0xfd00}) {
    expect_done(tls(records(client_hello({sni("a.b3t.test"), {t, Bytes(4, 0)}}))), "a.b3t.test");
  }
  // Until the hello is complete, the answer is still kNeedMore.
  const Bytes b = records(client_hello({kGroups, sni("a.b3t.test"), ech()}));
  for (size_t n = 0; n < b.size(); ++n) ASSERT_EQ(peek_tls(std::span(b).first(n)).status, PeekStatus::kNeedMore) << n;
}

TEST(PeekTlsTest, GivesUpPastMaxPeek) {
  // A padded hello in tiny records: the record headers push it past kMaxPeek.
  Extension padding{21, Bytes(12000, 0)};
  const Bytes b = records(client_hello({sni("a.com"), padding}), 10);
  ASSERT_GT(b.size(), kMaxPeek);
  EXPECT_EQ(peek_tls(std::span(b).first(kMaxPeek - 1)).status, PeekStatus::kNeedMore);
  expect_invalid(peek_tls(std::span(b).first(kMaxPeek)), "no complete ClientHello in the first 16 KiB");
  expect_invalid(tls(b), "no complete ClientHello in the first 16 KiB");
  // The same hello in one record fits.
  expect_done(tls(records(client_hello({sni("a.com"), padding}))), "a.com");
}

TEST(PeekTlsTest, LooksLikeTls) {
  EXPECT_TRUE(looks_like_tls(Bytes{0x16, 0x03, 0x01}));
  EXPECT_TRUE(looks_like_tls(Bytes{0x16, 0x03, 0x00, 0x00}));
  EXPECT_TRUE(looks_like_tls(Bytes{0x16, 0x03, 0x04}));
  EXPECT_FALSE(looks_like_tls(Bytes{0x16, 0x03, 0x05}));
  EXPECT_FALSE(looks_like_tls(Bytes{0x16, 0x02, 0x01}));
  EXPECT_FALSE(looks_like_tls(Bytes{0x17, 0x03, 0x01}));
  EXPECT_FALSE(looks_like_tls(Bytes{0x16, 0x03}));
  EXPECT_FALSE(looks_like_tls(Bytes{}));
  EXPECT_FALSE(looks_like_tls(str_bytes("GET / HTTP/1.1")));
}

// ---- HTTP ---------------------------------------------------------------------------------

TEST(PeekHttpTest, FindsHost) {
  expect_done(http("GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n"), "example.com");
  expect_done(http("GET /a?b=c HTTP/1.0\r\nUser-Agent: x\r\nHOST:Example.COM.\r\n\r\nbody bytes"), "example.com");
  expect_done(http("POST /x HTTP/1.1\r\nhost: \t example.com \t\r\nContent-Length: 0\r\n\r\n"), "example.com");
  expect_done(http("GET / HTTP/1.1\r\nHost: example.com\r\nX-Name: caf\xc3\xa9\r\n\r\n"), "example.com");
}

TEST(PeekHttpTest, HostWithPort) {
  expect_done(http("GET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"), "example.com");
  expect_done(http("GET / HTTP/1.1\r\nHost: example.com:65535\r\n\r\n"), "example.com");
  for (const char* port : {"", "0", "65536", "080", "8a", "123456", "-1"}) {
    expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com:" + std::string(port) + "\r\n\r\n"), "bad port in Host");
  }
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com:80:81\r\n\r\n"), "IPv6");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), "IPv6");
}

TEST(PeekHttpTest, RefusesBadHosts) {
  expect_invalid(http("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n"), "no Host header");
  expect_invalid(http("GET / HTTP/1.0\r\n\r\n"), "no Host header");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: a.com\r\nHost: a.com\r\n\r\n"), "two Host headers");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: a.com\r\nhost: b.com\r\n\r\n"), "two Host headers");
  expect_invalid(http("GET / HTTP/1.1\r\nHost:\r\n\r\n"), "empty Host");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: 203.0.113.7\r\n\r\n"), "IP literal");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: 203.0.113.7:80\r\n\r\n"), "IP literal");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: a_b.com\r\n\r\n"), "not a well-formed host name");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: a.com b.com\r\n\r\n"), "not a well-formed host name");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: caf\xc3\xa9.com\r\n\r\n"), "not a well-formed host name");
}

TEST(PeekHttpTest, AbsoluteFormMustAgreeWithHost) {
  expect_done(http("GET http://example.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n"), "example.com");
  expect_done(http("GET HTTP://Example.com:8080?q HTTP/1.1\r\nHost: example.com:8080\r\n\r\n"), "example.com");
  expect_done(http("GET http://example.com HTTP/1.1\r\nHost: EXAMPLE.com\r\n\r\n"), "example.com");
  expect_invalid(http("GET http://evil.com/x HTTP/1.1\r\nHost: example.com\r\n\r\n"),
                 "target names evil.com but Host names example.com");
  expect_invalid(http("GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), "userinfo");
  expect_invalid(http("GET http:///x HTTP/1.1\r\nHost: example.com\r\n\r\n"), "empty target host");
  expect_invalid(http("GET http://10.0.0.1/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), "IP literal");
  expect_invalid(http("GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), "neither /path");
  expect_invalid(http("GET example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), "neither /path");
  // Without a Host header the target's host is not enough.
  expect_invalid(http("GET http://example.com/ HTTP/1.1\r\n\r\n"), "no Host header");
}

TEST(PeekHttpTest, RefusesBadRequestLines) {
  expect_invalid(http("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"), "CONNECT");
  expect_invalid(http("OPTIONS * HTTP/1.1\r\nHost: example.com\r\n\r\n"), "asterisk-form");
  expect_invalid(http("GET / HTTP/2.0\r\nHost: example.com\r\n\r\n"), "not HTTP/1.0 or HTTP/1.1");
  expect_invalid(http("GET / http/1.1\r\nHost: example.com\r\n\r\n"), "not HTTP/1.0 or HTTP/1.1");
  expect_invalid(http("GET /  HTTP/1.1\r\nHost: example.com\r\n\r\n"), "METHOD SP target SP version");
  expect_invalid(http("GET /\tHTTP/1.1\r\nHost: example.com\r\n\r\n"), "METHOD SP target SP version");
  expect_invalid(http("GET / HTTP/1.1 x\r\nHost: example.com\r\n\r\n"), "METHOD SP target SP version");
  expect_invalid(http("G(T / HTTP/1.1\r\nHost: example.com\r\n\r\n"), "malformed method");
  expect_invalid(http("\r\nGET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), "empty line before");
  expect_invalid(http("GET /\xff HTTP/1.1\r\n"), "non-ASCII");
}

TEST(PeekHttpTest, RefusesBadHeaderLines) {
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com\r\nX-A: 1\r\n  continued\r\n\r\n"), "obs-fold");
  expect_invalid(http("GET / HTTP/1.1\r\nX-A: 1\r\n\tHost: evil.com\r\nHost: a.com\r\n\r\n"), "obs-fold");
  expect_invalid(http("GET / HTTP/1.1\r\nHost : example.com\r\n\r\n"), "malformed header name");
  expect_invalid(http("GET / HTTP/1.1\r\n: x\r\nHost: example.com\r\n\r\n"), "malformed header name");
  expect_invalid(http("GET / HTTP/1.1\r\nNo colon\r\nHost: example.com\r\n\r\n"), "malformed header name");
  expect_invalid(http("GET / HTTP/1.1\r\nX\xc3\xa9: 1\r\nHost: example.com\r\n\r\n"), "malformed header name");
  constexpr char kNul[] = "GET / HTTP/1.1\r\nHost: example.com\r\nX: a\0b\r\n\r\n";
  expect_invalid(http(std::string_view(kNul, sizeof kNul - 1)), "control byte 0x00");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com\r\nX: a\x7f\r\n\r\n"), "control byte 0x7f");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com\r\nX: a\x01\r\n\r\n"), "control byte 0x01");
}

TEST(PeekHttpTest, RefusesBareLineEndsAsSoonAsSeen) {
  expect_invalid(http("GET / HTTP/1.1\nHost: example.com\n\n"), "bare LF");
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com\n"), "bare LF");  // before the head is complete
  expect_invalid(http("GET / HTTP/1.1\r\nHost: example.com\r\n\n"), "bare LF");
  expect_invalid(http("GET / HTTP/1.1\rHost: example.com\r\n\r\n"), "CR without LF");
  EXPECT_EQ(http("GET / HTTP/1.1\r").status, PeekStatus::kNeedMore);
}

TEST(PeekHttpTest, NeedsMoreUntilTheHeadIsComplete) {
  const std::string head = "GET /index.html HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";
  for (size_t n = 0; n < head.size(); ++n) {
    const Peek p = http(std::string_view(head).substr(0, n));
    ASSERT_EQ(p.status, PeekStatus::kNeedMore) << n << ": " << p.why;
  }
  expect_done(http(head), "example.com");
}

TEST(PeekHttpTest, GivesUpPastMaxPeek) {
  std::string head = "GET / HTTP/1.1\r\nHost: example.com\r\n";
  while (head.size() < kMaxPeek + 100) head += "X-Pad: " + std::string(100, 'p') + "\r\n";
  head += "\r\n";
  EXPECT_EQ(http(std::string_view(head).substr(0, kMaxPeek - 1)).status, PeekStatus::kNeedMore);
  expect_invalid(http(std::string_view(head).substr(0, kMaxPeek)), "longer than 16 KiB");
  expect_invalid(http(head), "longer than 16 KiB");
  // A head that ends exactly at kMaxPeek is fine.
  std::string exact = "GET / HTTP/1.1\r\nHost: example.com\r\nX-Pad: ";
  exact += std::string(kMaxPeek - exact.size() - 4, 'p') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), kMaxPeek);
  expect_done(http(exact), "example.com");
}

TEST(PeekTest, ForbiddenResponse) {
  const std::string r = forbidden_response("evil.com:443 is not in the allowlist \"x\"\n\xff");
  const size_t end = r.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos);
  const std::string head = r.substr(0, end + 2);
  const std::string body = r.substr(end + 4);
  EXPECT_EQ(head.rfind("HTTP/1.1 403 Forbidden\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("\r\nContent-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(head.find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  const auto j = nlohmann::json::parse(body);
  EXPECT_EQ(j["error"]["code"], "egress_denied");
  EXPECT_EQ(j["error"]["message"], "evil.com:443 is not in the allowlist \"x\"\n\xef\xbf\xbd");
}

}  // namespace
}  // namespace b3os::net
