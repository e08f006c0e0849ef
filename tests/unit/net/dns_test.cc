// Tests of the resolver's DNS packet layer (daemon/net/dns.h): what a sandbox's query must look
// like, the replies made here, and reading an upstream's reply. Replies are read back with ldns
// itself where parse_upstream would hide a detail (flags, OPT, record counts).

#include "daemon/net/dns.h"

#include <gtest/gtest.h>
#include <ldns/ldns.h>

#include <memory>
#include <string>
#include <vector>

namespace b3os::net {
namespace {

using Bytes = std::vector<uint8_t>;

struct PktFree {
  void operator()(ldns_pkt* p) const { ldns_pkt_free(p); }
};
using PktPtr = std::unique_ptr<ldns_pkt, PktFree>;

PktPtr ldns_parse(const Bytes& wire) {
  ldns_pkt* raw = nullptr;
  if (ldns_wire2pkt(&raw, wire.data(), wire.size()) != LDNS_STATUS_OK) return nullptr;
  return PktPtr(raw);
}

void put_u16(Bytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}
void put_u32(Bytes& b, uint32_t v) {
  put_u16(b, static_cast<uint16_t>(v >> 16));
  put_u16(b, static_cast<uint16_t>(v));
}
// Dotted text to uncompressed labels; each label's bytes as given.
void put_name(Bytes& b, std::string_view dotted) {
  size_t start = 0;
  while (start < dotted.size()) {
    size_t dot = dotted.find('.', start);
    if (dot == std::string_view::npos) dot = dotted.size();
    b.push_back(static_cast<uint8_t>(dot - start));
    b.insert(b.end(), dotted.begin() + static_cast<long>(start),
             dotted.begin() + static_cast<long>(dot));
    start = dot + 1;
  }
  b.push_back(0);
}
Bytes header(uint16_t id, uint8_t flags1, uint8_t flags2, uint16_t qd, uint16_t an, uint16_t ns,
             uint16_t ar) {
  Bytes b;
  put_u16(b, id);
  b.push_back(flags1);
  b.push_back(flags2);
  put_u16(b, qd);
  put_u16(b, an);
  put_u16(b, ns);
  put_u16(b, ar);
  return b;
}
void put_question(Bytes& b, std::string_view name, uint16_t qtype = kTypeA,
                  uint16_t qclass = kClassIN) {
  put_name(b, name);
  put_u16(b, qtype);
  put_u16(b, qclass);
}
// An OPT pseudo-record: root owner, type 41, class = UDP payload size, no options.
void put_opt(Bytes& b) {
  b.push_back(0);
  put_u16(b, 41);
  put_u16(b, 4096);
  put_u32(b, 0);
  put_u16(b, 0);
}
void put_a(Bytes& b, std::string_view owner, uint32_t ip, uint32_t ttl = 60,
           uint16_t rrclass = kClassIN) {
  put_name(b, owner);
  put_u16(b, kTypeA);
  put_u16(b, rrclass);
  put_u32(b, ttl);
  put_u16(b, 4);
  put_u32(b, ip);
}

// A plain query as a stub resolver sends it: RD=1, one question.
Bytes query(std::string_view name, uint16_t qtype = kTypeA, uint16_t id = 0xabcd) {
  Bytes b = header(id, 0x01, 0x00, 1, 0, 0, 0);
  put_question(b, name, qtype);
  return b;
}

// An upstream reply built with ldns from presentation-format records ("a.example. 60 IN A ...").
Bytes upstream_reply(uint16_t id, std::string_view qname, uint16_t qtype,
                     const std::vector<std::string>& answers,
                     ldns_pkt_rcode rcode = LDNS_RCODE_NOERROR, bool tc = false) {
  PktPtr pkt(ldns_pkt_new());
  ldns_pkt_set_id(pkt.get(), id);
  ldns_pkt_set_qr(pkt.get(), true);
  ldns_pkt_set_rd(pkt.get(), true);
  ldns_pkt_set_ra(pkt.get(), true);
  ldns_pkt_set_tc(pkt.get(), tc);
  ldns_pkt_set_rcode(pkt.get(), rcode);
  ldns_rr* q = ldns_rr_new();
  ldns_rr_set_owner(q, ldns_dname_new_frm_str(std::string(qname).c_str()));
  ldns_rr_set_type(q, static_cast<ldns_rr_type>(qtype));
  ldns_rr_set_class(q, LDNS_RR_CLASS_IN);
  ldns_rr_set_question(q, true);
  ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_QUESTION, q);
  for (const std::string& text : answers) {
    ldns_rr* rr = nullptr;
    EXPECT_EQ(ldns_rr_new_frm_str(&rr, text.c_str(), 0, nullptr, nullptr), LDNS_STATUS_OK) << text;
    if (rr != nullptr) ldns_pkt_push_rr(pkt.get(), LDNS_SECTION_ANSWER, rr);
  }
  uint8_t* wire = nullptr;
  size_t size = 0;
  EXPECT_EQ(ldns_pkt2wire(&wire, pkt.get(), &size), LDNS_STATUS_OK);
  Bytes out(wire, wire + size);
  std::free(wire);
  return out;
}

constexpr uint32_t ip(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return uint32_t{a} << 24 | uint32_t{b} << 16 | uint32_t{c} << 8 | d;
}

// ---- parse_query: good queries ----

TEST(DnsQueryTest, MakeQueryParsesBack) {
  const Bytes wire = make_query("example.com", kTypeA, 0x1234);
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_EQ(q->name, "example.com");
  EXPECT_EQ(q->qtype, kTypeA);
  EXPECT_EQ(q->qclass, kClassIN);
  EXPECT_TRUE(q->rd);
  EXPECT_FALSE(q->edns);
}

TEST(DnsQueryTest, HandMadeQuery) {
  // id 0xabcd, RD, one question: example.com A IN.
  const Bytes wire = {0xab, 0xcd, 0x01, 0x00, 0,   1,   0,   0,   0, 0,   0,   0,       //
                      7,    'e',  'x',  'a',  'm', 'p', 'l', 'e', 3, 'c', 'o', 'm', 0,  //
                      0,    1,    0,    1};
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->id, 0xabcd);
  EXPECT_EQ(q->name, "example.com");
  EXPECT_EQ(q->qtype, kTypeA);
  EXPECT_TRUE(q->rd);
}

