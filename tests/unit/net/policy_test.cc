// Tests of the egress policy (daemon/net/policy.h): IPv4 and CIDR parsing, the always-denied
// ranges, every rule of the allow-entry syntax (accepted and refused, with the messages that
// name the entry), list limits, and matching of names, wildcards, case, ports and CIDRs.

#include "daemon/net/policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace b3os::net {
namespace {

uint32_t ip(std::string_view s) {
  auto v = parse_ipv4(s);
  EXPECT_TRUE(v.has_value()) << s;
  return v.value_or(0);
}

// The error of an entry expected to be refused with `code`; the message must quote it.
std::string refused(std::string_view text, ErrorCode code = ErrorCode::kInvalidRequest, size_t index = 3) {
  auto e = parse_allow_entry(text, index);
  EXPECT_FALSE(e.has_value()) << "accepted: " << text;
  if (e) return "";
  EXPECT_EQ(e.error().code, code) << text << ": " << e.error().message;
  const std::string prefix = "egress.allow[" + std::to_string(index) + "] \"";
  EXPECT_EQ(e.error().message.rfind(prefix, 0), 0u) << e.error().message;
  return e.error().message;
}

AllowEntry accepted(std::string_view text) {
  auto e = parse_allow_entry(text, 0);
  EXPECT_TRUE(e.has_value()) << text << ": " << (e ? "" : e.error().message);
  return e.value_or(AllowEntry{});
}

Allowlist list_of(const std::vector<std::string>& texts) {
  auto entries = parse_allow_list(texts);
  EXPECT_TRUE(entries.has_value()) << (entries ? "" : entries.error().message);
  return Allowlist(entries.value_or(std::vector<AllowEntry>{}));
}

TEST(PolicyTest, ParsesStrictDottedQuads) {
  EXPECT_EQ(parse_ipv4("203.0.113.7"), 0xCB007107u);
  EXPECT_EQ(parse_ipv4("0.0.0.0"), 0u);
  EXPECT_EQ(parse_ipv4("255.255.255.255"), 0xFFFFFFFFu);
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.00", "256.1.1.1", "1.2.3.4 ",
                          " 1.2.3.4", "1..3.4", "1.2.3.", ".1.2.3", "a.b.c.d", "1.2.3.-4", "+1.2.3.4",
                          "1.2.3.4/32", "4294967296.1.1.1", "0x1.2.3.4"}) {
    EXPECT_FALSE(parse_ipv4(bad).has_value()) << bad;
  }
  EXPECT_EQ(ipv4_str(0xCB007107u), "203.0.113.7");
  EXPECT_EQ(ipv4_str(0), "0.0.0.0");
}

TEST(PolicyTest, CidrsContainAndOverlap) {
  EXPECT_EQ(parse_cidr("203.0.113.7"), (Cidr{ip("203.0.113.7"), 32}));
  EXPECT_EQ(parse_cidr("203.0.113.0/24"), (Cidr{ip("203.0.113.0"), 24}));
  EXPECT_EQ(parse_cidr("0.0.0.0/0"), (Cidr{0, 0}));
  for (const char* bad : {"10.1.2.3/8", "203.0.113.0/33", "203.0.113.0/", "203.0.113.0/024", "1.2.3.4/-1",
                          "/24", "203.0.113.0/24/1"}) {
    EXPECT_FALSE(parse_cidr(bad).has_value()) << bad;
  }
  const Cidr net = *parse_cidr("203.0.113.0/24");
  EXPECT_TRUE(net.contains(ip("203.0.113.0")));
  EXPECT_TRUE(net.contains(ip("203.0.113.255")));
  EXPECT_FALSE(net.contains(ip("203.0.114.0")));
  EXPECT_FALSE(net.contains(ip("203.0.112.255")));
  EXPECT_TRUE((Cidr{0, 0}).contains(ip("8.8.8.8")));
  EXPECT_TRUE(net.overlaps(*parse_cidr("203.0.113.128/25")));
  EXPECT_TRUE(parse_cidr("203.0.113.128/25")->overlaps(net));
  EXPECT_TRUE(net.overlaps(Cidr{0, 0}));
  EXPECT_FALSE(net.overlaps(*parse_cidr("203.0.114.0/24")));
  EXPECT_EQ(net.str(), "203.0.113.0/24");
  EXPECT_EQ(parse_cidr("8.8.8.8")->str(), "8.8.8.8/32");
}

