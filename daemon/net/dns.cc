#include "daemon/net/dns.h"

#include <ldns/ldns.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

// ldns 1.8.3 quirks with hostile input (read in its wire2host.c and packet.c, then reproduced),
// and what this file does about each:
//  - TSIG records in the additional section leak: ldns_wire2pkt hands each to ldns_pkt_set_tsig,
//    which overwrites the previous one without freeing it, and it decrements ARCOUNT inside the
//    loop that reads the section, so each TSIG also hides the last record from it (three or
//    more TSIGs leak). A sandbox or upstream could leak memory in b3osd with every packet.
//    Queries may have at most one additional record (checked on the raw header first), and
//    replies reach ldns with ARCOUNT zeroed, since nothing here reads their additional section.
//  - OPT records are counted in a uint8_t: with 256 of them (class 0) ldns reports ARCOUNT 256,
//    an empty additional section and no EDNS. Same guard.
//  - A record's rdata may end before its RDLENGTH says and the next record is then read from
//    inside it (an A with RDLENGTH 20 yields its address and then a second A made of the 16
//    bytes after it; an A with RDLENGTH 0 has no address field at all), and a name in rdata is
//    read to the end of the packet, not of the rdata. So every rdata field is checked for
//    presence, type and size before use. Records that ldns frames differently than a strict
//    parser would are not refused: only an upstream reply can carry them, and whoever can forge
//    one of those can send a well-formed A record just as well.
//  - Compression pointers may point forward and into themselves; ldns stops after 65535 hops,
//    which bounds the work per name, so nothing more is needed than keeping packets bounded.

