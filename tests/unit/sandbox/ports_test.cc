// Ports' pure parts: preview hosts, tokens, what is stripped before a request reaches the app,
// the public URLs in the sandbox object; and minting against the fake store.
#include "daemon/sandbox/ports.h"

#include <gtest/gtest.h>

#include <set>

#include "daemon/sandbox/view.h"
#include "tests/fakes/fake_store.h"

namespace b3os::sandbox {
namespace {

constexpr const char* kId = "sbx_01m5t68q1b590rj801nbzsqzkk";
constexpr const char* kHostId = "sbx-01m5t68q1b590rj801nbzsqzkk";

TEST(PreviewHost, ParsesPortAndSandbox) {
  auto t = parse_preview_host(std::string("8080-") + kHostId + ".localhost:7080", "localhost");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->sandbox_id, kId);
  EXPECT_EQ(t->host_id, kHostId);
  EXPECT_EQ(host_id_of(kId), kHostId);
}

TEST(PreviewHost, CaseTrailingDotAndNoListenPort) {
  auto t = parse_preview_host(std::string("443-") + "SBX-01M5T68Q1B590RJ801NBZSQZKK.Preview.Example.COM.", "preview.example.com");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->port, 443);
  EXPECT_EQ(t->sandbox_id, kId);
}

TEST(PreviewHost, TheSandboxIdItselfAsE2bNamesIt) {
  // E2B's SDK builds getHost(port) as "{port}-{sandboxId}.{domain}".
  auto t = parse_preview_host(std::string("8000-") + kId + ".localhost:7080", "localhost");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->port, 8000);
  EXPECT_EQ(t->sandbox_id, kId);
  auto bad = parse_preview_host("8000-sbx_short.localhost", "localhost");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kNotFound);
}

TEST(PreviewHost, OtherShapesAre404) {
  const std::string h = kHostId;
  for (const std::string& bad :
       {std::string(""), std::string("localhost"), "8080-" + h, "8080-" + h + ".example.com", "8080" + h + ".localhost",
        "-" + h + ".localhost", "80x-" + h + ".localhost", std::string("8080-sbx-short.localhost"), "8080-abc-" + h.substr(4) + ".localhost",
        "8080-" + h + ".localhost:", "8080-" + h + ".localhost:80a", "8080-" + h + "localhost", "a.8080-" + h + ".localhost",
        "8080-" + h + ".evil-localhost"}) {
    auto t = parse_preview_host(bad, "localhost");
    ASSERT_FALSE(t) << bad;
    EXPECT_EQ(t.error().code, ErrorCode::kNotFound) << bad;
  }
}

TEST(PreviewHost, PortOutOfRangeIs400) {
  for (const std::string p : {"0", "65536", "99999", "123456"}) {
    auto t = parse_preview_host(p + "-" + kHostId + ".localhost", "localhost");
    ASSERT_FALSE(t) << p;
    EXPECT_EQ(t.error().code, ErrorCode::kInvalidRequest) << p;
  }
  EXPECT_TRUE(parse_preview_host(std::string("65535-") + kHostId + ".localhost", "localhost"));
  EXPECT_TRUE(parse_preview_host(std::string("1-") + kHostId + ".localhost", "localhost"));
}

TEST(TokenParam, RemovedAndTheRestKept) {
  auto s = strip_token_param("/a/b?x=1&b3os_token=abc&y=2");
  EXPECT_EQ(s.target, "/a/b?x=1&y=2");
  EXPECT_EQ(s.token, "abc");
  s = strip_token_param("/?b3os_token=abc");
  EXPECT_EQ(s.target, "/");
  EXPECT_EQ(s.token, "abc");
  s = strip_token_param("/p?b3os_token=one&b3os_token=two");
  EXPECT_EQ(s.target, "/p");
  EXPECT_EQ(s.token, "one");
  s = strip_token_param("/p?b3os_tokenx=1&xb3os_token=2");
  EXPECT_EQ(s.target, "/p?b3os_tokenx=1&xb3os_token=2");
  EXPECT_FALSE(s.token);
  s = strip_token_param("/plain");
  EXPECT_EQ(s.target, "/plain");
  EXPECT_FALSE(s.token);
}