TEST(PolicyTest, AlwaysDeniedEdges) {
  struct Case {
    const char* ip;
    bool denied;
  };
  const Case cases[] = {
      {"0.0.0.0", true},          {"0.255.255.255", true},   {"1.0.0.0", false},
      {"9.255.255.255", false},   {"10.0.0.0", true},        {"10.255.255.255", true},
      {"11.0.0.0", false},        {"100.63.255.255", false}, {"100.64.0.0", true},
      {"100.127.255.255", true},  {"100.128.0.0", false},    {"126.255.255.255", false},
      {"127.0.0.1", true},        {"128.0.0.0", false},      {"169.253.255.255", false},
      {"169.254.169.254", true},  {"169.255.0.0", false},    {"172.15.255.255", false},
      {"172.16.0.0", true},       {"172.31.255.255", true},  {"172.32.0.0", false},
      {"192.0.0.0", true},        {"192.0.0.255", true},     {"192.0.1.0", false},
      {"192.0.2.1", false},       {"192.167.255.255", false}, {"192.168.0.0", true},
      {"192.168.255.255", true},  {"192.169.0.0", false},    {"198.17.255.255", false},
      {"198.18.0.0", true},       {"198.19.255.255", true},  {"198.20.0.0", false},
      {"198.51.100.1", false},    {"203.0.113.1", false},    {"223.255.255.255", false},
      {"224.0.0.0", true},        {"239.255.255.255", true}, {"240.0.0.0", true},
      {"255.255.255.254", true},  {"255.255.255.255", true}, {"8.8.8.8", false},
  };
  for (const Case& c : cases) EXPECT_EQ(denied_reason(ip(c.ip)).has_value(), c.denied) << c.ip;
  EXPECT_EQ(denied_reason(ip("169.254.169.254")).value_or(""), "link-local, including the cloud metadata service");
  EXPECT_EQ(denied_reason(ip("172.20.0.1")).value_or(""), "private network (RFC 1918)");
  EXPECT_EQ(denied_reason(ip("255.255.255.255")).value_or(""), "broadcast");
  for (const DeniedRange& r : always_denied()) {
    EXPECT_FALSE(r.why.empty());
    EXPECT_EQ(r.net.addr & ~r.net.mask(), 0u) << r.net.str();
  }
}

TEST(PolicyTest, CloudPlatformEndpointsAndTheOperatorsRangesAreDenied) {
  EXPECT_EQ(denied_reason(ip("168.63.129.16")).value_or(""), "a cloud platform endpoint (Azure WireServer)");
  EXPECT_FALSE(denied_reason(ip("168.63.129.17")));
  EXPECT_NE(refused("168.63.129.16:80", ErrorCode::kEgressDenied).find("Azure"), std::string::npos);
  // An operator's range (--deny-cidr): every check that reads the ranges sees it.
  EXPECT_FALSE(denied_reason(ip("11.22.33.44")));
  const Allowlist wide({accepted("11.0.0.0/8:443")});  // accepted before the operator's range
  EXPECT_TRUE(wide.allows_ip(ip("11.22.33.1"), 443));
  add_denied_range(Cidr{ip("11.22.33.0"), 24});
  add_denied_range(Cidr{ip("11.22.33.0"), 24});  // twice: kept once
  size_t n = 0;
  for (const DeniedRange& r : always_denied()) n += r.net == Cidr{ip("11.22.33.0"), 24} ? 1 : 0;
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(denied_reason(ip("11.22.33.44")).value_or(""), "denied by the node's operator (--deny-cidr)");
  EXPECT_NE(refused("11.22.0.0/16", ErrorCode::kEgressDenied).find("overlaps 11.22.33.0/24"), std::string::npos);
  EXPECT_FALSE(wide.allows_ip(ip("11.22.33.1"), 443)) << "a list made before is judged by the new ranges too";
}

TEST(PolicyTest, ReverseNamesNameTheirNetworks) {
  EXPECT_EQ(reverse_name_network("4.3.2.1.in-addr.arpa"), (Cidr{ip("1.2.3.4"), 32}));
  EXPECT_EQ(reverse_name_network("168.192.in-addr.arpa"), (Cidr{ip("192.168.0.0"), 16}));
  EXPECT_EQ(reverse_name_network("10.in-addr.arpa"), (Cidr{ip("10.0.0.0"), 8}));
  EXPECT_EQ(reverse_name_network("in-addr.arpa"), (Cidr{0, 0}));
  for (const char* bad : {"5.4.3.2.1.in-addr.arpa", "256.in-addr.arpa", "01.in-addr.arpa", "x.in-addr.arpa",
                          ".in-addr.arpa", "1..in-addr.arpa", "example.com", "arpa", "10.in-addr.arpa.evil"})
    EXPECT_FALSE(reverse_name_network(bad)) << bad;
}