namespace b3os::net {
namespace {

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
struct RrFree {
  void operator()(ldns_rr* r) const { ldns_rr_free(r); }
};
struct RdfFree {
  void operator()(ldns_rdf* r) const { ldns_rdf_deep_free(r); }
};
struct WireFree {
  void operator()(uint8_t* p) const { std::free(p); }  // ldns allocates with malloc (LDNS_FREE)
};
using PktPtr = std::unique_ptr<ldns_pkt, PktFree>;
using RrPtr = std::unique_ptr<ldns_rr, RrFree>;
using RdfPtr = std::unique_ptr<ldns_rdf, RdfFree>;
using WirePtr = std::unique_ptr<uint8_t, WireFree>;

constexpr size_t kHeaderSize = 12;
constexpr size_t kFlagsAt = 2, kQdcountAt = 4, kAncountAt = 6, kNscountAt = 8, kArcountAt = 10;
constexpr size_t kUdpPayloadSize = 512;
// Bytes an A record adds to a reply made here: the owner compresses to a pointer to the
// question (2, or 1 for the root), then type, class, TTL, RDLENGTH (10) and the address (4).
constexpr size_t kARecordWireSize = 16;
constexpr size_t kOptWireSize = 11;
// Far more than fit in any reply made here; bounds the work a hostile upstream can cause.
constexpr size_t kMaxARecords = 64;

uint16_t read_u16(std::span<const uint8_t> p, size_t at) {
  return static_cast<uint16_t>(p[at] << 8 | p[at + 1]);
}

uint8_t ascii_lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? static_cast<uint8_t>(c + 32) : c; }

PktPtr parse_wire(std::span<const uint8_t> bytes, ldns_status* status) {
  ldns_pkt* raw = nullptr;
  *status = ldns_wire2pkt(&raw, bytes.data(), bytes.size());
  PktPtr pkt(raw);
  if (*status != LDNS_STATUS_OK) return nullptr;
  return pkt;
}

std::vector<uint8_t> to_wire(const ldns_pkt* pkt) {
  uint8_t* raw = nullptr;
  size_t size = 0;
  const ldns_status status = ldns_pkt2wire(&raw, pkt, &size);
  WirePtr owned(raw);
  if (status != LDNS_STATUS_OK || raw == nullptr) return {};
  return std::vector<uint8_t>(raw, raw + size);
}

// Our text form of a name to DNS wire form, label by label, bytes as they are: ldns's own
// ldns_dname_new_frm_str reads presentation format, where '\' escapes, which would make
// "a\046b" a different name on the wire than the text parse_query handed out.
std::optional<std::vector<uint8_t>> encode_name(std::string_view name) {
  if (!name.empty() && name.back() == '.') name.remove_suffix(1);
  std::vector<uint8_t> wire;
  wire.reserve(name.size() + 2);
  size_t start = 0;
  while (!name.empty()) {
    const size_t dot = name.find('.', start);
    const std::string_view label =
        name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > LDNS_MAX_LABELLEN) return std::nullopt;
    wire.push_back(static_cast<uint8_t>(label.size()));
    wire.insert(wire.end(), label.begin(), label.end());
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  wire.push_back(0);
  if (wire.size() > LDNS_MAX_DOMAINLEN) return std::nullopt;
  return wire;
}

RdfPtr name_rdf(const std::vector<uint8_t>& wire) {
  return RdfPtr(ldns_dname_new_frm_data(static_cast<uint16_t>(wire.size()), wire.data()));
}

// A name ldns decoded, as lowercase text. Strict (for questions): nullopt for a byte outside
// printable ASCII or a '.' inside a label, which would make the text name a different name than
// the wire one. Escaped (for logs): such bytes, and '\', become \DDD. ldns hands out names
// already decompressed and checked, but its rdata quirks make the bounds worth checking anyway.
std::optional<std::string> name_text(const ldns_rdf* dname, bool escape) {
  if (dname == nullptr || ldns_rdf_get_type(dname) != LDNS_RDF_TYPE_DNAME) return std::nullopt;
  const uint8_t* data = ldns_rdf_data(dname);
  const size_t size = ldns_rdf_size(dname);
  std::string out;
  size_t pos = 0;
  while (pos < size) {
    const size_t len = data[pos];
    if (len == 0) {
      if (pos + 1 != size) return std::nullopt;
      return out;
    }
    if (len > LDNS_MAX_LABELLEN || pos + 1 + len > size) return std::nullopt;
    if (pos > 0) out += '.';
    for (size_t i = pos + 1; i <= pos + len; ++i) {
      const uint8_t c = ascii_lower(data[i]);
      const bool plain = c >= 0x20 && c <= 0x7e && c != '.';
      if (plain && !(escape && c == '\\')) {
        out += static_cast<char>(c);
      } else if (!escape) {
        return std::nullopt;
      } else {
        out += '\\';
        out += static_cast<char>('0' + c / 100);
        out += static_cast<char>('0' + c / 10 % 10);
        out += static_cast<char>('0' + c % 10);
      }
    }
    pos += 1 + len;
  }
  return std::nullopt;
}

// Case-insensitive equality of two wire names. Lowercasing the label length bytes too is
// harmless: they are at most 63, below 'A'.
bool same_name(const ldns_rdf* a, const ldns_rdf* b) {
  if (a == nullptr || b == nullptr) return false;
  const size_t size = ldns_rdf_size(a);
  if (size != ldns_rdf_size(b)) return false;
  const uint8_t* x = ldns_rdf_data(a);
  const uint8_t* y = ldns_rdf_data(b);
  for (size_t i = 0; i < size; ++i) {
    if (ascii_lower(x[i]) != ascii_lower(y[i])) return false;
  }
  return true;
}

// Moves rr into the packet's section; on failure rr still owns it and frees it.
bool push(ldns_pkt* pkt, ldns_pkt_section section, RrPtr& rr) {
  if (!ldns_pkt_push_rr(pkt, section, rr.get())) return false;
  rr.release();
  return true;
}

RrPtr question_rr(const std::vector<uint8_t>& name_wire, uint16_t qtype, uint16_t qclass) {
  RrPtr rr(ldns_rr_new());
  RdfPtr owner = name_rdf(name_wire);
  if (!rr || !owner) return nullptr;
  ldns_rr_set_owner(rr.get(), owner.release());
  ldns_rr_set_type(rr.get(), static_cast<ldns_rr_type>(qtype));
  ldns_rr_set_class(rr.get(), static_cast<ldns_rr_class>(qclass));
  ldns_rr_set_question(rr.get(), true);
  return rr;
}

// A reply header for q and its question (left out when q.name has no wire form).
PktPtr new_reply(const DnsQuestion& q, int rcode,
                 const std::optional<std::vector<uint8_t>>& name_wire) {
  PktPtr pkt(ldns_pkt_new());
  if (!pkt) return nullptr;
  ldns_pkt_set_id(pkt.get(), q.id);
  ldns_pkt_set_qr(pkt.get(), true);
  ldns_pkt_set_opcode(pkt.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_rd(pkt.get(), q.rd);
  ldns_pkt_set_ra(pkt.get(), true);
  // Only 4 bits go in the header; ldns would let a larger value spill into the other flags.
  ldns_pkt_set_rcode(pkt.get(),
                     static_cast<uint8_t>(rcode >= 0 && rcode <= 15 ? rcode : kRcodeServFail));
  if (name_wire) {
    RrPtr rr = question_rr(*name_wire, q.qtype, q.qclass);
    if (!rr || !push(pkt.get(), LDNS_SECTION_QUESTION, rr)) return nullptr;
  }
  // RFC 6891: answer an EDNS query with an OPT record; setting the size is what makes ldns
  // write one.
  if (q.edns) ldns_pkt_set_edns_udp_size(pkt.get(), kEdnsPayloadSize);
  return pkt;
}

// Parses an upstream reply and checks that it answers the question; the packet on success.
Result<PktPtr> parse_answer_to(std::span<const uint8_t> reply, uint16_t id,
                               const std::vector<uint8_t>& name_wire, uint16_t qtype,
                               uint16_t qclass) {
  if (reply.size() < kHeaderSize) {
    return fail(ErrorCode::kUpstreamError,
                "DNS reply of " + std::to_string(reply.size()) + " bytes is shorter than a header");
  }
  if (reply.size() > kMaxReplySize) {
    return fail(ErrorCode::kUpstreamError, "DNS reply of " + std::to_string(reply.size()) +
                                               " bytes is larger than a DNS message can be");
  }
  // ARCOUNT zeroed: see the TSIG leak at the top. ldns then stops after the authority section.
  std::vector<uint8_t> copy(reply.begin(), reply.end());
  copy[kArcountAt] = 0;
  copy[kArcountAt + 1] = 0;
  ldns_status status = LDNS_STATUS_OK;
  PktPtr pkt = parse_wire(copy, &status);
  if (!pkt) {
    return fail(ErrorCode::kUpstreamError,
                std::string("malformed DNS reply: ") + ldns_get_errorstr_by_id(status));
  }
  if (!ldns_pkt_qr(pkt.get()))
    return fail(ErrorCode::kUpstreamError, "DNS reply has QR=0 (a query)");
  if (ldns_pkt_get_opcode(pkt.get()) != LDNS_PACKET_QUERY) {
    return fail(
        ErrorCode::kUpstreamError,
        "DNS reply has opcode " + std::to_string(ldns_pkt_get_opcode(pkt.get())) + ", not QUERY");
  }
  if (ldns_pkt_id(pkt.get()) != id) {
    return fail(ErrorCode::kUpstreamError, "DNS reply id " +
                                               std::to_string(ldns_pkt_id(pkt.get())) +
                                               " does not match query id " + std::to_string(id));
  }
  if (ldns_pkt_qdcount(pkt.get()) != 1) {
    return fail(
        ErrorCode::kUpstreamError,
        "DNS reply has " + std::to_string(ldns_pkt_qdcount(pkt.get())) + " questions, not 1");
  }
  const ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(pkt.get()), 0);
  RdfPtr asked = name_rdf(name_wire);
  if (question == nullptr || !asked) return fail(ErrorCode::kInternal, "DNS reply: out of memory");
  if (!same_name(ldns_rr_owner(question), asked.get())) {
    return fail(ErrorCode::kUpstreamError,
                "DNS reply is for name '" + name_text(ldns_rr_owner(question), true).value_or("?") +
                    "', not '" + name_text(asked.get(), true).value_or("?") + "'");
  }
  if (ldns_rr_get_type(question) != qtype) {
    return fail(ErrorCode::kUpstreamError, "DNS reply is for type " +
                                               std::to_string(ldns_rr_get_type(question)) +
                                               ", not " + std::to_string(qtype));
  }
  if (ldns_rr_get_class(question) != qclass) {
    return fail(ErrorCode::kUpstreamError, "DNS reply is for class " +
                                               std::to_string(ldns_rr_get_class(question)) +
                                               ", not " + std::to_string(qclass));
  }
  return pkt;
}

// The first rdata field of rr when it is a name (CNAME target), else null.
const ldns_rdf* rdata_name(const ldns_rr* rr) {
  if (ldns_rr_rd_count(rr) < 1) return nullptr;
  const ldns_rdf* rdf = ldns_rr_rdf(rr, 0);
  if (rdf == nullptr || ldns_rdf_get_type(rdf) != LDNS_RDF_TYPE_DNAME) return nullptr;
  return rdf;
}

bool on_chain(const std::vector<const ldns_rdf*>& chain, const ldns_rdf* name) {
  return std::any_of(chain.begin(), chain.end(),
                     [&](const ldns_rdf* n) { return same_name(n, name); });
}

}  // namespace

