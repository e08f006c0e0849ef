#pragma once
// Egress policy: the entries of a sandbox's `egress.allow` list, the ranges no sandbox may ever
// reach, and the matching of what a connection asks for against a parsed list. Pure: no
// sockets, no resolver; the firewall, the resolver and the egress proxy ask these questions.
//
// Syntax of an `egress.allow` entry (the API docs quote this block):
//
//   entry    = target [ ":" port ]
//   target   = ipv4 [ "/" prefix ] | name | "*." name
//
// - At most 256 entries; two entries that parse to the same target and port are a 400.
// - Port: optional trailing ":N", N decimal 1..65535 without leading zeros, one port per
//   entry. Without a port an entry allows 80 and 443. "host:" and ":443" are errors.
// - IPv4: a strict dotted quad ("203.0.113.7", four decimal parts 0..255, no leading zeros)
//   or a CIDR ("203.0.113.0/24", prefix 0..32). The address must be the network address:
//   "10.1.2.3/8" is a 400 that names 10.0.0.0/8. An entry inside or overlapping an
//   always-denied range (below; 0.0.0.0/0 overlaps them all) is a 403 egress_denied naming
//   the range and why it is denied.
// - Name ("api.github.com"): labels of a-z, 0-9 and '-', each 1..63 characters, not starting
//   or ending with '-'; at most 253 characters; at least two labels; the last label not all
//   digits (so "1.2.3" is not a name). Lowercase only (uppercase is a 400, not folded, so
//   the list reads as it matches), international names in their punycode form ("xn--..."),
//   no trailing dot.
// - Wildcard ("*.pypi.org"): "*." then a name of at least two labels. It matches names below
//   that name at any depth ("files.pypi.org", "a.b.pypi.org"), never the name itself: allow
//   "pypi.org" as well to reach it. "*.com" is too broad; '*' anywhere else is a 400.
// - Anything else is a 400 that says what form is expected: an empty entry, whitespace, a
//   scheme ("https://x.com"), a path ("x.com/a"), IPv6 ("IPv6 is not supported").
//
// Messages name the entry: `egress.allow[3] "Foo.com": names must be lowercase`.
//
// Matching: connections are matched case-insensitively, with one trailing dot tolerated,
// because that is how clients write SNI, Host and DNS questions; see canonical_host().

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace b3os::net {

/// The most entries an `egress.allow` list may hold.
inline constexpr size_t kMaxAllowEntries = 256;

// IPv4 addresses are uint32_t in host byte order throughout.

/// A strict dotted quad: four decimal parts 0..255, no leading zeros ("01"), no spaces.
std::optional<uint32_t> parse_ipv4(std::string_view text);
/// "a.b.c.d".
std::string ipv4_str(uint32_t ip);

/// An IPv4 network: an address whose host bits are zero, and a prefix length 0..32.
struct Cidr {
  uint32_t addr = 0;
  int prefix = 32;

  /// The netmask of `prefix` (0 for /0).
  uint32_t mask() const;
  bool contains(uint32_t ip) const;
  /// Whether the two networks share any address (one contains the other).
  bool overlaps(const Cidr& other) const;
  /// "a.b.c.d/n", always with the prefix.
  std::string str() const;
  bool operator==(const Cidr&) const = default;
};
/// "a.b.c.d" (a /32) or "a.b.c.d/n" with 0 <= n <= 32. nullopt for anything else, including
/// an address with host bits set ("10.1.2.3/8"); parse_allow_entry explains that case.
std::optional<Cidr> parse_cidr(std::string_view text);

/// A range no sandbox may reach, and why (for messages: "private network (RFC 1918)").
struct DeniedRange {
  Cidr net;
  std::string_view why;
};
/// What no sandbox may reach, ever: this network, private (RFC 1918), CGNAT, loopback,
/// link-local (cloud metadata), IETF protocol assignments, benchmarking, multicast, reserved
/// and broadcast; cloud platform endpoints outside those (Azure's 168.63.129.16); and what the
/// operator added (add_denied_range). Not the documentation ranges (TEST-NET-1/2/3): tests use
/// them as the public internet.
const std::vector<DeniedRange>& always_denied();
/// Adds `net` to the always-denied ranges (the operator's --deny-cidr). At start-up only,
/// before any thread reads the ranges: they are not locked.
void add_denied_range(const Cidr& net);
/// The reason if ip is in an always-denied range, else nullopt.
std::optional<std::string_view> denied_reason(uint32_t ip);
/// The first always-denied range that overlaps `net`, if any.
const DeniedRange* denied_overlap(const Cidr& net);

/// One parsed `egress.allow` entry.
struct AllowEntry {
  enum class Kind { kCidr, kName, kWildcard };
  Kind kind = Kind::kName;
  Cidr cidr;                    // kCidr
  std::string name;             // kName: the name; kWildcard: the suffix after "*." ("pypi.org")
  std::vector<uint16_t> ports;  // the explicit port, or {80, 443}
  std::string text;             // the entry as given

  /// Same target and ports (the text may differ: "203.0.113.7" is "203.0.113.7/32").
  bool same_target(const AllowEntry& other) const;
};

/// Parses one entry; `index` is its position in the list, for messages
/// (`egress.allow[index] "text": why`). 400 kInvalidRequest for a malformed entry, 403
/// kEgressDenied for a CIDR that reaches an always-denied range.
Result<AllowEntry> parse_allow_entry(std::string_view text, size_t index);
/// Parses a whole list: at most kMaxAllowEntries, no two entries with the same target and
/// ports. The first bad entry's error.
Result<std::vector<AllowEntry>> parse_allow_list(const std::vector<std::string>& entries);

/// A parsed list, for matching what a connection asks for.
class Allowlist {
 public:
  Allowlist() = default;
  explicit Allowlist(std::vector<AllowEntry> entries);

  /// A connection naming `host` (TLS SNI or HTTP Host; any letter case, one trailing dot
  /// tolerated) to `port`: allowed by a name or wildcard entry with that port?
  bool allows_name(std::string_view host, uint16_t port) const;
  /// May `name` be resolved (DNS)? True when a name or wildcard entry matches it, whatever
  /// the port.
  bool resolvable(std::string_view name) const;
  /// A connection to ip:port allowed by a CIDR entry? Never for an always-denied address,
  /// whatever the entries say (they are checked when parsed; this holds for hand-made lists).
  bool allows_ip(uint32_t ip, uint16_t port) const;
  /// Every port some name/wildcard entry uses (sorted, unique): connections to these are
  /// sent to the egress proxy.
  std::vector<uint16_t> name_ports() const;
  /// Every (cidr, port) of CIDR entries, in entry order: allowed directly by the firewall.
  std::vector<std::pair<Cidr, uint16_t>> cidr_ports() const;
  const std::vector<AllowEntry>& entries() const { return entries_; }

 private:
  // Whether a name or wildcard entry matches the canonical `host`, on `port` or (nullopt) any.
  bool matches_name(std::string_view host, std::optional<uint16_t> port) const;

  std::vector<AllowEntry> entries_;
};

/// The network a reverse-lookup name names: "d.c.b.a.in-addr.arpa" is a.b.c.d/32, a shorter
/// one ("b.a.in-addr.arpa") a.b.0.0/16, "in-addr.arpa" 0.0.0.0/0. nullopt for any other name
/// (lowercase, no trailing dot, as canonical_host gives names).
std::optional<Cidr> reverse_name_network(std::string_view name);

/// The canonical form of a host name as a connection gives it (TLS SNI, HTTP Host, a DNS
/// question): lowercase, without the one trailing dot tolerated. nullopt if malformed.
/// Accepted: labels of letters (any case), digits and '-', 1..63 characters, not starting or
/// ending with '-', at most 253 characters, the last label not all digits (IP literals are
/// not names). '_' is refused: no allow entry can contain it, and public CAs no longer issue
/// certificates for such names. One label ("localhost") is accepted here, as a name that no
/// entry matches, so that callers can answer "not allowed" rather than "malformed".
std::optional<std::string> canonical_host(std::string_view host);

}  // namespace b3os::net