TEST(TokenCookies, OnlyTheHostCookieOfThisPortCounts) {
  auto c = strip_token_cookies("a=1; b3os_token_8080=T8080; __Host-b3os_token_8080=H; __Host-b3os_token_9000=H9; b3os_token=T; z=2", 8080);
  EXPECT_EQ(c.cookie, "a=1; z=2");
  EXPECT_EQ(c.tokens, std::vector<std::string>{"H"});
  // The names a sibling host can toss onto the parent domain (or an older b3osd set) open nothing.
  c = strip_token_cookies("b3os_token=T;a=1; b3os_token_8080=T8080", 8080);
  EXPECT_EQ(c.cookie, "a=1");
  EXPECT_TRUE(c.tokens.empty());
  c = strip_token_cookies("__Host-b3os_token_9000=T9000", 8080);
  EXPECT_EQ(c.cookie, "");
  EXPECT_TRUE(c.tokens.empty());  // another port's cookie opens nothing here
  // The prefix in another case is no __Host- cookie to every browser: not a token, but ours.
  c = strip_token_cookies("__HOST-b3os_token_8080=X; __host-b3os_token_8080=Y", 8080);
  EXPECT_EQ(c.cookie, "");
  EXPECT_TRUE(c.tokens.empty());
  c = strip_token_cookies("", 8080);
  EXPECT_EQ(c.cookie, "");
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(token_cookie(8080, "abc"), "__Host-b3os_token_8080=abc; Secure; HttpOnly; SameSite=Lax; Path=/");
}

TEST(TokenCookies, EveryCookieNamedLikeOursRemoved) {
  auto c = strip_token_cookies(
      "keep=1; B3OS_TOKEN=a; __Secure-b3os_token=b; b3os_tokenx=c; b3os_token_8080; =__Host-b3os_token_8080=d; "
      " b3os_token_1 = e ; x=b3os_token_8080; xb3os_token=f",
      8080);
  EXPECT_EQ(c.cookie, "keep=1; x=b3os_token_8080; xb3os_token=f");
  EXPECT_TRUE(c.tokens.empty());
  for (std::string_view n : {"b3os_token", "b3os_token_1", "B3OS_Token_80", "__Host-b3os_token_80", "__host-B3OS_TOKEN",
                             "__Secure-b3os_token_80", " b3os_token "})
    EXPECT_TRUE(is_token_cookie_name(n)) << n;
  for (std::string_view n : {"", "b3os", "xb3os_token", "__Host-x", "__Host-__Secure-b3os_token", "session"})
    EXPECT_FALSE(is_token_cookie_name(n)) << n;
}

TEST(TokenCookies, EachCandidateKeptInOrderBounded) {
  // A bogus cookie beside the owner's must not hide it: every candidate is returned (in order,
  // empty ones left out), up to kMaxTokenCookies.
  auto c = strip_token_cookies("__Host-b3os_token_80=bogus; __Host-b3os_token_80=; __Host-b3os_token_80=good", 80);
  EXPECT_EQ(c.tokens, (std::vector<std::string>{"bogus", "good"}));
  std::string many;
  for (int i = 0; i < 10; ++i) many += "__Host-b3os_token_80=t" + std::to_string(i) + "; ";
  c = strip_token_cookies(many + "a=1", 80);
  EXPECT_EQ(c.tokens.size(), kMaxTokenCookies);
  EXPECT_EQ(c.tokens.front(), "t0");
  EXPECT_EQ(c.cookie, "a=1");
}

