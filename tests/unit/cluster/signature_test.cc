#include "daemon/cluster/signature.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/ids.h"
#include "daemon/router/router.h"

namespace b3os::cluster {
namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef-cluster";

TEST(ClusterSignature, ASignedRequestPassesAndAnythingChangedFails) {
  const int64_t t = 1'800'000'000'000;
  const std::string sig = sign_request(kSecret, "POST", "/v1/sandboxes/sbx_a/exec", t, "Bearer b3os_sk_x");
  EXPECT_EQ(sig.size(), 64u);
  EXPECT_TRUE(verify_request(kSecret, "POST", "/v1/sandboxes/sbx_a/exec", std::to_string(t), sig, "Bearer b3os_sk_x", t));
  // Each part counts: method, target, time, the key it carries, the secret.
  EXPECT_FALSE(verify_request(kSecret, "GET", "/v1/sandboxes/sbx_a/exec", std::to_string(t), sig, "Bearer b3os_sk_x", t));
  EXPECT_FALSE(verify_request(kSecret, "POST", "/v1/sandboxes/sbx_b/exec", std::to_string(t), sig, "Bearer b3os_sk_x", t));
  EXPECT_FALSE(verify_request(kSecret, "POST", "/v1/sandboxes/sbx_a/exec", std::to_string(t + 1), sig, "Bearer b3os_sk_x", t));
  EXPECT_FALSE(verify_request(kSecret, "POST", "/v1/sandboxes/sbx_a/exec", std::to_string(t), sig, "Bearer b3os_sk_y", t));
  EXPECT_FALSE(verify_request(kSecret + "!", "POST", "/v1/sandboxes/sbx_a/exec", std::to_string(t), sig, "Bearer b3os_sk_x", t));
  auto bad = verify_request(kSecret, "POST", "/v1/sandboxes/sbx_a/exec", std::to_string(t), sig.substr(1) + "0",
                            "Bearer b3os_sk_x", t);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::kUnauthorized);
  EXPECT_EQ(bad.error().message.find(sig), std::string::npos);  // never the expected value
}

TEST(ClusterSignature, StaleMissingOrMalformedTimesAreRefused) {
  const int64_t now = 1'800'000'000'000;
  auto at = [&](int64_t t) {
    return verify_request(kSecret, "GET", "/x", std::to_string(t), sign_request(kSecret, "GET", "/x", t, ""), "", now);
  };
  EXPECT_TRUE(at(now - 29'000));
  EXPECT_TRUE(at(now + 29'000));
  EXPECT_FALSE(at(now - 31'000));
  EXPECT_FALSE(at(now + 31'000));
  auto none = verify_request(kSecret, "GET", "/x", "", "", "", now);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("internal port"), std::string::npos);
  EXPECT_FALSE(verify_request(kSecret, "GET", "/x", "12x", sign_request(kSecret, "GET", "/x", 12, ""), "", now));
  EXPECT_FALSE(verify_request(kSecret, "GET", "/x", "-1", sign_request(kSecret, "GET", "/x", -1, ""), "", now));
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
  for (const char* bad : {"", "https://x:1", "http://x", "http://x:", "http://x:0", "http://x:70000", "http://x:7a",
                          "http://[fd00::7]7071", "http://:80"})
    EXPECT_FALSE(router::parse_node_url(bad)) << bad;
}

}  // namespace
}  // namespace b3os::cluster
