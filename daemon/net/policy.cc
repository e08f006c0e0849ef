#include "daemon/net/policy.h"

#include <algorithm>

namespace b3os::net {
namespace {

constexpr uint32_t ip4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return (a << 24) | (b << 16) | (c << 8) | d;
}

constexpr std::string_view kExpectedForms =
    "expected an IPv4 address or CIDR (203.0.113.0/24), a name (api.github.com) or a wildcard "
    "(*.pypi.org), with an optional :port";

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_lower_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z'); }

// A decimal number without sign or leading zeros, at most `max`.
std::optional<uint32_t> parse_decimal(std::string_view s, uint32_t max) {
  if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  if (!std::all_of(s.begin(), s.end(), is_digit)) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + static_cast<uint64_t>(c - '0');
  if (v > max) return std::nullopt;
  return static_cast<uint32_t>(v);
}

// Length of the well-formed UTF-8 sequence at s[i], or 0 (overlong forms, surrogates and
// code points past U+10FFFF are not well-formed).
size_t utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const uint8_t c = b(0);
  size_t n = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

// The entry as messages quote it. Entries come from JSON but messages end up in logs and in
// JSON again, so anything unprintable or not UTF-8 is escaped, and a long entry is cut.
std::string in_quotes(std::string_view text) {
  constexpr size_t kMaxQuoted = 80;
  std::string out = "\"";
  size_t i = 0;
  for (; i < text.size() && i < kMaxQuoted;) {
    const auto c = static_cast<uint8_t>(text[i]);
    if (c >= 0x80) {
      if (size_t n = utf8_sequence(text, i)) {
        out.append(text.substr(i, n));
        i += n;
        continue;
      }
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7F) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  if (i < text.size()) out += "...";
  out += '"';
  return out;
}

// What is wrong with a lowercase dot-separated name, or nullopt; `labels` gets its label count.
// The one grammar of names, shared by allow entries and canonical_host.
std::optional<std::string_view> name_problem(std::string_view name, size_t& labels) {
  labels = 0;
  if (name.empty()) return "empty name";
  if (name.size() > 253) return "names are at most 253 characters";
  std::string_view last;
  size_t start = 0;
  while (start <= name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty()) return "empty label (a leading dot or two dots in a row)";
    if (label.size() > 63) return "labels are at most 63 characters";
    for (char c : label) {
      if (!is_lower_alnum(c) && c != '-') return "names hold only a-z, 0-9, '-' and '.'";
    }
    if (label.front() == '-' || label.back() == '-') return "labels cannot start or end with '-'";
    ++labels;
    last = label;
    start = dot + 1;
  }
  if (std::all_of(last.begin(), last.end(), is_digit)) {
    return "the last label is all digits, so this is neither a name nor an IPv4 address";
  }
  return std::nullopt;
}

// The checks an allow entry's name gets beyond the shared grammar: the list is written as it
// matches, so no folding of case or trailing dots here.
std::optional<std::string_view> entry_name_problem(std::string_view name, size_t& labels) {
  labels = 0;
  if (std::any_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    return "names must be lowercase";
  }
  if (!name.empty() && name.back() == '.') return "write names without a trailing dot";
  return name_problem(name, labels);
}

bool numeric_with_slash(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return is_digit(c) || c == '.' || c == '/'; });
}

struct CidrParts {
  std::optional<uint32_t> addr;
  std::optional<int> prefix;  // nullopt when the text has a malformed "/n"
};

// An address and prefix before the host-bits check, so that the caller can explain it.
CidrParts split_cidr(std::string_view text) {
  CidrParts parts;
  const size_t slash = text.find('/');
  parts.addr = parse_ipv4(text.substr(0, slash));
  if (slash == std::string_view::npos) {
    parts.prefix = 32;
  } else if (auto n = parse_decimal(text.substr(slash + 1), 32)) {
    parts.prefix = static_cast<int>(*n);
  }
  return parts;
}

}  // namespace

std::optional<uint32_t> parse_ipv4(std::string_view text) {
  uint32_t ip = 0;
  size_t start = 0;
  for (int part = 0; part < 4; ++part) {
    size_t end = part == 3 ? text.size() : text.find('.', start);
    if (end == std::string_view::npos) return std::nullopt;
    auto v = parse_decimal(text.substr(start, end - start), 255);
    if (!v) return std::nullopt;
    ip = (ip << 8) | *v;
    start = end + 1;
  }
  return ip;
}

