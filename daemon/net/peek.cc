#include "daemon/net/peek.h"

#include <algorithm>
#include <bitset>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "daemon/net/policy.h"

namespace b3os::net {
namespace {

constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kClientHello = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kHandshakeHeader = 4;
constexpr size_t kMaxRecordBody = 16384;  // 2^14 (RFC 8446 5.1)
constexpr uint16_t kServerNameExtension = 0;
// Encrypted Client Hello (encrypted_client_hello, 0xfe0d since draft 13 of its
// specification; 0xfe08 to 0xfe0c are the numbers of its earlier drafts) and the ESNI drafts'
// encrypted_server_name before it: with either, the server_name the proxy reads is an outer
// name, and the name the server acts on is hidden from it.
constexpr uint16_t kEncryptedClientHello = 0xfe0d;
constexpr uint16_t kEchDraftFirst = 0xfe08;
constexpr uint16_t kEncryptedServerName = 0xffce;
constexpr uint8_t kHostNameType = 0;

Peek invalid(std::string why) { return Peek{PeekStatus::kInvalid, {}, std::move(why)}; }
Peek done(std::string host) { return Peek{PeekStatus::kDone, std::move(host), {}}; }

std::string hex_byte(uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

// ---- TLS ----------------------------------------------------------------------------------

enum class Step { kOk, kNeedMore, kInvalid };

// The first `want` bytes of the handshake stream carried by the records at the start of
// `data`. It reads only the record headers and body bytes it needs, and stops at the first
// byte it lacks: that is what makes answers stable as more bytes arrive. `record_left` gets
// what remains of the last record entered.
Step collect_handshake(std::span<const uint8_t> data, size_t want, std::vector<uint8_t>& out,
                       size_t& record_left, std::string& why) {
  out.clear();
  record_left = 0;
  size_t pos = 0;
  while (out.size() < want) {
    if (record_left == 0) {
      if (data.size() - pos < kRecordHeader) return Step::kNeedMore;
      if (data[pos] != kHandshakeRecord) {
        why = pos == 0 ? "not a TLS handshake record"
                       : "a record of type " + std::to_string(data[pos]) + " inside the ClientHello";
        return Step::kInvalid;
      }
      if (data[pos + 1] != 3 || data[pos + 2] > 4) {
        why = "record version " + hex_byte(data[pos + 1]) + hex_byte(data[pos + 2]).substr(2);
        return Step::kInvalid;
      }
      record_left = (size_t{data[pos + 3]} << 8) | data[pos + 4];
      // Empty handshake records are forbidden (RFC 8446 5.1), and would let a client send
      // headers without end.
      if (record_left == 0 || record_left > kMaxRecordBody) {
        why = "handshake record of length " + std::to_string(record_left);
        return Step::kInvalid;
      }
      pos += kRecordHeader;
    }
    const size_t take = std::min(record_left, want - out.size());
    if (data.size() - pos < take) return Step::kNeedMore;
    out.insert(out.end(), data.begin() + pos, data.begin() + pos + take);
    pos += take;
    record_left -= take;
  }
  return Step::kOk;
}

// Bounds-checked reads over a complete message; any read past the end fails.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> d) : d_(d) {}
  size_t left() const { return d_.size() - pos_; }
  bool u8(size_t& v) { return uint(1, v); }
  bool u16(size_t& v) { return uint(2, v); }
  bool bytes(size_t n, std::span<const uint8_t>& out) {
    if (left() < n) return false;
    out = d_.subspan(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  bool uint(size_t n, size_t& v) {
    if (left() < n) return false;
    v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | d_[pos_ + i];
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

bool host_name_byte(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.';
}

// The server_name extension's body (RFC 6066 3): a list holding one host_name.
Peek parse_server_name(std::span<const uint8_t> ext) {
  Reader r(ext);
  size_t list_len = 0, type = 0, name_len = 0;
  if (!r.u16(list_len) || list_len != r.left() || list_len == 0) return invalid("server_name list length");
  std::span<const uint8_t> name;
  if (!r.u8(type) || !r.u16(name_len) || !r.bytes(name_len, name)) return invalid("server_name entry overruns");
  if (type != kHostNameType) return invalid("server_name entry of type " + std::to_string(type));
  if (r.left() != 0) return invalid("more than one server_name entry");
  if (name.empty()) return invalid("empty server_name");
  for (uint8_t c : name) {
    if (!host_name_byte(c)) return invalid("server_name holds byte " + hex_byte(c));
  }
  const std::string_view text(reinterpret_cast<const char*>(name.data()), name.size());
  std::string_view bare = text;
  if (!bare.empty() && bare.back() == '.') bare.remove_suffix(1);
  if (parse_ipv4(bare)) return invalid("server_name is an IP literal");
  auto host = canonical_host(text);
  if (!host) return invalid("server_name is not a well-formed host name");
  return done(std::move(*host));
}

// A complete ClientHello body (after the handshake header): RFC 8446 4.1.2, which also
// covers the TLS 1.0-1.2 layout.
Peek parse_client_hello(std::span<const uint8_t> body) {
  Reader r(body);
  size_t version = 0, len = 0;
  std::span<const uint8_t> skip;
  if (!r.u16(version)) return invalid("ClientHello truncated");
  if (version < 0x0301 || version > 0x0303) {
    return invalid("ClientHello version " + hex_byte(static_cast<uint8_t>(version >> 8)) +
                   hex_byte(static_cast<uint8_t>(version)).substr(2));
  }
  if (!r.bytes(32, skip)) return invalid("ClientHello truncated in random");
  if (!r.u8(len) || len > 32 || !r.bytes(len, skip)) return invalid("bad session_id");
  if (!r.u16(len) || len < 2 || len % 2 != 0 || !r.bytes(len, skip)) return invalid("bad cipher_suites");
  if (!r.u8(len) || len < 1 || !r.bytes(len, skip)) return invalid("bad compression_methods");
  if (r.left() == 0) return done("");  // no extensions at all (TLS 1.0-1.2 allow it)
  if (!r.u16(len) || len != r.left()) return invalid("extensions length does not match the ClientHello");

  // At most one of each type (RFC 8446 4.2): two server_names could tell the proxy one name
  // and the server another.
  std::bitset<65536> seen;
  std::string host;
  while (r.left() > 0) {
    size_t type = 0, ext_len = 0;
    std::span<const uint8_t> ext;
    if (!r.u16(type) || !r.u16(ext_len) || !r.bytes(ext_len, ext)) return invalid("extension overruns");
    if (seen.test(type)) {
      return invalid(type == kServerNameExtension ? "two server_name extensions"
                                                  : "two extensions of type " + std::to_string(type));
    }
    seen.set(type);
    if (type == kEncryptedServerName) {
      return invalid("ClientHello carries encrypted_server_name (ESNI, 0xffce): the name the server acts on is hidden");
    }
    if (type >= kEchDraftFirst && type <= kEncryptedClientHello) {
      return invalid("ClientHello carries encrypted_client_hello (ECH, " + hex_byte(static_cast<uint8_t>(type >> 8)) +
                     hex_byte(static_cast<uint8_t>(type)).substr(2) + "): the name the server acts on is hidden");
    }
    if (type == kServerNameExtension) {
      Peek sni = parse_server_name(ext);
      if (sni.status != PeekStatus::kDone) return sni;
      host = std::move(sni.host);
    }
  }
  return done(std::move(host));
}

// ---- HTTP ---------------------------------------------------------------------------------

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x - 'A' + 'a' : x) == (y >= 'A' && y <= 'Z' ? y - 'A' + 'a' : y);
         });
}

// `host[:port]` from a Host header or an absolute-form target: the canonical host, or a
// reason in `why`. The port is checked and dropped: the proxy connects to the port the
// sandbox dialled, whatever the request says.
std::optional<std::string> parse_authority(std::string_view a, std::string_view what, std::string& why) {
  if (a.empty()) {
    why = "empty " + std::string(what);
    return std::nullopt;
  }
  if (a.find('[') != std::string_view::npos || std::count(a.begin(), a.end(), ':') > 1) {
    why = std::string(what) + " is an IPv6 literal";
    return std::nullopt;
  }
  std::string_view host = a;
  if (size_t colon = a.find(':'); colon != std::string_view::npos) {
    host = a.substr(0, colon);
    const std::string_view port = a.substr(colon + 1);
    size_t n = 0;
    bool digits = !port.empty() && port.size() <= 5 && port[0] != '0';
    for (char c : port) {
      digits = digits && c >= '0' && c <= '9';
      n = n * 10 + static_cast<size_t>(c - '0');
    }
    if (!digits || n > 65535) {
      why = "bad port in " + std::string(what);
      return std::nullopt;
    }
  }
  std::string_view bare = host;
  if (!bare.empty() && bare.back() == '.') bare.remove_suffix(1);
  if (parse_ipv4(bare)) {
    why = std::string(what) + " is an IP literal";
    return std::nullopt;
  }
  auto canonical = canonical_host(host);
  if (!canonical) why = std::string(what) + " is not a well-formed host name";
  return canonical;
}

// The request line. An absolute-form target's host goes to `target_host`.
bool parse_request_line(std::string_view line, std::optional<std::string>& target_host, std::string& why) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    why = "request line is not METHOD SP target SP version";
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method)) {
    why = "malformed method";
    return false;
  }
  if (method == "CONNECT") {
    why = "CONNECT is not allowed";
    return false;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    why = "not HTTP/1.0 or HTTP/1.1";
    return false;
  }
  if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) { return c > 0x20 && c < 0x7F; })) {
    why = "malformed target";
    return false;
  }
  if (target[0] == '/') return true;
  constexpr std::string_view kScheme = "http://";
  if (target.size() < kScheme.size() || !iequals(target.substr(0, kScheme.size()), kScheme)) {
    why = target == "*" ? "asterisk-form target" : "target is neither /path nor http://host/path";
    return false;
  }
  const std::string_view rest = target.substr(kScheme.size());
  const std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
  if (authority.find('@') != std::string_view::npos) {
    why = "userinfo in the target";
    return false;
  }
  target_host = parse_authority(authority, "target host", why);
  return target_host.has_value();
}

}  // namespace

