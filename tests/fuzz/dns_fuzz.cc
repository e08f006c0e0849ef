// libFuzzer target for the resolver's DNS packet layer (daemon/net/dns.h): arbitrary bytes as a
// sandbox's query and as an upstream's reply must never crash it or leak, and whatever it
// accepts must come back whole through the replies it makes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "daemon/net/dns.h"

namespace {

using namespace b3os::net;

void require(bool ok) {
  if (!ok) std::abort();
}

constexpr uint16_t kFixedId = 0x1234;
const DnsQuestion kFixedQuestion{.id = kFixedId, .name = "www.example.com", .qtype = kTypeA};

bool printable(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

// A question parse_query accepted: every reply made for it is an answer to it.
void check_accepted(const DnsQuestion& q, std::span<const uint8_t> data) {
  require(q.name.size() <= 253);
  require(lower(q.name) == q.name && printable(q.name));

  const int rcode = data.empty() ? kRcodeRefused : data[0] % 16;
  const std::vector<uint8_t> reply = make_reply(q, rcode);
  require(reanswer(reply, q, 0x4321).has_value());
  // parse_upstream asks class IN: only IN questions can come back through it.
  if (q.qclass == kClassIN) {
    auto answer = parse_upstream(reply, q.id, q.name, q.qtype);
    require(answer.has_value() && answer->rcode == rcode && answer->a.empty());
  }

  std::vector<ARecord> a;
  for (size_t i = 0; i + 4 <= data.size() && a.size() < 8; i += 4) {
    // Distinct addresses (the index in the top byte), so none is merged with another.
    const uint32_t ip = static_cast<uint32_t>(a.size()) << 24 | uint32_t{data[i]} << 16 |
                        uint32_t{data[i + 1]} << 8 | data[i + 2];
    a.push_back(ARecord{ip, uint32_t{data[i + 3]} * 7});
  }
  const std::vector<uint8_t> a_reply = make_a_reply(q, a);
  require(a_reply.size() <= (q.edns ? kEdnsPayloadSize : 512u));
  require(reanswer(a_reply, q, 1).has_value());
  if (q.qclass == kClassIN) {
    auto answer = parse_upstream(a_reply, q.id, q.name, q.qtype);
    require(answer.has_value());
    require(answer->rcode == (a.empty() ? kRcodeNxDomain : kRcodeNoError));
    require(answer->a.size() == a.size());  // 8 records fit in 512 bytes with any name
    for (size_t i = 0; i < a.size(); ++i) {
      require(answer->a[i].ip == a[i].ip);
      require(answer->a[i].ttl == std::clamp(a[i].ttl, kMinTtl, kMaxTtl));
    }
  }

  auto again = parse_query(make_query(q.name, q.qtype, q.id));
  require(again.has_value() && again->name == q.name && again->qtype == q.qtype &&
          again->id == q.id);
}

// The bytes as a name for make_query: what it encodes, parse_query reads back the same.
void check_name(std::span<const uint8_t> data) {
  const std::string name(data.begin(),
                         data.begin() + static_cast<long>(std::min<size_t>(data.size(), 300)));
  const std::vector<uint8_t> wire = make_query(name, kTypeA, 7);
  if (wire.empty()) return;
  auto q = parse_query(wire);
  if (!printable(name)) return;  // parse_query refuses such names
  // make_query splits at every '.', so no label holds one and parse_query must accept it.
  require(q.has_value());
  std::string expected = lower(name);
  if (!expected.empty() && expected.back() == '.') expected.pop_back();
  require(q->name == expected);
}

// A reply to the fixed question whose answer section is the fuzz bytes, so that the CNAME and
// A logic sees far more than replies the fuzzer must first learn to match.
void check_synthetic_reply(std::span<const uint8_t> data) {
  if (data.size() < 2) return;
  std::vector<uint8_t> reply = make_reply(kFixedQuestion, kRcodeNoError);
  reply[6] = 0;
  reply[7] = data[0];  // ANCOUNT
  reply[10] = 0;
  reply[11] = data[1];  // ARCOUNT (not read; may hold TSIGs)
  reply.insert(reply.end(), data.begin() + 2, data.end());
  auto answer = parse_upstream(reply, kFixedId, kFixedQuestion.name, kFixedQuestion.qtype);
  if (answer) {
    require(answer->cname_chain.size() <= static_cast<size_t>(kMaxCnameHops));
    require(answer->a.size() <= data[0]);
    const std::vector<uint8_t> out = make_a_reply(kFixedQuestion, answer->a);
    require(parse_upstream(out, kFixedId, kFixedQuestion.name, kTypeA).has_value());
  }
  require(reanswer(reply, kFixedQuestion, 9).has_value() == answer.has_value());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);

  const auto id = packet_id(bytes);
  require(id.has_value() == (size >= 12));
  if (id) {
    const std::vector<uint8_t> formerr = make_formerr(*id);
    require(formerr.size() == 12 && formerr[0] == (*id >> 8) && formerr[1] == (*id & 0xff));
  }

  if (auto q = parse_query(bytes)) {
    require(q->id == *id);
    check_accepted(*q, bytes);
  }

  if (auto answer = parse_upstream(bytes, kFixedId, kFixedQuestion.name, kFixedQuestion.qtype)) {
    require(answer->cname_chain.size() <= static_cast<size_t>(kMaxCnameHops));
  }
  if (auto copy = reanswer(bytes, kFixedQuestion, 0xfeed)) {
    require(copy->size() == size && (*copy)[0] == 0xfe && (*copy)[1] == 0xed);
    require(std::equal(copy->begin() + 2, copy->end(), bytes.begin() + 2));
  }

  check_name(bytes);
  check_synthetic_reply(bytes);
  return 0;
}