std::optional<DnsQuestion> parse_query(std::span<const uint8_t> packet) {
  if (packet.size() < kHeaderSize || packet.size() > kMaxQuerySize) return std::nullopt;
  // The header is checked before ldns sees the packet: it is cheap, ldns would accept all of it,
  // and a single additional record keeps ldns away from its TSIG and OPT counting quirks.
  const uint8_t flags = packet[kFlagsAt];
  if ((flags & 0x80) != 0) return std::nullopt;                         // QR: a reply
  if (((flags >> 3) & 0x0f) != LDNS_PACKET_QUERY) return std::nullopt;  // opcode
  if (read_u16(packet, kQdcountAt) != 1 || read_u16(packet, kAncountAt) != 0 ||
      read_u16(packet, kNscountAt) != 0 || read_u16(packet, kArcountAt) > 1) {
    return std::nullopt;
  }
  ldns_status status = LDNS_STATUS_OK;
  PktPtr pkt = parse_wire(packet, &status);
  if (!pkt) return std::nullopt;
  // ldns takes an OPT or a TSIG out of the additional section; anything left there, or a TSIG,
  // is a record a plain query has no business carrying.
  if (ldns_pkt_arcount(pkt.get()) != 0 || ldns_pkt_tsig(pkt.get()) != nullptr) return std::nullopt;
  const ldns_rr* question = ldns_rr_list_rr(ldns_pkt_question(pkt.get()), 0);
  if (question == nullptr) return std::nullopt;
  std::optional<std::string> name = name_text(ldns_rr_owner(question), false);
  if (!name) return std::nullopt;
  DnsQuestion q;
  q.id = ldns_pkt_id(pkt.get());
  q.name = std::move(*name);
  q.qtype = static_cast<uint16_t>(ldns_rr_get_type(question));
  q.qclass = static_cast<uint16_t>(ldns_rr_get_class(question));
  q.rd = ldns_pkt_rd(pkt.get());
  q.edns = ldns_pkt_edns(pkt.get());
  return q;
}