TEST(PolicyTest, AcceptsCidrEntries) {
  AllowEntry e = accepted("203.0.113.7");
  EXPECT_EQ(e.kind, AllowEntry::Kind::kCidr);
  EXPECT_EQ(e.cidr, (Cidr{ip("203.0.113.7"), 32}));
  EXPECT_EQ(e.ports, (std::vector<uint16_t>{80, 443}));
  EXPECT_EQ(e.text, "203.0.113.7");
  e = accepted("203.0.113.0/24");
  EXPECT_EQ(e.cidr, (Cidr{ip("203.0.113.0"), 24}));
  e = accepted("203.0.113.0/24:5432");
  EXPECT_EQ(e.cidr.prefix, 24);
  EXPECT_EQ(e.ports, (std::vector<uint16_t>{5432}));
  EXPECT_EQ(accepted("198.51.100.0/24:1").ports, (std::vector<uint16_t>{1}));
  EXPECT_EQ(accepted("8.8.8.8:65535").ports, (std::vector<uint16_t>{65535}));
}

TEST(PolicyTest, RefusesMalformedCidrEntries) {
  EXPECT_NE(refused("10.1.2.3/8").find("network is 10.0.0.0/8"), std::string::npos);
  EXPECT_NE(refused("203.0.113.7/24").find("203.0.113.0/24"), std::string::npos);
  EXPECT_NE(refused("203.0.113.7/24").find("203.0.113.7/32"), std::string::npos);
  EXPECT_NE(refused("203.0.113.0/33").find("prefix"), std::string::npos);
  EXPECT_NE(refused("203.0.113.0/").find("prefix"), std::string::npos);
  EXPECT_NE(refused("203.0.113.0/08").find("prefix"), std::string::npos);
  EXPECT_NE(refused("203.0.113.07").find("not a valid IPv4 address"), std::string::npos);
  EXPECT_NE(refused("1.2.3").find("not a valid IPv4 address"), std::string::npos);
  EXPECT_NE(refused("256.0.0.1").find("not a valid IPv4 address"), std::string::npos);
  EXPECT_NE(refused("1.2.3.4.5").find("not a valid IPv4 address"), std::string::npos);
}

TEST(PolicyTest, RefusesDeniedRangesWithTheirReason) {
  std::string m = refused("10.0.0.0/8", ErrorCode::kEgressDenied);
  EXPECT_NE(m.find("\"10.0.0.0/8\""), std::string::npos) << m;
  EXPECT_NE(m.find("private network (RFC 1918)"), std::string::npos) << m;
  m = refused("169.254.169.254", ErrorCode::kEgressDenied);
  EXPECT_NE(m.find("is inside 169.254.0.0/16"), std::string::npos) << m;
  EXPECT_NE(m.find("metadata"), std::string::npos) << m;
  m = refused("0.0.0.0/0", ErrorCode::kEgressDenied);
  // Every other range (how many depends on the operator's ranges other tests added).
  EXPECT_NE(m.find("overlaps 0.0.0.0/8 (this network) and " + std::to_string(always_denied().size() - 1) + " other"),
            std::string::npos)
      << m;
  m = refused("172.0.0.0/8:443", ErrorCode::kEgressDenied);  // holds 172.16/12
  EXPECT_NE(m.find("overlaps 172.16.0.0/12"), std::string::npos) << m;
  refused("127.0.0.1:8080", ErrorCode::kEgressDenied);
  refused("100.64.0.0/10", ErrorCode::kEgressDenied);
  refused("192.0.0.8", ErrorCode::kEgressDenied);
  refused("198.18.0.0/15", ErrorCode::kEgressDenied);
  refused("224.0.0.251", ErrorCode::kEgressDenied);
  refused("240.0.0.0/4", ErrorCode::kEgressDenied);
  EXPECT_NE(refused("255.255.255.255", ErrorCode::kEgressDenied).find("broadcast"), std::string::npos);
  // Next to the ranges, and the TEST-NET ranges, are fine.
  accepted("172.32.0.0/11");
  accepted("100.128.0.0/9");
  accepted("192.0.2.0/24");
  accepted("198.51.100.0/24");
  accepted("203.0.113.0/24");
}