std::string ipv4_str(uint32_t ip) {
  return std::to_string(ip >> 24) + '.' + std::to_string((ip >> 16) & 255) + '.' +
         std::to_string((ip >> 8) & 255) + '.' + std::to_string(ip & 255);
}

uint32_t Cidr::mask() const {
  return prefix <= 0 ? 0 : prefix >= 32 ? ~uint32_t{0} : ~uint32_t{0} << (32 - prefix);
}

bool Cidr::contains(uint32_t ip) const { return (ip & mask()) == (addr & mask()); }

bool Cidr::overlaps(const Cidr& other) const {
  return prefix <= other.prefix ? contains(other.addr) : other.contains(addr);
}

std::string Cidr::str() const { return ipv4_str(addr) + '/' + std::to_string(prefix); }

std::optional<Cidr> parse_cidr(std::string_view text) {
  const CidrParts parts = split_cidr(text);
  if (!parts.addr || !parts.prefix) return std::nullopt;
  Cidr c{*parts.addr, *parts.prefix};
  if ((c.addr & ~c.mask()) != 0) return std::nullopt;
  return c;
}

namespace {
std::vector<DeniedRange> built_in_denied() {
  // Broadcast comes before 240/4, which holds it, so that it is reported as broadcast.
  return {
      {{ip4(0, 0, 0, 0), 8}, "this network"},
      {{ip4(10, 0, 0, 0), 8}, "private network (RFC 1918)"},
      {{ip4(100, 64, 0, 0), 10}, "shared address space (CGNAT)"},
      {{ip4(127, 0, 0, 0), 8}, "loopback"},
      {{ip4(169, 254, 0, 0), 16}, "link-local, including the cloud metadata service"},
      {{ip4(172, 16, 0, 0), 12}, "private network (RFC 1918)"},
      {{ip4(192, 0, 0, 0), 24}, "IETF protocol assignments"},
      {{ip4(192, 168, 0, 0), 16}, "private network (RFC 1918)"},
      {{ip4(198, 18, 0, 0), 15}, "benchmarking"},
      {{ip4(224, 0, 0, 0), 4}, "multicast"},
      {{ip4(255, 255, 255, 255), 32}, "broadcast"},
      {{ip4(240, 0, 0, 0), 4}, "reserved"},
      // Cloud platform endpoints outside link-local: Azure's WireServer (VM agent, DNS,
      // health probes) answers every VM on this public address.
      {{ip4(168, 63, 129, 16), 32}, "a cloud platform endpoint (Azure WireServer)"},
  };
}

std::vector<DeniedRange>& denied_ranges() {
  static std::vector<DeniedRange> ranges = built_in_denied();
  return ranges;
}
}  // namespace

const std::vector<DeniedRange>& always_denied() { return denied_ranges(); }

void add_denied_range(const Cidr& net) {
  for (const DeniedRange& r : denied_ranges())
    if (r.net == net) return;
  denied_ranges().push_back({net, "denied by the node's operator (--deny-cidr)"});
}

std::optional<std::string_view> denied_reason(uint32_t ip) {
  for (const DeniedRange& r : always_denied()) {
    if (r.net.contains(ip)) return r.why;
  }
  return std::nullopt;
}

const DeniedRange* denied_overlap(const Cidr& net) {
  for (const DeniedRange& r : always_denied()) {
    if (r.net.overlaps(net)) return &r;
  }
  return nullptr;
}

bool AllowEntry::same_target(const AllowEntry& other) const {
  if (kind != other.kind || ports != other.ports) return false;
  return kind == Kind::kCidr ? cidr == other.cidr : name == other.name;
}