std::optional<uint16_t> packet_id(std::span<const uint8_t> packet) {
  if (packet.size() < kHeaderSize) return std::nullopt;
  return read_u16(packet, 0);
}

std::vector<uint8_t> make_reply(const DnsQuestion& q, int rcode) {
  PktPtr pkt = new_reply(q, rcode, encode_name(q.name));
  if (!pkt) return {};
  return to_wire(pkt.get());
}

std::vector<uint8_t> make_formerr(uint16_t id) {
  PktPtr pkt(ldns_pkt_new());
  if (!pkt) return {};
  ldns_pkt_set_id(pkt.get(), id);
  ldns_pkt_set_qr(pkt.get(), true);
  ldns_pkt_set_opcode(pkt.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_rcode(pkt.get(), kRcodeFormErr);
  return to_wire(pkt.get());
}

std::vector<uint8_t> make_query(std::string_view name, uint16_t qtype, uint16_t id) {
  const std::optional<std::vector<uint8_t>> name_wire = encode_name(name);
  if (!name_wire) return {};
  PktPtr pkt(ldns_pkt_new());
  RrPtr rr = question_rr(*name_wire, qtype, kClassIN);
  if (!pkt || !rr || !push(pkt.get(), LDNS_SECTION_QUESTION, rr)) return {};
  ldns_pkt_set_id(pkt.get(), id);
  ldns_pkt_set_opcode(pkt.get(), LDNS_PACKET_QUERY);
  ldns_pkt_set_rd(pkt.get(), true);
  return to_wire(pkt.get());
}

Result<UpstreamAnswer> parse_upstream(std::span<const uint8_t> reply, uint16_t id,
                                      std::string_view name, uint16_t qtype) {
  const std::optional<std::vector<uint8_t>> name_wire = encode_name(name);
  if (!name_wire) {
    return fail(ErrorCode::kInvalidRequest, "'" + std::string(name) + "' is not a DNS name");
  }
  Result<PktPtr> parsed = parse_answer_to(reply, id, *name_wire, qtype, kClassIN);
  if (!parsed) return fail(std::move(parsed.error()));
  const ldns_pkt* pkt = parsed->get();

  UpstreamAnswer out;
  out.rcode = ldns_pkt_get_rcode(pkt);
  out.truncated = ldns_pkt_tc(pkt);

  const ldns_rr_list* answer = ldns_pkt_answer(pkt);
  const size_t count = ldns_rr_list_rr_count(answer);
  // The chain starts at the question as the reply spells it; the names point into pkt.
  std::vector<const ldns_rdf*> chain{ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(pkt), 0))};
  for (int hop = 0; hop < kMaxCnameHops; ++hop) {
    const ldns_rdf* target = nullptr;
    for (size_t i = 0; i < count && target == nullptr; ++i) {
      const ldns_rr* rr = ldns_rr_list_rr(answer, i);
      if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME && ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN &&
          same_name(ldns_rr_owner(rr), chain.back())) {
        target = rdata_name(rr);
      }
    }
    if (target == nullptr || on_chain(chain, target)) break;
    chain.push_back(target);
    out.cname_chain.push_back(name_text(target, true).value_or("?"));
  }

  for (size_t i = 0; i < count && out.a.size() < kMaxARecords; ++i) {
    const ldns_rr* rr = ldns_rr_list_rr(answer, i);
    if (ldns_rr_get_type(rr) != LDNS_RR_TYPE_A || ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN ||
        ldns_rr_rd_count(rr) < 1 || !on_chain(chain, ldns_rr_owner(rr))) {
      continue;
    }
    const ldns_rdf* rdf = ldns_rr_rdf(rr, 0);
    if (rdf == nullptr || ldns_rdf_get_type(rdf) != LDNS_RDF_TYPE_A || ldns_rdf_size(rdf) != 4)
      continue;
    const uint8_t* b = ldns_rdf_data(rdf);
    const uint32_t ip = uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
    // RFC 2181 section 8: a TTL with the top bit set is to be read as zero.
    uint32_t ttl = ldns_rr_ttl(rr);
    if (ttl > 0x7fffffffu) ttl = 0;
    auto same =
        std::find_if(out.a.begin(), out.a.end(), [&](const ARecord& r) { return r.ip == ip; });
    if (same == out.a.end()) {
      out.a.push_back(ARecord{ip, ttl});
    } else {
      same->ttl = std::min(same->ttl, ttl);
    }
  }
  return out;
}