TEST(PolicyTest, AcceptsNamesAndWildcards) {
  AllowEntry e = accepted("api.github.com");
  EXPECT_EQ(e.kind, AllowEntry::Kind::kName);
  EXPECT_EQ(e.name, "api.github.com");
  EXPECT_EQ(e.ports, (std::vector<uint16_t>{80, 443}));
  e = accepted("api.github.com:8443");
  EXPECT_EQ(e.name, "api.github.com");
  EXPECT_EQ(e.ports, (std::vector<uint16_t>{8443}));
  e = accepted("*.pypi.org");
  EXPECT_EQ(e.kind, AllowEntry::Kind::kWildcard);
  EXPECT_EQ(e.name, "pypi.org");
  EXPECT_EQ(e.text, "*.pypi.org");
  EXPECT_EQ(accepted("*.pypi.org:443").ports, (std::vector<uint16_t>{443}));
  EXPECT_EQ(accepted("xn--bcher-kva.example").name, "xn--bcher-kva.example");
  accepted("a-b.c0.io");
  accepted("1.2.3.a");   // only the last label must not be all digits
  accepted("123.com");
  accepted(std::string(63, 'a') + ".com");
  // 253 characters: 3 labels of 63, one of 61.
  accepted(std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." + std::string(61, 'd'));
}

TEST(PolicyTest, RefusesMalformedNames) {
  EXPECT_NE(refused("Foo.com").find("names must be lowercase"), std::string::npos);
  EXPECT_EQ(refused("Foo.com", ErrorCode::kInvalidRequest, 3), "egress.allow[3] \"Foo.com\": names must be lowercase");
  EXPECT_NE(refused("*.PyPI.org").find("lowercase"), std::string::npos);
  EXPECT_NE(refused("b\xc3\xbc" "cher.de").find("punycode (xn--)"), std::string::npos);
  EXPECT_NE(refused("b\xc3\xbc" "cher.de").find("\"b\xc3\xbc" "cher.de\""), std::string::npos);  // quoted as UTF-8
  EXPECT_NE(refused("x.com.").find("trailing dot"), std::string::npos);
  EXPECT_NE(refused("localhost").find("at least two labels"), std::string::npos);
  EXPECT_NE(refused("x.123").find("all digits"), std::string::npos);
  EXPECT_NE(refused("-x.com").find("start or end with '-'"), std::string::npos);
  EXPECT_NE(refused("x-.com").find("start or end with '-'"), std::string::npos);
  EXPECT_NE(refused("x..com").find("empty label"), std::string::npos);
  EXPECT_NE(refused(".x.com").find("empty label"), std::string::npos);
  EXPECT_NE(refused("a_b.com").find("only a-z, 0-9"), std::string::npos);
  EXPECT_NE(refused("a@b.com").find("only a-z, 0-9"), std::string::npos);
  EXPECT_NE(refused(std::string(64, 'a') + ".com").find("63 characters"), std::string::npos);
  const std::string long_name = std::string(63, 'a') + "." + std::string(63, 'b') + "." + std::string(63, 'c') + "." +
                                std::string(62, 'd');
  EXPECT_NE(refused(long_name).find("253 characters"), std::string::npos);
  // A long entry is cut in the message.
  EXPECT_NE(refused(long_name).find("...\""), std::string::npos);
}

TEST(PolicyTest, RefusesBadWildcards) {
  EXPECT_NE(refused("*.com").find("too broad"), std::string::npos);
  for (const char* bad : {"a.*.com", "*foo.com", "**.x.com", "*", "x.com*", "*.*.x.com", "*:443"}) {
    EXPECT_NE(refused(bad).find("only as a leading \"*.\""), std::string::npos) << bad;
  }
  EXPECT_NE(refused("*.").find("empty name"), std::string::npos);
  EXPECT_NE(refused("*.x.com.").find("trailing dot"), std::string::npos);
  EXPECT_NE(refused("*.10.0.0.1").find("all digits"), std::string::npos);
}

TEST(PolicyTest, RefusesBadPorts) {
  for (const char* bad : {"x.com:0", "x.com:65536", "x.com:080", "x.com:+80", "x.com:8a", "x.com:99999999999"}) {
    EXPECT_NE(refused(bad).find("port must be 1..65535"), std::string::npos) << bad;
  }
  EXPECT_NE(refused("x.com:").find("no port after ':'"), std::string::npos);
  EXPECT_NE(refused(":443").find("no host before the port"), std::string::npos);
  EXPECT_NE(refused("203.0.113.7:").find("no port"), std::string::npos);
}

TEST(PolicyTest, RefusesOtherFormsSayingWhatIsExpected) {
  EXPECT_NE(refused("").find("empty entry; expected an IPv4 address or CIDR"), std::string::npos);
  EXPECT_NE(refused(" x.com").find("whitespace"), std::string::npos);
  EXPECT_NE(refused("x.com ").find("whitespace"), std::string::npos);
  EXPECT_NE(refused("x .com").find("whitespace"), std::string::npos);
  EXPECT_NE(refused("x.com\t").find("whitespace"), std::string::npos);
  EXPECT_NE(refused(std::string("x.com\0", 6)).find("\\x00"), std::string::npos);  // escaped in the message
  EXPECT_NE(refused("https://x.com").find("schemes are not allowed"), std::string::npos);
  EXPECT_NE(refused("http://x.com:80/").find("schemes are not allowed"), std::string::npos);
  EXPECT_NE(refused("x.com/a").find("paths are not allowed"), std::string::npos);
  EXPECT_NE(refused("x.com:443/a").find("paths are not allowed"), std::string::npos);
  EXPECT_NE(refused("::1").find("IPv6 is not supported"), std::string::npos);
  EXPECT_NE(refused("2001:db8::1").find("IPv6 is not supported"), std::string::npos);
  EXPECT_NE(refused("[2001:db8::1]:443").find("IPv6 is not supported"), std::string::npos);
  EXPECT_NE(refused("x.com:80:81").find("one :port per entry"), std::string::npos);
  EXPECT_NE(refused("::ffff:1.2.3.4").find("IPv6 is not supported"), std::string::npos);
  EXPECT_NE(refused("x\"y.com").find("\"x\\\"y.com\""), std::string::npos);
}

TEST(PolicyTest, ListLimitsAndDuplicates) {
  std::vector<std::string> texts;
  for (int i = 0; i < 256; ++i) texts.push_back("h" + std::to_string(i) + ".example.com");
  EXPECT_TRUE(parse_allow_list(texts).has_value());
  texts.push_back("one-more.example.com");
  auto too_many = parse_allow_list(texts);
  ASSERT_FALSE(too_many.has_value());
  EXPECT_EQ(too_many.error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(too_many.error().message, "egress.allow has 257 entries; at most 256");

  auto dup = parse_allow_list({"a.com", "b.com", "a.com"});
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(dup.error().message, "egress.allow[2] \"a.com\": duplicate of egress.allow[0]");
  // The same target written two ways is a duplicate; another port is not.
  dup = parse_allow_list({"203.0.113.7", "203.0.113.7/32"});
  ASSERT_FALSE(dup.has_value());
  EXPECT_NE(dup.error().message.find("duplicate of egress.allow[0]"), std::string::npos);
  EXPECT_TRUE(parse_allow_list({"a.com", "a.com:8080", "*.a.com", "203.0.113.7", "203.0.113.7:22"}).has_value());
  // The first bad entry's error, with its index.
  auto bad = parse_allow_list({"a.com", "10.0.0.1", "B.com"});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kEgressDenied);
  EXPECT_EQ(bad.error().message.rfind("egress.allow[1] \"10.0.0.1\"", 0), 0u);
  EXPECT_TRUE(parse_allow_list({}).has_value());
}

TEST(PolicyTest, MatchesNamesWildcardsCaseAndPorts) {
  const Allowlist list = list_of({"api.github.com", "*.pypi.org", "db.example.com:5432"});
  EXPECT_TRUE(list.allows_name("api.github.com", 443));
  EXPECT_TRUE(list.allows_name("api.github.com", 80));
  EXPECT_FALSE(list.allows_name("api.github.com", 8080));
  EXPECT_TRUE(list.allows_name("API.GitHub.com", 443));
  EXPECT_TRUE(list.allows_name("api.github.com.", 443));
  EXPECT_FALSE(list.allows_name("api.github.com..", 443));
  EXPECT_FALSE(list.allows_name("github.com", 443));
  EXPECT_FALSE(list.allows_name("x.api.github.com", 443));  // a name is not a wildcard
  EXPECT_FALSE(list.allows_name("api.github.com.evil.com", 443));

  EXPECT_TRUE(list.allows_name("files.pypi.org", 443));
  EXPECT_TRUE(list.allows_name("a.b.pypi.org", 80));
  EXPECT_TRUE(list.allows_name("FILES.PYPI.ORG.", 443));
  EXPECT_FALSE(list.allows_name("pypi.org", 443));  // subdomains only
  EXPECT_FALSE(list.allows_name("xpypi.org", 443));
  EXPECT_FALSE(list.allows_name("files.pypi.org.evil.com", 443));
  EXPECT_FALSE(list.allows_name("files.pypi.org", 22));

  EXPECT_TRUE(list.allows_name("db.example.com", 5432));
  EXPECT_FALSE(list.allows_name("db.example.com", 443));
  EXPECT_FALSE(list.allows_name("", 443));
  EXPECT_FALSE(list.allows_name("a_b.pypi.org", 443));  // malformed, whatever the entries

  EXPECT_TRUE(list.resolvable("db.example.com"));
  EXPECT_TRUE(list.resolvable("Files.PyPI.org."));
  EXPECT_FALSE(list.resolvable("pypi.org"));
  EXPECT_FALSE(list.resolvable("example.com"));

  EXPECT_EQ(list.name_ports(), (std::vector<uint16_t>{80, 443, 5432}));
  EXPECT_TRUE(list.cidr_ports().empty());
}

TEST(PolicyTest, MatchesCidrs) {
  const Allowlist list = list_of({"203.0.113.0/24", "198.51.100.7:5432", "api.github.com:8443"});
  EXPECT_TRUE(list.allows_ip(ip("203.0.113.1"), 443));
  EXPECT_TRUE(list.allows_ip(ip("203.0.113.255"), 80));
  EXPECT_FALSE(list.allows_ip(ip("203.0.113.1"), 22));
  EXPECT_FALSE(list.allows_ip(ip("203.0.114.1"), 443));
  EXPECT_TRUE(list.allows_ip(ip("198.51.100.7"), 5432));
  EXPECT_FALSE(list.allows_ip(ip("198.51.100.8"), 5432));
  EXPECT_FALSE(list.allows_name("203.0.113.1", 443));  // CIDRs do not allow names

  const std::vector<std::pair<Cidr, uint16_t>> want = {{*parse_cidr("203.0.113.0/24"), 80},
                                                      {*parse_cidr("203.0.113.0/24"), 443},
                                                      {*parse_cidr("198.51.100.7"), 5432}};
  EXPECT_EQ(list.cidr_ports(), want);
  EXPECT_EQ(list.name_ports(), (std::vector<uint16_t>{8443}));
}

TEST(PolicyTest, HandMadeListsNeverReachDeniedRanges) {
  AllowEntry everything;
  everything.kind = AllowEntry::Kind::kCidr;
  everything.cidr = Cidr{0, 0};
  everything.ports = {443};
  const Allowlist list({everything});
  EXPECT_TRUE(list.allows_ip(ip("8.8.8.8"), 443));
  EXPECT_FALSE(list.allows_ip(ip("10.0.0.1"), 443));
  EXPECT_FALSE(list.allows_ip(ip("169.254.169.254"), 443));
  EXPECT_FALSE(Allowlist().allows_ip(ip("8.8.8.8"), 443));
  EXPECT_FALSE(Allowlist().allows_name("a.com", 443));
}

TEST(PolicyTest, CanonicalHost) {
  EXPECT_EQ(canonical_host("API.GitHub.Com"), "api.github.com");
  EXPECT_EQ(canonical_host("a.b3t.test."), "a.b3t.test");
  EXPECT_EQ(canonical_host("localhost"), "localhost");
  EXPECT_EQ(canonical_host("xn--bcher-kva.example"), "xn--bcher-kva.example");
  EXPECT_EQ(canonical_host(std::string(253, 'a').replace(63, 1, ".").replace(127, 1, ".").replace(191, 1, ".") + "."),
            std::string(253, 'a').replace(63, 1, ".").replace(127, 1, ".").replace(191, 1, "."));
  for (const char* bad : {"", ".", "a..", "..", "a..b", ".a", "a_b.com", "-a.com", "a-.com", "a b.com", "a.com:443",
                          "1.2.3.4", "a.123", "*.a.com", "a.com/", "b\xc3\xbc.de"}) {
    EXPECT_FALSE(canonical_host(bad).has_value()) << bad;
  }
  EXPECT_FALSE(canonical_host(std::string("a\0.com", 6)).has_value());
  EXPECT_FALSE(canonical_host(std::string(64, 'a') + ".com").has_value());
  EXPECT_FALSE(canonical_host(std::string(254, 'a')).has_value());
}

}  // namespace
}  // namespace b3os::net