Result<AllowEntry> parse_allow_entry(std::string_view text, size_t index) {
  const std::string label = "egress.allow[" + std::to_string(index) + "] " + in_quotes(text) + ": ";
  const auto bad = [&](std::string_view why) {
    return fail(ErrorCode::kInvalidRequest, label + std::string(why));
  };

  // Refusals of whole forms first, so that each says what was expected instead of
  // complaining about a character deep inside.
  if (text.empty()) return bad("empty entry; " + std::string(kExpectedForms));
  for (char ch : text) {
    const auto c = static_cast<uint8_t>(ch);
    if (c <= 0x20 || c == 0x7F) {
      return bad("contains whitespace or a control character; " + std::string(kExpectedForms));
    }
  }
  if (std::any_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) >= 0x80; })) {
    return bad("use the punycode (xn--) form of international names");
  }
  if (text.find("://") != std::string_view::npos) {
    return bad("schemes are not allowed; write the host alone, with an optional :port (api.github.com:443)");
  }
  if (text.find('[') != std::string_view::npos || std::count(text.begin(), text.end(), ':') > 1) {
    // "x.com:80:81" is a name with two ports; IPv6 has no dot before its first colon.
    if (text.substr(0, text.find(':')).find('.') != std::string_view::npos && text.front() != '[') {
      return bad("one :port per entry; write one entry for each port");
    }
    return bad("IPv6 is not supported; use an IPv4 address, a CIDR or a name");
  }
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    if (!numeric_with_slash(text.substr(0, slash))) {
      return bad("paths are not allowed; write the host alone, with an optional :port (api.github.com:443)");
    }
  }

  AllowEntry e;
  e.text = std::string(text);
  std::string_view host = text;
  if (size_t colon = text.find(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    const std::string_view port = text.substr(colon + 1);
    if (host.empty()) return bad("no host before the port; " + std::string(kExpectedForms));
    if (port.empty()) return bad("no port after ':' (omit the ':' to allow 80 and 443)");
    auto p = parse_decimal(port, 65535);
    if (!p || *p == 0) return bad("the port must be 1..65535 in decimal, without leading zeros");
    e.ports = {static_cast<uint16_t>(*p)};
  } else {
    e.ports = {80, 443};
  }

  if (host.find('*') != std::string_view::npos) {
    if (host.substr(0, 2) != "*." || host.find('*', 1) != std::string_view::npos) {
      return bad("'*' is allowed only as a leading \"*.\" (*.pypi.org)");
    }
    e.kind = AllowEntry::Kind::kWildcard;
    e.name = std::string(host.substr(2));
    size_t labels = 0;
    if (auto why = entry_name_problem(e.name, labels)) return bad(*why);
    if (labels < 2) {
      return bad("too broad; a wildcard needs a name of at least two labels after \"*.\" (*.pypi.org)");
    }
    return e;
  }

  if (numeric_with_slash(host)) {
    const CidrParts parts = split_cidr(host);
    if (!parts.addr) {
      return bad("not a valid IPv4 address; expected four decimal parts 0..255 without leading zeros (203.0.113.7)");
    }
    if (!parts.prefix) return bad("the prefix after '/' must be 0..32 in decimal, without leading zeros");
    e.kind = AllowEntry::Kind::kCidr;
    e.cidr = Cidr{*parts.addr, *parts.prefix};
    if ((e.cidr.addr & ~e.cidr.mask()) != 0) {
      const Cidr network{e.cidr.addr & e.cidr.mask(), e.cidr.prefix};
      return bad("host bits are set; the network is " + network.str() + " (write that, or " +
                 ipv4_str(e.cidr.addr) + "/32 for the one address)");
    }
    if (const DeniedRange* r = denied_overlap(e.cidr)) {
      const bool inside = r->net.prefix <= e.cidr.prefix;
      size_t others = 0;
      for (const DeniedRange& d : always_denied()) others += (&d != r && d.net.overlaps(e.cidr)) ? 1 : 0;
      std::string why = std::string(inside ? "is inside " : "overlaps ") + r->net.str() + " (" +
                        std::string(r->why) + ")";
      if (others > 0) why += " and " + std::to_string(others) + " other always-denied ranges";
      return fail(ErrorCode::kEgressDenied, label + why + ", which no sandbox may reach");
    }
    return e;
  }

  e.kind = AllowEntry::Kind::kName;
  e.name = std::string(host);
  size_t labels = 0;
  if (auto why = entry_name_problem(e.name, labels)) return bad(*why);
  if (labels < 2) return bad("a name needs at least two labels (example.com)");
  return e;
}