Peek peek_tls(std::span<const uint8_t> data) {
  const bool capped = data.size() >= kMaxPeek;
  data = data.first(std::min(data.size(), kMaxPeek));
  const auto need_more = [&] { return capped ? invalid("no complete ClientHello in the first 16 KiB") : Peek{}; };

  std::vector<uint8_t> hs;
  size_t record_left = 0;
  std::string why;
  switch (collect_handshake(data, kHandshakeHeader, hs, record_left, why)) {
    case Step::kNeedMore: return need_more();
    case Step::kInvalid: return invalid(why);
    case Step::kOk: break;
  }
  if (hs[0] != kClientHello) return invalid("handshake message of type " + std::to_string(hs[0]) + ", not ClientHello");
  const size_t body_len = (size_t{hs[1]} << 16) | (size_t{hs[2]} << 8) | hs[3];
  if (kRecordHeader + kHandshakeHeader + body_len > kMaxPeek) return invalid("ClientHello longer than 16 KiB");
  switch (collect_handshake(data, kHandshakeHeader + body_len, hs, record_left, why)) {
    case Step::kNeedMore: return need_more();
    case Step::kInvalid: return invalid(why);
    case Step::kOk: break;
  }
  // Nothing follows a ClientHello in the client's first flight, so a record that goes on
  // past it is not a real client's.
  if (record_left != 0) return invalid("data after the ClientHello in its record");
  return parse_client_hello(std::span<const uint8_t>(hs).subspan(kHandshakeHeader));
}