std::vector<uint8_t> make_a_reply(const DnsQuestion& q, const std::vector<ARecord>& a,
                                  int empty_rcode) {
  const std::optional<std::vector<uint8_t>> name_wire = encode_name(q.name);
  if (a.empty() || !name_wire) return make_reply(q, a.empty() ? empty_rcode : kRcodeServFail);
  PktPtr pkt = new_reply(q, kRcodeNoError, name_wire);
  if (!pkt) return {};

  const size_t limit = q.edns ? kEdnsPayloadSize : kUdpPayloadSize;
  const size_t fixed = kHeaderSize + name_wire->size() + 4 + (q.edns ? kOptWireSize : 0);
  const size_t room = fixed < limit ? (limit - fixed) / kARecordWireSize : 0;
  const size_t n = std::min(a.size(), room);
  for (size_t i = 0; i < n; ++i) {
    RrPtr rr(ldns_rr_new());
    RdfPtr owner = name_rdf(*name_wire);
    const uint8_t ip[4] = {static_cast<uint8_t>(a[i].ip >> 24), static_cast<uint8_t>(a[i].ip >> 16),
                           static_cast<uint8_t>(a[i].ip >> 8), static_cast<uint8_t>(a[i].ip)};
    RdfPtr address(ldns_rdf_new_frm_data(LDNS_RDF_TYPE_A, sizeof ip, ip));
    if (!rr || !owner || !address) return {};
    ldns_rr_set_owner(rr.get(), owner.release());
    ldns_rr_set_type(rr.get(), LDNS_RR_TYPE_A);
    ldns_rr_set_class(rr.get(), LDNS_RR_CLASS_IN);
    ldns_rr_set_ttl(rr.get(), std::clamp(a[i].ttl, kMinTtl, kMaxTtl));
    if (!ldns_rr_push_rdf(rr.get(), address.get())) return {};
    address.release();
    if (!push(pkt.get(), LDNS_SECTION_ANSWER, rr)) return {};
  }
  return to_wire(pkt.get());
}

std::optional<std::vector<uint8_t>> reanswer(std::span<const uint8_t> reply, const DnsQuestion& q,
                                             uint16_t new_id) {
  const std::optional<std::vector<uint8_t>> name_wire = encode_name(q.name);
  if (!name_wire || !parse_answer_to(reply, q.id, *name_wire, q.qtype, q.qclass))
    return std::nullopt;
  std::vector<uint8_t> out(reply.begin(), reply.end());
  out[0] = static_cast<uint8_t>(new_id >> 8);
  out[1] = static_cast<uint8_t>(new_id);
  return out;
}

}  // namespace b3os::net