Result<std::vector<AllowEntry>> parse_allow_list(const std::vector<std::string>& entries) {
  if (entries.size() > kMaxAllowEntries) {
    return fail(ErrorCode::kInvalidRequest, "egress.allow has " + std::to_string(entries.size()) +
                                                " entries; at most " + std::to_string(kMaxAllowEntries));
  }
  std::vector<AllowEntry> out;
  out.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    auto e = parse_allow_entry(entries[i], i);
    if (!e) return fail(std::move(e.error()));
    for (size_t j = 0; j < out.size(); ++j) {
      if (out[j].same_target(*e)) {
        return fail(ErrorCode::kInvalidRequest, "egress.allow[" + std::to_string(i) + "] " +
                                                    in_quotes(entries[i]) + ": duplicate of egress.allow[" +
                                                    std::to_string(j) + "]");
      }
    }
    out.push_back(std::move(*e));
  }
  return out;
}

Allowlist::Allowlist(std::vector<AllowEntry> entries) : entries_(std::move(entries)) {}

bool Allowlist::matches_name(std::string_view host, std::optional<uint16_t> port) const {
  for (const AllowEntry& e : entries_) {
    bool hit = false;
    if (e.kind == AllowEntry::Kind::kName) {
      hit = host == e.name;
    } else if (e.kind == AllowEntry::Kind::kWildcard) {
      // Strictly below the suffix: "a.pypi.org" but neither "pypi.org" nor "xpypi.org".
      hit = host.size() > e.name.size() + 1 && host.ends_with(e.name) &&
            host[host.size() - e.name.size() - 1] == '.';
    }
    if (hit && (!port || std::find(e.ports.begin(), e.ports.end(), *port) != e.ports.end())) return true;
  }
  return false;
}

bool Allowlist::allows_name(std::string_view host, uint16_t port) const {
  const auto h = canonical_host(host);
  return h && matches_name(*h, port);
}

bool Allowlist::resolvable(std::string_view name) const {
  const auto h = canonical_host(name);
  return h && matches_name(*h, std::nullopt);
}

bool Allowlist::allows_ip(uint32_t ip, uint16_t port) const {
  if (denied_reason(ip)) return false;
  for (const AllowEntry& e : entries_) {
    if (e.kind == AllowEntry::Kind::kCidr && e.cidr.contains(ip) &&
        std::find(e.ports.begin(), e.ports.end(), port) != e.ports.end()) {
      return true;
    }
  }
  return false;
}

std::vector<uint16_t> Allowlist::name_ports() const {
  std::vector<uint16_t> ports;
  for (const AllowEntry& e : entries_) {
    if (e.kind != AllowEntry::Kind::kCidr) ports.insert(ports.end(), e.ports.begin(), e.ports.end());
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

std::vector<std::pair<Cidr, uint16_t>> Allowlist::cidr_ports() const {
  std::vector<std::pair<Cidr, uint16_t>> out;
  for (const AllowEntry& e : entries_) {
    if (e.kind != AllowEntry::Kind::kCidr) continue;
    for (uint16_t p : e.ports) out.emplace_back(e.cidr, p);
  }
  return out;
}

std::optional<Cidr> reverse_name_network(std::string_view name) {
  constexpr std::string_view kSuffix = "in-addr.arpa";
  if (name == kSuffix) return Cidr{0, 0};
  if (!name.ends_with("." + std::string(kSuffix))) return std::nullopt;
  name.remove_suffix(kSuffix.size() + 1);
  uint32_t octets[4];
  int n = 0;
  for (size_t start = 0; start <= name.size();) {
    size_t dot = name.find('.', start);
    if (dot == std::string_view::npos) dot = name.size();
    const std::string_view label = name.substr(start, dot - start);
    if (n == 4 || label.empty() || label.size() > 3 || (label.size() > 1 && label[0] == '0')) return std::nullopt;
    uint32_t v = 0;
    for (char c : label) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    if (v > 255) return std::nullopt;
    octets[n++] = v;
    start = dot + 1;
  }
  uint32_t addr = 0;
  for (int i = 0; i < n; ++i) addr |= octets[n - 1 - i] << (24 - 8 * i);  // labels are reversed
  return Cidr{addr, 8 * n};
}

std::optional<std::string> canonical_host(std::string_view host) {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (host.empty() || host.size() > 253) return std::nullopt;
  std::string h(host);
  for (char& c : h) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  size_t labels = 0;
  if (name_problem(h, labels)) return std::nullopt;
  return h;
}

}  // namespace b3os::net