Peek peek_http(std::span<const uint8_t> data) {
  const bool capped = data.size() >= kMaxPeek;
  data = data.first(std::min(data.size(), kMaxPeek));
  const auto need_more = [&] { return capped ? invalid("request head longer than 16 KiB") : Peek{}; };

  std::optional<std::string> host, target_host;
  std::string why;
  size_t pos = 0;
  for (size_t line_no = 0;; ++line_no) {
    // Bytes are checked as they are scanned, in order, so that junk is refused as soon as it
    // arrives and the first fault found never depends on how much data came.
    size_t end = pos;
    for (;; ++end) {
      if (end == data.size()) return need_more();
      const uint8_t c = data[end];
      if (c == '\r') {
        if (end + 1 == data.size()) return need_more();
        if (data[end + 1] != '\n') return invalid("CR without LF");
        break;
      }
      if (c == '\n') return invalid("bare LF line ending");
      if ((c < 0x20 && c != '\t') || c == 0x7F) return invalid("control byte " + hex_byte(c) + " in the request head");
      if (line_no == 0 && c >= 0x80) return invalid("non-ASCII byte in the request line");
    }
    const std::string_view line(reinterpret_cast<const char*>(data.data()) + pos, end - pos);
    pos = end + 2;

    if (line_no == 0) {
      if (line.empty()) return invalid("empty line before the request line");
      if (!parse_request_line(line, target_host, why)) return invalid(why);
      continue;
    }
    if (line.empty()) break;  // the end of the head
    if (line[0] == ' ' || line[0] == '\t') return invalid("obs-fold (a header line starting with whitespace)");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return invalid("malformed header name");
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (!iequals(line.substr(0, colon), "host")) continue;
    if (host) return invalid("two Host headers");
    host = parse_authority(value, "Host", why);
    if (!host) return invalid(why);
  }
  if (!host) return invalid("no Host header");
  // A target naming another host than Host is how requests get past a check of one and
  // served by the other.
  if (target_host && *target_host != *host) {
    return invalid("target names " + *target_host + " but Host names " + *host);
  }
  return done(std::move(*host));
}

bool looks_like_tls(std::span<const uint8_t> data) {
  return data.size() >= 3 && data[0] == kHandshakeRecord && data[1] == 3 && data[2] <= 4;
}

std::string forbidden_response(std::string_view message) {
  const nlohmann::json error = {
      {"error", {{"code", std::string(error_code_name(ErrorCode::kEgressDenied))}, {"message", std::string(message)}}}};
  // replace: a message quoting bytes from a sandbox must not make the answer fail.
  const std::string body = error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return "HTTP/1.1 " + std::to_string(error_http_status(ErrorCode::kEgressDenied)) +
         " Forbidden\r\n"
         "Content-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) +
         "\r\n"
         "Connection: close\r\n"
         "\r\n" +
         body;
}

}  // namespace b3os::net