TEST(DnsQueryTest, RdClearedIsKept) {
  Bytes wire = query("example.com");
  wire[2] = 0x00;
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(q->rd);
}

TEST(DnsQueryTest, AaaaAndOtherClassesAreReported) {
  Bytes wire = header(7, 0x01, 0x00, 1, 0, 0, 0);
  put_question(wire, "example.com", kTypeAAAA, 3);  // CH
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->qtype, kTypeAAAA);
  EXPECT_EQ(q->qclass, 3);
}

TEST(DnsQueryTest, OptRecordSetsEdns) {
  Bytes wire = header(1, 0x01, 0x00, 1, 0, 0, 1);
  put_question(wire, "example.com");
  put_opt(wire);
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  EXPECT_TRUE(q->edns);
  EXPECT_EQ(q->name, "example.com");
}

TEST(DnsQueryTest, UppercaseIsLowercased) {
  auto q = parse_query(query("WwW.ExAmPlE.CoM"));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->name, "www.example.com");
}

TEST(DnsQueryTest, RootName) {
  auto q = parse_query(query(""));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->name, "");
}

TEST(DnsQueryTest, PrintableOddBytesAreKeptLiterally) {
  // A backslash is printable: it stays one byte, so make_query gives back the same wire name.
  auto q = parse_query(query("a\\b.example"));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->name, "a\\b.example");
  auto again = parse_query(make_query(q->name, kTypeA, 1));
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->name, q->name);
}

TEST(DnsQueryTest, LongestNameIsAccepted) {
  // Three labels of 63 and one of 61: 3*64 + 62 + 1 = 255 bytes on the wire, the most there may be.
  const std::string l63(63, 'a');
  const std::string name = l63 + "." + l63 + "." + l63 + "." + std::string(61, 'b');
  auto q = parse_query(query(name));
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->name, name);
}

// ---- parse_query: refusals ----

TEST(DnsQueryTest, RefusesReplies) {
  Bytes wire = query("example.com");
  wire[2] |= 0x80;  // QR
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesOtherOpcodes) {
  for (uint8_t opcode : {1, 2, 4, 5, 15}) {
    Bytes wire = query("example.com");
    wire[2] = static_cast<uint8_t>(0x01 | opcode << 3);
    EXPECT_FALSE(parse_query(wire).has_value()) << int{opcode};
  }
}

TEST(DnsQueryTest, RefusesNoQuestion) {
  EXPECT_FALSE(parse_query(header(1, 0x01, 0, 0, 0, 0, 0)).has_value());
}