TEST(TokenCookies, SetCookieNamedLikeOurs) {
  for (std::string_view sc :
       {"__Host-b3os_token_8000=evil; Secure; HttpOnly; Path=/", "b3os_token_8000=evil; Domain=localhost; Path=/",
        "B3OS_TOKEN=evil", "__secure-b3os_token=evil; Secure", "=__Host-b3os_token_8000=evil; Secure; Path=/",
        " b3os_token_8000 =evil", "b3os_token_8000", "__HOST-B3os_Token_1=x", "b3os_tokenx=1"})
    EXPECT_TRUE(sets_token_cookie(sc)) << sc;
  for (std::string_view sc : {"app=1; Path=/", "session=b3os_token_8000; Path=/", "xb3os_token=1", "=plain", "",
                              "a=1; Comment=b3os_token=2"})
    EXPECT_FALSE(sets_token_cookie(sc)) << sc;
}

TEST(Tokens, RandomLongAndHashed) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string t = new_port_token();
    EXPECT_EQ(t.size(), 32u);  // 160 bits of base32
    EXPECT_TRUE(seen.insert(t).second);
  }
  EXPECT_EQ(token_sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(tokens_equal("abcd", "abcd"));
  EXPECT_FALSE(tokens_equal("abcd", "abce"));
  EXPECT_FALSE(tokens_equal("abcd", "abc"));
}

TEST(PortUrls, PublicTokensPerSandboxPortAndKey) {
  PortUrls a(PreviewConfig{"localhost", 7080, ""}, std::string(32, 'k'));
  PortUrls b(PreviewConfig{"localhost", 7080, ""}, std::string(32, 'K'));
  const std::string t = a.public_token(kId, 8080);
  EXPECT_EQ(t.size(), 32u);
  EXPECT_EQ(t, a.public_token(kId, 8080));  // stable: shown in every GET
  EXPECT_NE(t, a.public_token(kId, 8081));
  EXPECT_NE(t, a.public_token("sbx_01m5t68q1b590rj801nbzsqzkm", 8080));  // a fork's differs
  EXPECT_NE(t, b.public_token(kId, 8080));  // another node key
  EXPECT_EQ(a.url(kId, 8080, "tok"), std::string("http://8080-") + kHostId + ".localhost:7080/?b3os_token=tok");
}

TEST(PortUrls, InTheSandboxObject) {
  PortUrls urls(PreviewConfig{"example.test", 9999, ""}, std::string(32, 'k'));
  store::SandboxRecord r;
  r.id = kId;
  r.state = store::State::kRunning;
  r.ports = {{8080, true}, {9000, false}};
  auto j = sandbox_object(r, 0, std::nullopt, &urls);
  EXPECT_EQ(j["host_id"], kHostId);
  EXPECT_EQ(j["ports"][0]["url"], urls.url(kId, 8080, urls.public_token(kId, 8080)));
  EXPECT_TRUE(j["ports"][1]["url"].is_null());
  r.state = store::State::kStopped;
  j = sandbox_object(r, 0, std::nullopt, &urls);
  EXPECT_TRUE(j["ports"][0]["url"].is_null());  // an ended sandbox serves nothing
}

TEST(PortTokens, FakeStoreForgetsExpiredAndEnded) {
  fakes::FakeStore st;
  ASSERT_TRUE(st.put_port_token({"h1", kId, 80, 0, 100}, 0));
  ASSERT_TRUE(st.put_port_token({"h2", "sbx_other", 80, 0, 1000}, 0));
  EXPECT_TRUE(st.find_port_token("h1").value().has_value());
  ASSERT_TRUE(st.put_port_token({"h3", kId, 81, 200, 1000}, 200));  // h1 expired by now
  EXPECT_FALSE(st.find_port_token("h1").value().has_value());
  ASSERT_TRUE(st.delete_port_tokens(kId));
  EXPECT_FALSE(st.find_port_token("h3").value().has_value());
  EXPECT_TRUE(st.find_port_token("h2").value().has_value());
}

}  // namespace
}  // namespace b3os::sandbox
