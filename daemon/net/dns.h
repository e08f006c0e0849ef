#pragma once
// DNS packets for b3osd's sandbox resolver: reading a sandbox's query, answering it, asking the
// upstream resolver, and reading the upstream's reply. Pure functions on bytes; the sockets,
// the allowlist and the forbidden address ranges live in the resolver that calls them.
//
// Why ldns and not a parser of our own: the places where hand-written DNS code breaks are name
// compression (pointers forward, backward, into themselves, chains of pointers), the label rules
// (length bytes 64-191, names past 255 bytes, labels that run off the packet) and record parsing
// (rdata lengths that disagree with the rdata). These packets come from sandboxes we do not trust
// and the answers decide which addresses a sandbox may reach, so they are read by NLnet Labs'
// ldns (BSD licence, years of fuzzing and production use), not by new code. ldns stays a private
// dependency: this header exposes only plain structs and bytes. What ldns does not do for us
// (its quirks with hostile input, and how dns.cc guards against them) is noted in dns.cc.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace b3os::net {

inline constexpr uint16_t kTypeA = 1, kTypeAAAA = 28, kTypeCNAME = 5, kTypePTR = 12;
inline constexpr uint16_t kClassIN = 1;
inline constexpr int kRcodeNoError = 0, kRcodeFormErr = 1, kRcodeServFail = 2, kRcodeNxDomain = 3,
                     kRcodeRefused = 5;

/// The largest query a sandbox may send (EDNS lets UDP carry up to this; nothing legitimate needs
/// more for one question).
inline constexpr size_t kMaxQuerySize = 4096;
/// The largest upstream reply read (the most a DNS message over TCP can be).
inline constexpr size_t kMaxReplySize = 65535;
/// The UDP payload size b3osd's replies advertise and fit in when the query had EDNS (the DNS
/// flag day 2020 value: no IP fragmentation); without EDNS replies fit in 512 bytes.
inline constexpr uint16_t kEdnsPayloadSize = 1232;
/// TTL bounds for the A records handed to sandboxes: short enough that a changed allowlist or
/// upstream answer takes effect soon, long enough not to make every connection a DNS round trip.
inline constexpr uint32_t kMinTtl = 5, kMaxTtl = 300;
/// How many CNAMEs parse_upstream follows from the queried name.
inline constexpr int kMaxCnameHops = 8;

/// One question from a sandbox's query.
struct DnsQuestion {
  uint16_t id = 0;
  std::string name;  // lowercase, no trailing dot ("" for the root)
  uint16_t qtype = 0, qclass = kClassIN;
  bool rd = true;
  bool edns = false;  // the query carried an OPT record
};

/// A query from a sandbox: header QR=0, opcode QUERY, exactly one question, no answer or
/// authority records, at most one additional record and that one an OPT, at most kMaxQuerySize
/// bytes. nullopt for anything else. Names are lowercased; a name with a byte outside printable
/// ASCII (0x20-0x7e) or a label with '.' inside is refused (nullopt).
std::optional<DnsQuestion> parse_query(std::span<const uint8_t> packet);

/// The 2-byte id of any packet (nullopt if shorter than a 12-byte header), to answer FORMERR to
/// garbage that has one.
std::optional<uint16_t> packet_id(std::span<const uint8_t> packet);

/// A reply made here: same id and question, QR=1, RD copied, RA=1, the rcode (out of 0-15:
/// SERVFAIL), no records; an OPT record when the query had one. A q.name that is not a DNS name
/// (never one parse_query returned) gives a reply without a question.
std::vector<uint8_t> make_reply(const DnsQuestion& q, int rcode);

/// FORMERR with just the id (no question), for packets parse_query refused but that have a
/// header.
std::vector<uint8_t> make_formerr(uint16_t id);

/// A query b3osd sends upstream for `name` (case kept, one trailing dot allowed) and `qtype`,
/// class IN, with `id`, RD=1, no EDNS. Empty if `name` is not a DNS name (an empty label, a label
/// over 63 bytes, over 255 bytes in all).
std::vector<uint8_t> make_query(std::string_view name, uint16_t qtype, uint16_t id);

/// An IPv4 address record; ip in host byte order.
struct ARecord {
  uint32_t ip = 0;
  uint32_t ttl = 0;
};

/// What an upstream reply says about the name asked.
struct UpstreamAnswer {
  int rcode = 0;
  bool truncated = false;
  // The A records of the queried name, following CNAMEs found in the answer section (at most
  // kMaxCnameHops; a loop ends it). Each address once, with the lowest TTL it came with.
  std::vector<ARecord> a;
  std::vector<std::string> cname_chain;  // the names followed, for logs (non-printables \DDD)
};

/// Parses an upstream reply to the query (id, name, qtype that were asked). The reply must have
/// QR=1, opcode QUERY, the same id and the same single question, class IN (name compared
/// case-insensitively); otherwise an error (ErrorCode::kUpstreamError, the message says what did
/// not match). Only answer-section records of class IN whose owner is on the chain count; the
/// additional section is not read.
Result<UpstreamAnswer> parse_upstream(std::span<const uint8_t> reply, uint16_t id,
                                      std::string_view name, uint16_t qtype);

/// The reply the sandbox gets for an A question: NOERROR with the given A records (owner q.name,
/// class IN, each with its TTL clamped to [kMinTtl, kMaxTtl]), or, when `a` is empty, the given
/// rcode (NXDOMAIN by default) with no records. Records past what fits in 512 bytes (1232 with
/// EDNS) are left out rather than setting TC: a client needs only some of the addresses, and TC
/// would cost it a retry over TCP. A q.name with no wire form gets SERVFAIL without a question.
std::vector<uint8_t> make_a_reply(const DnsQuestion& q, const std::vector<ARecord>& a,
                                  int empty_rcode = kRcodeNxDomain);

/// For public mode's forwarding: whether `reply` answers `q` (QR=1, opcode QUERY, id, name, type
/// and class match) and, if so, a copy of it with its id replaced by `new_id`. nullopt if it does
/// not answer q or is not a well-formed DNS message (up to its additional section, not read).
std::optional<std::vector<uint8_t>> reanswer(std::span<const uint8_t> reply, const DnsQuestion& q,
                                             uint16_t new_id);

}  // namespace b3os::net