TEST(DnsQueryTest, RefusesTwoQuestions) {
  Bytes wire = header(1, 0x01, 0, 2, 0, 0, 0);
  put_question(wire, "a.example");
  put_question(wire, "b.example");
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesAnswerRecords) {
  Bytes wire = header(1, 0x01, 0, 1, 1, 0, 0);
  put_question(wire, "a.example");
  put_a(wire, "a.example", ip(1, 2, 3, 4));
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesAuthorityRecords) {
  Bytes wire = header(1, 0x01, 0, 1, 0, 1, 0);
  put_question(wire, "a.example");
  put_a(wire, "a.example", ip(1, 2, 3, 4));
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesAdditionalRecordsOtherThanOneOpt) {
  Bytes not_opt = header(1, 0x01, 0, 1, 0, 0, 1);
  put_question(not_opt, "a.example");
  put_a(not_opt, "a.example", ip(1, 2, 3, 4));
  EXPECT_FALSE(parse_query(not_opt).has_value());

  Bytes two_opts = header(1, 0x01, 0, 1, 0, 0, 2);
  put_question(two_opts, "a.example");
  put_opt(two_opts);
  put_opt(two_opts);
  EXPECT_FALSE(parse_query(two_opts).has_value());

  // 256 OPTs, which ldns's uint8_t counter wraps to none.
  Bytes many_opts = header(1, 0x01, 0, 1, 0, 0, 256);
  put_question(many_opts, "a.example");
  for (int i = 0; i < 256; ++i) put_opt(many_opts);
  EXPECT_FALSE(parse_query(many_opts).has_value());

  // TSIG (type 250, class ANY), which ldns moves out of the additional section by itself.
  Bytes tsig = header(1, 0x01, 0, 1, 0, 0, 1);
  put_question(tsig, "a.example");
  const Bytes tsig_rr = {0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 0};
  tsig.insert(tsig.end(), tsig_rr.begin(), tsig_rr.end());
  EXPECT_FALSE(parse_query(tsig).has_value());
}

TEST(DnsQueryTest, RefusesEveryTruncation) {
  Bytes wire = header(1, 0x01, 0, 1, 0, 0, 1);
  put_question(wire, "www.example.com");
  put_opt(wire);
  ASSERT_TRUE(parse_query(wire).has_value());
  for (size_t n = 0; n < wire.size(); ++n) {
    EXPECT_FALSE(parse_query(std::span(wire.data(), n)).has_value()) << n;
  }
}

TEST(DnsQueryTest, RefusesOversizedPackets) {
  // Bytes after the message are ignored (ldns does not report them), but never past 4096.
  Bytes wire = query("example.com");
  wire.resize(kMaxQuerySize, 0);
  EXPECT_TRUE(parse_query(wire).has_value());
  wire.push_back(0);
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesNonPrintableBytes) {
  for (char c : {'\x00', '\x01', '\x1f', '\x7f', '\x80', '\xff'}) {
    const std::string name = std::string("a") + c + "b.example";
    EXPECT_FALSE(parse_query(query(name)).has_value()) << int{static_cast<uint8_t>(c)};
  }
}

TEST(DnsQueryTest, RefusesDotInsideALabel) {
  // One label "a.b" then "example": as text it would read as the three-label a.b.example.
  Bytes wire = header(1, 0x01, 0, 1, 0, 0, 0);
  const Bytes name = {3, 'a', '.', 'b', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0};
  wire.insert(wire.end(), name.begin(), name.end());
  put_u16(wire, kTypeA);
  put_u16(wire, kClassIN);
  EXPECT_FALSE(parse_query(wire).has_value());
}

TEST(DnsQueryTest, RefusesBrokenNames) {
  // A compression pointer to itself.
  Bytes loop = header(1, 0x01, 0, 1, 0, 0, 0);
  loop.insert(loop.end(), {0xc0, 12, 0, 1, 0, 1});
  EXPECT_FALSE(parse_query(loop).has_value());
  // A label length of 64 (and the reserved 0x40/0x80 label types).
  for (uint8_t len : {64, 0x41, 0x80}) {
    Bytes wire = header(1, 0x01, 0, 1, 0, 0, 0);
    wire.push_back(len);
    wire.insert(wire.end(), 64, 'a');
    wire.insert(wire.end(), {0, 0, 1, 0, 1});
    EXPECT_FALSE(parse_query(wire).has_value()) << int{len};
  }
  // 256 bytes of name.
  const std::string l63(63, 'a');
  EXPECT_FALSE(
      parse_query(query(l63 + "." + l63 + "." + l63 + "." + std::string(62, 'b'))).has_value());
}

