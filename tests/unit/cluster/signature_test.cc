#include "daemon/cluster/signature.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <strings.h>

#include "common/ids.h"
#include "daemon/router/router.h"

namespace b3os::cluster {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef-cluster";

// A request as a node sees it: its headers by name (any case), the cluster's included.
struct Req {
  std::map<std::string, std::string> h;
  std::string_view operator()(std::string_view name) const {
    for (auto& [k, v] : h)
      if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
    return {};
  }
};

// Signs `r` as a router would (time t, a fresh nonce, the body's digest or "unsigned").
Req signed_req(const std::string& method, const std::string& target, int64_t t, Req r,
               const std::string& body = std::string(kUnsignedBody)) {
  r.h[std::string(kTimeHeader)] = std::to_string(t);
  r.h[std::string(kNonceHeader)] = new_nonce();
  r.h[std::string(kBodyHeader)] = body;
  const Req copy = r;
  r.h[std::string(kSignatureHeader)] =
      sign_request(kSecret, {method, target, t, copy(kNonceHeader), copy(kBodyHeader), copy});
  return r;
}

Result<void> verify(const Req& r, const std::string& method, const std::string& target, int64_t now,
                    ReplayGuard* replay = nullptr, const std::string& secret = kSecret) {
  return verify_request(secret, method, target, std::cref(r), now, replay);
}

TEST(ClusterSignature, ASignedRequestPassesAndAnythingChangedFails) {
  const int64_t t = 1'800'000'000'000;
  const Req r = signed_req("POST", "/v1/sandboxes/sbx_a/exec", t, Req{{{"Authorization", "Bearer b3os_sk_x"}}});
  EXPECT_EQ(r(kSignatureHeader).size(), 64u);
  EXPECT_TRUE(verify(r, "POST", "/v1/sandboxes/sbx_a/exec", t));
  // Each part counts: method, target, time, nonce, body digest, the secret.
  EXPECT_FALSE(verify(r, "GET", "/v1/sandboxes/sbx_a/exec", t));
  EXPECT_FALSE(verify(r, "POST", "/v1/sandboxes/sbx_b/exec", t));
  auto changed = [&](const std::string& name, const std::string& value) {
    Req c = r;
    c.h[name] = value;
    return verify(c, "POST", "/v1/sandboxes/sbx_a/exec", t);
  };
  EXPECT_FALSE(changed(std::string(kTimeHeader), std::to_string(t + 1)));
  EXPECT_FALSE(changed(std::string(kNonceHeader), new_nonce()));
  EXPECT_FALSE(changed(std::string(kBodyHeader), sha256_hex("{}")));
  // Every header that carries a credential, changed, added or removed.
  EXPECT_FALSE(changed("Authorization", "Bearer b3os_sk_y"));
  EXPECT_FALSE(changed("Authorization", ""));
  for (const char* h : {"X-API-Key", "X-Access-Token", "E2b-Sandbox-Id", "Cookie", "e2b-traffic-access-token"})
    EXPECT_FALSE(changed(h, "added")) << h;
  EXPECT_TRUE(changed("User-Agent", "anything"));  // not a credential: not signed
  EXPECT_FALSE(verify(r, "POST", "/v1/sandboxes/sbx_a/exec", t, nullptr, kSecret + "!"));
  Req bad = r;
  bad.h[std::string(kSignatureHeader)] = std::string(r(kSignatureHeader).substr(1)) + "0";
  auto b = verify(bad, "POST", "/v1/sandboxes/sbx_a/exec", t);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(b.error().message.find(std::string(r(kSignatureHeader))), std::string::npos);  // never the expected value
}

TEST(ClusterSignature, AReplayWithinTheWindowIsRefused) {
  const int64_t t = 1'800'000'000'000;
  ReplayGuard guard;
  const Req r = signed_req("POST", "/internal/adopt", t, Req{});
  EXPECT_TRUE(verify(r, "POST", "/internal/adopt", t, &guard));
  auto again = verify(r, "POST", "/internal/adopt", t + 1000, &guard);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("replay"), std::string::npos);
  // The same request signed again (a new nonce) is another request.
  EXPECT_TRUE(verify(signed_req("POST", "/internal/adopt", t, Req{}), "POST", "/internal/adopt", t + 1000, &guard));
  // Past the window its time refuses it anyway, and the guard has let it go.
  EXPECT_FALSE(verify(r, "POST", "/internal/adopt", t + 2 * kMaxSkewMs + 1, &guard));
}

TEST(ClusterSignature, StaleMissingOrMalformedTimesAreRefused) {
  const int64_t now = 1'800'000'000'000;
  auto at = [&](int64_t t) { return verify(signed_req("GET", "/x", t, Req{}), "GET", "/x", now); };
  EXPECT_TRUE(at(now - 29'000));
  EXPECT_TRUE(at(now + 29'000));
  EXPECT_FALSE(at(now - 31'000));
  EXPECT_FALSE(at(now + 31'000));
  auto none = verify(Req{}, "GET", "/x", now);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("internal port"), std::string::npos);
  Req bad_time = signed_req("GET", "/x", 12, Req{});
  bad_time.h[std::string(kTimeHeader)] = "12x";
  EXPECT_FALSE(verify(bad_time, "GET", "/x", now));
  EXPECT_FALSE(verify(signed_req("GET", "/x", -1, Req{}), "GET", "/x", now));
  Req no_nonce = signed_req("GET", "/x", now, Req{});
  no_nonce.h.erase(std::string(kNonceHeader));
  EXPECT_FALSE(verify(no_nonce, "GET", "/x", now));  // a v1 signer's request
}

TEST(ClusterSignature, TheSecretFileMustBeLongAndPrivate) {
  const auto dir = std::filesystem::temp_directory_path() / ("b3os-secret-" + random_base32(8));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    const auto p = (dir / name).string();
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
  };
  auto good = read_cluster_secret(write("good", kSecret + "\n", 0600));
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(*good, kSecret);
  EXPECT_FALSE(read_cluster_secret(write("short", "too-short\n", 0600)));
  auto open = read_cluster_secret(write("open", kSecret, 0644));
  ASSERT_FALSE(open);
  EXPECT_NE(open.error().message.find("chmod 600"), std::string::npos);
  EXPECT_TRUE(read_cluster_secret(write("group", kSecret, 0440)));  // Kubernetes' fsGroup
  EXPECT_FALSE(read_cluster_secret(write("group_w", kSecret, 0660)));
  EXPECT_FALSE(read_cluster_secret((dir / "missing").string()));
  std::filesystem::remove_all(dir);
}

TEST(RouterNodeUrl, ParsesHostAndPortAndRefusesTheRest) {
  auto a = router::parse_node_url("http://10.0.0.7:7071");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "10.0.0.7");
  EXPECT_EQ(a->port, 7071);
  auto v6 = router::parse_node_url("http://[fd00::7]:7071/");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "fd00::7");
  auto name = router::parse_node_url("http://b3osd-0.b3osd.b3os.svc:7071");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->host, "b3osd-0.b3osd.b3os.svc");
  EXPECT_FALSE(name->tls);
  // A node whose internal listener speaks TLS (--cluster-tls-cert) registers https://.
  auto tls = router::parse_node_url("https://10.0.0.7:7443");
  ASSERT_TRUE(tls);
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, 7443);
  for (const char* bad : {"", "ftp://x:1", "https://x", "http://x", "http://x:", "http://x:0", "http://x:70000", "http://x:7a",
                          "http://[fd00::7]7071", "http://:80"})
    EXPECT_FALSE(router::parse_node_url(bad)) << bad;
}

}  // namespace
}  // namespace b3os::cluster
