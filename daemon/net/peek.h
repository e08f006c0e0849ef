#pragma once
// What a sandbox's connection asks for, from its first bytes: the server_name of a TLS
// ClientHello, or the Host of a plain HTTP/1.x request. The egress proxy peeks these bytes
// before it connects anywhere, and matches the name against the sandbox's allowlist.
//
// The bytes come from untrusted code, so both peeks are strict (anything a well-behaved
// client would not send is kInvalid, never a guess), bounded (kMaxPeek) and stable: once a
// peek answers kDone or kInvalid for some bytes, it answers the same for any longer input
// that starts with them, so the caller can peek again as bytes arrive without surprises.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace b3os::net {

/// The most bytes a peek looks at: no answer within them is kInvalid.
inline constexpr size_t kMaxPeek = 16 * 1024;

enum class PeekStatus { kNeedMore, kDone, kInvalid };

/// A peek's answer.
struct Peek {
  PeekStatus status = PeekStatus::kNeedMore;
  /// kDone: the name asked for, canonical (canonical_host: lowercase, no trailing dot, no
  /// port). Empty for a ClientHello without server_name.
  std::string host;
  /// kInvalid: a short reason, for logs.
  std::string why;
};

/// A TLS ClientHello at the start of `data`. The handshake message may span several
/// consecutive handshake records (type 22), and `data` may be any prefix of the stream
/// (kNeedMore until enough bytes). Record, handshake, vector and extension lengths are
/// checked exactly, and the ClientHello must end where its last record ends. At most one of
/// each extension type; server_name must hold exactly one host_name entry whose name passes
/// canonical_host (no NUL or other bad bytes, not an IP literal). No server_name: kDone with
/// an empty host. A ClientHello carrying Encrypted Client Hello (encrypted_client_hello,
/// 0xfe0d, or an earlier draft's 0xfe08..0xfe0c) or ESNI (encrypted_server_name, 0xffce) is
/// kInvalid: its server_name is only the outer name, the one the server acts on is hidden.
Peek peek_tls(std::span<const uint8_t> data);

/// A plain HTTP/1.x request head at the start of `data`, through the blank line. Lines end
/// in CRLF (a bare LF or CR is kInvalid as soon as seen); the request line is
/// `METHOD SP target SP HTTP/1.0|HTTP/1.1` with an origin-form target ("/...") or an
/// absolute-form one ("http://host[:port]/...") naming the same host as Host. Exactly one
/// Host header (name case-insensitive), `host[:port]`, canonical_host'ed. CONNECT, the
/// asterisk form, other schemes, obs-fold (lines starting with SP or HT), malformed header
/// names and a missing Host are kInvalid. kNeedMore until the head is complete.
Peek peek_http(std::span<const uint8_t> data);

/// True when `data` starts like a TLS handshake record: 0x16 0x03 0x00..0x04. False for
/// fewer than 3 bytes.
bool looks_like_tls(std::span<const uint8_t> data);

/// The proxy's answer to a refused plain-HTTP request: a complete HTTP/1.1 403 response
/// (Content-Type: application/json, Content-Length, Connection: close) whose body is the
/// API's error object, `{"error":{"code":"egress_denied","message":...}}`. Bytes of
/// `message` that are not UTF-8 become U+FFFD.
std::string forbidden_response(std::string_view message);

}  // namespace b3os::net