TEST(DnsQueryTest, PacketId) {
  const Bytes garbage = {0x12, 0x34, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(packet_id(garbage), 0x1234);
  EXPECT_FALSE(packet_id(std::span(garbage.data(), 11)).has_value());
  EXPECT_FALSE(parse_query(garbage).has_value());
}

// ---- replies made here ----

TEST(DnsReplyTest, FormerrIsAHeaderWithTheId) {
  const Bytes wire = make_formerr(0xbeef);
  ASSERT_EQ(wire.size(), 12u);
  PktPtr pkt = ldns_parse(wire);
  ASSERT_TRUE(pkt);
  EXPECT_EQ(ldns_pkt_id(pkt.get()), 0xbeef);
  EXPECT_TRUE(ldns_pkt_qr(pkt.get()));
  EXPECT_EQ(ldns_pkt_get_rcode(pkt.get()), kRcodeFormErr);
  EXPECT_EQ(ldns_pkt_qdcount(pkt.get()), 0);
}

TEST(DnsReplyTest, ReplyCarriesIdQuestionAndFlags) {
  for (bool rd : {true, false}) {
    auto q = parse_query(query("Blocked.Example", kTypeAAAA, 0x4242));
    ASSERT_TRUE(q.has_value());
    q->rd = rd;
    PktPtr pkt = ldns_parse(make_reply(*q, kRcodeRefused));
    ASSERT_TRUE(pkt);
    EXPECT_EQ(ldns_pkt_id(pkt.get()), 0x4242);
    EXPECT_TRUE(ldns_pkt_qr(pkt.get()));
    EXPECT_EQ(ldns_pkt_rd(pkt.get()), rd);
    EXPECT_TRUE(ldns_pkt_ra(pkt.get()));
    EXPECT_EQ(ldns_pkt_get_rcode(pkt.get()), kRcodeRefused);
    EXPECT_EQ(ldns_pkt_qdcount(pkt.get()), 1);
    EXPECT_EQ(ldns_pkt_ancount(pkt.get()), 0);
    EXPECT_EQ(ldns_pkt_nscount(pkt.get()), 0);
    EXPECT_EQ(ldns_pkt_arcount(pkt.get()), 0);
    EXPECT_FALSE(ldns_pkt_edns(pkt.get()));
  }
}

TEST(DnsReplyTest, ReplyParsesAsAnAnswerToTheQuestion) {
  auto q = parse_query(query("nope.example", kTypeA, 99));
  ASSERT_TRUE(q.has_value());
  auto answer = parse_upstream(make_reply(*q, kRcodeNxDomain), 99, "nope.example", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->rcode, kRcodeNxDomain);
  EXPECT_TRUE(answer->a.empty());
}

TEST(DnsReplyTest, EdnsQueryGetsAnOpt) {
  Bytes wire = header(5, 0x01, 0x00, 1, 0, 0, 1);
  put_question(wire, "example.com");
  put_opt(wire);
  auto q = parse_query(wire);
  ASSERT_TRUE(q.has_value());
  PktPtr pkt = ldns_parse(make_reply(*q, kRcodeNxDomain));
  ASSERT_TRUE(pkt);
  EXPECT_TRUE(ldns_pkt_edns(pkt.get()));
  EXPECT_EQ(ldns_pkt_edns_udp_size(pkt.get()), kEdnsPayloadSize);
}

TEST(DnsReplyTest, OutOfRangeRcodeIsServfail) {
  auto q = parse_query(query("example.com"));
  ASSERT_TRUE(q.has_value());
  for (int rcode : {-1, 16, 255}) {
    PktPtr pkt = ldns_parse(make_reply(*q, rcode));
    ASSERT_TRUE(pkt);
    EXPECT_EQ(ldns_pkt_get_rcode(pkt.get()), kRcodeServFail);
    EXPECT_TRUE(ldns_pkt_qr(pkt.get()));
  }
}

TEST(DnsReplyTest, ARecordsRoundTripWithClampedTtls) {
  auto q = parse_query(query("API.example.com", kTypeA, 0x0102));
  ASSERT_TRUE(q.has_value());
  const std::vector<ARecord> a = {
      {ip(93, 184, 216, 34), 0}, {ip(93, 184, 216, 35), 120}, {ip(1, 1, 1, 1), 86400}};
  const Bytes wire = make_a_reply(*q, a);
  auto answer = parse_upstream(wire, 0x0102, "api.example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->rcode, kRcodeNoError);
  ASSERT_EQ(answer->a.size(), 3u);
  EXPECT_EQ(answer->a[0].ip, ip(93, 184, 216, 34));
  EXPECT_EQ(answer->a[0].ttl, kMinTtl);
  EXPECT_EQ(answer->a[1].ip, ip(93, 184, 216, 35));
  EXPECT_EQ(answer->a[1].ttl, 120u);
  EXPECT_EQ(answer->a[2].ip, ip(1, 1, 1, 1));
  EXPECT_EQ(answer->a[2].ttl, kMaxTtl);
  EXPECT_TRUE(answer->cname_chain.empty());

  PktPtr pkt = ldns_parse(wire);
  ASSERT_TRUE(pkt);
  EXPECT_TRUE(ldns_pkt_ra(pkt.get()));
  EXPECT_EQ(ldns_pkt_ancount(pkt.get()), 3);
  const ldns_rr* rr = ldns_rr_list_rr(ldns_pkt_answer(pkt.get()), 0);
  char* owner = ldns_rdf2str(ldns_rr_owner(rr));
  EXPECT_STREQ(owner, "api.example.com.");
  std::free(owner);
  EXPECT_EQ(ldns_rr_get_class(rr), LDNS_RR_CLASS_IN);
}

TEST(DnsReplyTest, EmptyARecordsGiveTheRcode) {
  auto q = parse_query(query("example.com", kTypeA, 3));
  ASSERT_TRUE(q.has_value());
  auto nx = parse_upstream(make_a_reply(*q, {}), 3, "example.com", kTypeA);
  ASSERT_TRUE(nx.has_value());
  EXPECT_EQ(nx->rcode, kRcodeNxDomain);
  EXPECT_TRUE(nx->a.empty());
  // The AAAA answer in allowlist mode: NOERROR and nothing.
  auto empty = parse_upstream(make_a_reply(*q, {}, kRcodeNoError), 3, "example.com", kTypeA);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->rcode, kRcodeNoError);
  EXPECT_TRUE(empty->a.empty());
}

TEST(DnsReplyTest, ManyRecordsFitTheUdpSize) {
  std::vector<ARecord> a;
  for (uint32_t i = 0; i < 200; ++i) a.push_back({ip(10, 0, 0, 0) + i, 60});
  for (bool edns : {false, true}) {
    DnsQuestion q{
        .id = 8, .name = std::string(60, 'x') + ".example", .qtype = kTypeA, .edns = edns};
    const Bytes wire = make_a_reply(q, a);
    EXPECT_LE(wire.size(), edns ? kEdnsPayloadSize : 512u);
    auto answer = parse_upstream(wire, 8, q.name, kTypeA);
    ASSERT_TRUE(answer.has_value()) << answer.error().message;
    EXPECT_GT(answer->a.size(), edns ? 60u : 10u);
    EXPECT_EQ(answer->a.front().ip, ip(10, 0, 0, 0));
  }
}

TEST(DnsReplyTest, ReplyToANameWithNoWireFormHasNoQuestion) {
  DnsQuestion q{.id = 9, .name = "a..b"};
  PktPtr pkt = ldns_parse(make_reply(q, kRcodeRefused));
  ASSERT_TRUE(pkt);
  EXPECT_EQ(ldns_pkt_id(pkt.get()), 9);
  EXPECT_EQ(ldns_pkt_qdcount(pkt.get()), 0);
  EXPECT_EQ(ldns_pkt_get_rcode(pkt.get()), kRcodeRefused);
}

// ---- make_query ----

TEST(DnsMakeQueryTest, ShapeOfTheUpstreamQuery) {
  const Bytes wire = make_query("Example.COM.", kTypeAAAA, 0x7777);
  PktPtr pkt = ldns_parse(wire);
  ASSERT_TRUE(pkt);
  EXPECT_EQ(ldns_pkt_id(pkt.get()), 0x7777);
  EXPECT_FALSE(ldns_pkt_qr(pkt.get()));
  EXPECT_TRUE(ldns_pkt_rd(pkt.get()));
  EXPECT_FALSE(ldns_pkt_edns(pkt.get()));
  EXPECT_EQ(ldns_pkt_qdcount(pkt.get()), 1);
  EXPECT_EQ(ldns_pkt_arcount(pkt.get()), 0);
  const ldns_rr* q = ldns_rr_list_rr(ldns_pkt_question(pkt.get()), 0);
  EXPECT_EQ(ldns_rr_get_type(q), LDNS_RR_TYPE_AAAA);
  EXPECT_EQ(ldns_rr_get_class(q), LDNS_RR_CLASS_IN);
  // The case is sent as given (the trailing dot is not a label).
  char* name = ldns_rdf2str(ldns_rr_owner(q));
  EXPECT_STREQ(name, "Example.COM.");
  std::free(name);
}

TEST(DnsMakeQueryTest, RefusesNonNames) {
  const std::string l63(63, 'a');
  for (const std::string& bad :
       {std::string("a..b"), std::string(".a"), std::string(".."), std::string(64, 'a') + ".com",
        l63 + "." + l63 + "." + l63 + "." + std::string(62, 'b')}) {
    EXPECT_TRUE(make_query(bad, kTypeA, 1).empty()) << bad;
  }
  EXPECT_FALSE(make_query("", kTypeA, 1).empty());   // the root
  EXPECT_FALSE(make_query(".", kTypeA, 1).empty());  // the root, written with its dot
}

// ---- parse_upstream ----

TEST(DnsUpstreamTest, PlainARecords) {
  const Bytes reply = upstream_reply(
      11, "example.com.", kTypeA,
      {"example.com. 3600 IN A 93.184.216.34", "example.com. 60 IN A 93.184.216.35"});
  auto answer = parse_upstream(reply, 11, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->rcode, kRcodeNoError);
  EXPECT_FALSE(answer->truncated);
  ASSERT_EQ(answer->a.size(), 2u);
  EXPECT_EQ(answer->a[0].ip, ip(93, 184, 216, 34));
  EXPECT_EQ(answer->a[0].ttl, 3600u);  // the cap is make_a_reply's, not the parser's
  EXPECT_EQ(answer->a[1].ttl, 60u);
}

TEST(DnsUpstreamTest, FollowsACnameChainInAnyOrder) {
  const Bytes reply =
      upstream_reply(12, "www.example.com.", kTypeA,
                     {"b.cdn.net. 20 IN A 203.0.113.7", "a.cdn.net. 30 IN CNAME b.cdn.net.",
                      "www.example.com. 300 IN CNAME A.CDN.net."});
  auto answer = parse_upstream(reply, 12, "www.example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  ASSERT_EQ(answer->a.size(), 1u);
  EXPECT_EQ(answer->a[0].ip, ip(203, 0, 113, 7));
  EXPECT_EQ(answer->a[0].ttl, 20u);
  EXPECT_EQ(answer->cname_chain, (std::vector<std::string>{"a.cdn.net", "b.cdn.net"}));
}

TEST(DnsUpstreamTest, ACnameLoopEnds) {
  const Bytes reply =
      upstream_reply(13, "a.example.", kTypeA,
                     {"a.example. 60 IN CNAME b.example.", "b.example. 60 IN CNAME a.example.",
                      "b.example. 60 IN A 192.0.2.1"});
  auto answer = parse_upstream(reply, 13, "a.example", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->cname_chain, (std::vector<std::string>{"b.example"}));
  ASSERT_EQ(answer->a.size(), 1u);  // b is on the chain, so its record counts
  EXPECT_EQ(answer->a[0].ip, ip(192, 0, 2, 1));

  const Bytes self =
      upstream_reply(14, "a.example.", kTypeA, {"a.example. 60 IN CNAME a.example."});
  auto self_answer = parse_upstream(self, 14, "a.example", kTypeA);
  ASSERT_TRUE(self_answer.has_value());
  EXPECT_TRUE(self_answer->cname_chain.empty());
  EXPECT_TRUE(self_answer->a.empty());
}

TEST(DnsUpstreamTest, StopsAfterEightHops) {
  std::vector<std::string> records;
  for (int i = 0; i < 10; ++i) {
    records.push_back("n" + std::to_string(i) + ".example. 60 IN CNAME n" + std::to_string(i + 1) +
                      ".example.");
  }
  records.push_back("n8.example. 60 IN A 192.0.2.8");    // on the chain (8 hops)
  records.push_back("n10.example. 60 IN A 192.0.2.10");  // beyond it
  const Bytes reply = upstream_reply(15, "n0.example.", kTypeA, records);
  auto answer = parse_upstream(reply, 15, "n0.example", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  ASSERT_EQ(answer->cname_chain.size(), static_cast<size_t>(kMaxCnameHops));
  EXPECT_EQ(answer->cname_chain.back(), "n8.example");
  ASSERT_EQ(answer->a.size(), 1u);
  EXPECT_EQ(answer->a[0].ip, ip(192, 0, 2, 8));
}

TEST(DnsUpstreamTest, IgnoresRecordsOfOtherOwnersAndClasses) {
  const Bytes reply =
      upstream_reply(16, "example.com.", kTypeA,
                     {"other.com. 60 IN A 10.0.0.1", "example.com. 60 CH A 10.0.0.2",
                      "example.com.evil. 60 IN A 10.0.0.3", "other.com. 60 IN CNAME example.com.",
                      "example.com. 60 IN AAAA 2001:db8::1", "example.com. 60 IN A 192.0.2.44"});
  auto answer = parse_upstream(reply, 16, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  ASSERT_EQ(answer->a.size(), 1u);
  EXPECT_EQ(answer->a[0].ip, ip(192, 0, 2, 44));
  EXPECT_TRUE(answer->cname_chain.empty());
}

TEST(DnsUpstreamTest, ACnameOfAnotherClassIsNotFollowed) {
  const Bytes reply =
      upstream_reply(17, "example.com.", kTypeA,
                     {"example.com. 60 CH CNAME evil.net.", "evil.net. 60 IN A 10.9.9.9"});
  auto answer = parse_upstream(reply, 17, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value());
  EXPECT_TRUE(answer->a.empty());
  EXPECT_TRUE(answer->cname_chain.empty());
}

TEST(DnsUpstreamTest, TtlsAndDuplicates) {
  const Bytes reply =
      upstream_reply(18, "example.com.", kTypeA,
                     {"example.com. 600 IN A 192.0.2.1", "example.com. 30 IN A 192.0.2.1",
                      "example.com. 2147483648 IN A 192.0.2.2"});
  auto answer = parse_upstream(reply, 18, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value());
  ASSERT_EQ(answer->a.size(), 2u);
  EXPECT_EQ(answer->a[0].ttl, 30u);  // the same address twice: the lower TTL
  EXPECT_EQ(answer->a[1].ttl, 0u);   // top bit set: zero (RFC 2181)
}

TEST(DnsUpstreamTest, RcodeAndTruncation) {
  auto nx = parse_upstream(upstream_reply(19, "gone.example.", kTypeA, {}, LDNS_RCODE_NXDOMAIN), 19,
                           "gone.example", kTypeA);
  ASSERT_TRUE(nx.has_value());
  EXPECT_EQ(nx->rcode, kRcodeNxDomain);
  auto tc = parse_upstream(upstream_reply(20, "big.example.", kTypeA, {}, LDNS_RCODE_NOERROR, true),
                           20, "big.example", kTypeA);
  ASSERT_TRUE(tc.has_value());
  EXPECT_TRUE(tc->truncated);
}

TEST(DnsUpstreamTest, NameComparedCaseInsensitively) {
  const Bytes reply =
      upstream_reply(21, "EXAMPLE.Com.", kTypeA, {"Example.COM. 60 IN A 192.0.2.9"});
  auto answer = parse_upstream(reply, 21, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  ASSERT_EQ(answer->a.size(), 1u);
}

TEST(DnsUpstreamTest, MismatchesAreErrors) {
  const Bytes reply =
      upstream_reply(22, "example.com.", kTypeA, {"example.com. 60 IN A 192.0.2.1"});
  auto wrong_id = parse_upstream(reply, 23, "example.com", kTypeA);
  ASSERT_FALSE(wrong_id.has_value());
  EXPECT_EQ(wrong_id.error().code, ErrorCode::kUpstreamError);
  EXPECT_NE(wrong_id.error().message.find("id"), std::string::npos) << wrong_id.error().message;

  auto wrong_name = parse_upstream(reply, 22, "example.org", kTypeA);
  ASSERT_FALSE(wrong_name.has_value());
  EXPECT_EQ(wrong_name.error().code, ErrorCode::kUpstreamError);
  EXPECT_NE(wrong_name.error().message.find("name"), std::string::npos)
      << wrong_name.error().message;

  auto wrong_type = parse_upstream(reply, 22, "example.com", kTypeAAAA);
  ASSERT_FALSE(wrong_type.has_value());
  EXPECT_EQ(wrong_type.error().code, ErrorCode::kUpstreamError);
  EXPECT_NE(wrong_type.error().message.find("type"), std::string::npos)
      << wrong_type.error().message;

  Bytes query_bit = reply;
  query_bit[2] &= 0x7f;
  auto not_reply = parse_upstream(query_bit, 22, "example.com", kTypeA);
  ASSERT_FALSE(not_reply.has_value());
  EXPECT_NE(not_reply.error().message.find("QR"), std::string::npos);

  Bytes no_question = header(22, 0x81, 0x80, 0, 0, 0, 0);
  auto none = parse_upstream(no_question, 22, "example.com", kTypeA);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("questions"), std::string::npos);

  auto truncated =
      parse_upstream(std::span(reply.data(), reply.size() - 1), 22, "example.com", kTypeA);
  ASSERT_FALSE(truncated.has_value());
  EXPECT_NE(truncated.error().message.find("malformed"), std::string::npos);

  auto short_one = parse_upstream(std::span(reply.data(), 5), 22, "example.com", kTypeA);
  ASSERT_FALSE(short_one.has_value());
  EXPECT_EQ(short_one.error().code, ErrorCode::kUpstreamError);

  auto bad_name = parse_upstream(reply, 22, "a..b", kTypeA);
  ASSERT_FALSE(bad_name.has_value());
  EXPECT_EQ(bad_name.error().code, ErrorCode::kInvalidRequest);
}

TEST(DnsUpstreamTest, HostileRdataIsIgnoredOrRefused) {
  // An A record with RDLENGTH 0: ldns parses it with no address at all.
  Bytes empty_a = header(24, 0x81, 0x80, 1, 2, 0, 0);
  put_question(empty_a, "example.com");
  empty_a.insert(empty_a.end(), {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 0});
  put_a(empty_a, "example.com", ip(192, 0, 2, 5));
  auto answer = parse_upstream(empty_a, 24, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  ASSERT_EQ(answer->a.size(), 1u);
  EXPECT_EQ(answer->a[0].ip, ip(192, 0, 2, 5));

  // A CNAME with no target.
  Bytes empty_cname = header(25, 0x81, 0x80, 1, 1, 0, 0);
  put_question(empty_cname, "example.com");
  empty_cname.insert(empty_cname.end(), {0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 0});
  auto cname = parse_upstream(empty_cname, 25, "example.com", kTypeA);
  ASSERT_TRUE(cname.has_value()) << cname.error().message;
  EXPECT_TRUE(cname->cname_chain.empty());

  // An additional section of TSIGs (ldns leaks all but the last it reads: ASan's leak check
  // fails this test if they reach it) is not read.
  Bytes tsigs = header(26, 0x81, 0x80, 1, 1, 0, 6);
  put_question(tsigs, "example.com");
  put_a(tsigs, "example.com", ip(192, 0, 2, 6));
  for (int i = 0; i < 6; ++i) tsigs.insert(tsigs.end(), {0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 0});
  auto with_tsigs = parse_upstream(tsigs, 26, "example.com", kTypeA);
  ASSERT_TRUE(with_tsigs.has_value()) << with_tsigs.error().message;
  ASSERT_EQ(with_tsigs->a.size(), 1u);
}

TEST(DnsUpstreamTest, CnameChainNamesAreEscapedForLogs) {
  Bytes reply = header(27, 0x81, 0x80, 1, 1, 0, 0);
  put_question(reply, "example.com");
  // example.com CNAME "a\x01.b\\" (two labels with a control byte and a backslash)
  reply.insert(reply.end(), {0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 7, 2, 'a', 1, 2, 'b', '\\', 0});
  auto answer = parse_upstream(reply, 27, "example.com", kTypeA);
  ASSERT_TRUE(answer.has_value()) << answer.error().message;
  EXPECT_EQ(answer->cname_chain, (std::vector<std::string>{"a\\001.b\\092"}));
}

// ---- reanswer ----

TEST(DnsReanswerTest, ReplacesOnlyTheId) {
  auto q = parse_query(query("example.com", kTypeA, 0x5151));
  ASSERT_TRUE(q.has_value());
  const Bytes reply =
      upstream_reply(0x5151, "Example.com.", kTypeA, {"example.com. 60 IN A 192.0.2.1"});
  auto out = reanswer(reply, *q, 0x0a0b);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->size(), reply.size());
  EXPECT_EQ((*out)[0], 0x0a);
  EXPECT_EQ((*out)[1], 0x0b);
  EXPECT_TRUE(std::equal(out->begin() + 2, out->end(), reply.begin() + 2));
}

TEST(DnsReanswerTest, RefusesWhatDoesNotAnswerTheQuestion) {
  auto q = parse_query(query("example.com", kTypeA, 0x5151));
  ASSERT_TRUE(q.has_value());
  EXPECT_FALSE(reanswer(upstream_reply(0x5152, "example.com.", kTypeA, {}), *q, 1).has_value());
  EXPECT_FALSE(reanswer(upstream_reply(0x5151, "example.net.", kTypeA, {}), *q, 1).has_value());
  EXPECT_FALSE(reanswer(upstream_reply(0x5151, "example.com.", kTypeAAAA, {}), *q, 1).has_value());
  DnsQuestion chaos = *q;
  chaos.qclass = 3;
  EXPECT_FALSE(reanswer(upstream_reply(0x5151, "example.com.", kTypeA, {}), chaos, 1).has_value());
  // The sandbox's own query is not an answer to it.
  EXPECT_FALSE(reanswer(query("example.com", kTypeA, 0x5151), *q, 1).has_value());
  const Bytes garbage(40, 0xff);
  EXPECT_FALSE(reanswer(garbage, *q, 1).has_value());
}

TEST(DnsReanswerTest, AcceptsOurOwnReplies) {
  auto q = parse_query(query("example.com", kTypeAAAA, 77));
  ASSERT_TRUE(q.has_value());
  EXPECT_TRUE(reanswer(make_reply(*q, kRcodeNxDomain), *q, 78).has_value());
}

}  // namespace
}  // namespace b3os::net
