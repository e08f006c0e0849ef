#include "cli/args.h"

#include <gtest/gtest.h>

namespace b3os::cli {
namespace {

TEST(ParseKv, SplitsAtFirstEquals) {
  auto kv = parse_kv("A=b=c");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "A");
  EXPECT_EQ(kv->second, "b=c");
}

TEST(ParseKv, AllowsEmptyValue) {
  auto kv = parse_kv("EMPTY=");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "EMPTY");
  EXPECT_EQ(kv->second, "");
}

TEST(ParseKv, RejectsMissingEqualsAndEmptyKey) {
  auto no_eq = parse_kv("NOEQUALS");
  ASSERT_FALSE(no_eq);
  EXPECT_NE(no_eq.error().message.find("NOEQUALS"), std::string::npos);
  EXPECT_FALSE(parse_kv("=value"));
}

TEST(ParseKvObject, LaterKeyWinsAndErrorsNameTheFlag) {
  auto obj = parse_kv_object({"A=1", "B=two words", "A=3"}, "--env");
  ASSERT_TRUE(obj);
  EXPECT_EQ(*obj, Json({{"A", "3"}, {"B", "two words"}}));
  auto bad = parse_kv_object({"A=1", "oops"}, "--env");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message.rfind("--env: ", 0), 0u) << bad.error().message;
}

TEST(ParseKvPairs, KeepsOrderAndDuplicates) {
  auto pairs = parse_kv_pairs({"a=1", "a=2"}, "--metadata");
  ASSERT_TRUE(pairs);
  ASSERT_EQ(pairs->size(), 2u);
  EXPECT_EQ((*pairs)[1].second, "2");
}

TEST(ParseApiUrl, HostAndPort) {
  auto u = parse_api_url("http://127.0.0.1:7070");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 7070);
  EXPECT_EQ(u->base_path, "");
  EXPECT_EQ(u->host_header(), "127.0.0.1:7070");
  EXPECT_EQ(u->target("/v1/sandboxes"), "/v1/sandboxes");
}

TEST(ParseApiUrl, DefaultPortSchemeLessAndBasePath) {
  auto u = parse_api_url("http://example.com/b3os/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->host_header(), "example.com");
  EXPECT_EQ(u->target("/v1/templates"), "/b3os/v1/templates");

  auto bare = parse_api_url("localhost:9000");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->host, "localhost");
  EXPECT_EQ(bare->port, 9000);
}

TEST(ParseApiUrl, Ipv6) {
  auto u = parse_api_url("http://[::1]:7070");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 7070);
  EXPECT_EQ(u->host_header(), "[::1]:7070");
}

TEST(ParseApiUrl, Rejects) {
  EXPECT_FALSE(parse_api_url("https://127.0.0.1:7070"));
  EXPECT_FALSE(parse_api_url("ftp://host"));
  EXPECT_FALSE(parse_api_url("http://:7070"));
  EXPECT_FALSE(parse_api_url("http://host:0"));
  EXPECT_FALSE(parse_api_url("http://host:70000"));
  EXPECT_FALSE(parse_api_url("http://host:12ab"));
  EXPECT_FALSE(parse_api_url("http://host:"));
  EXPECT_FALSE(parse_api_url("http://user:pw@host"));
  EXPECT_FALSE(parse_api_url("http://host?x=1"));
  EXPECT_FALSE(parse_api_url("http://[::1"));
  auto https = parse_api_url("HTTPS://h");
  ASSERT_FALSE(https);
  EXPECT_NE(https.error().message.find("https is not supported"), std::string::npos);
}

TEST(UrlEncode, EncodesReservedAndUtf8) {
  EXPECT_EQ(url_encode("abc-._~XYZ09"), "abc-._~XYZ09");
  EXPECT_EQ(url_encode("a b&c=d+e/f?#%"), "a%20b%26c%3Dd%2Be%2Ff%3F%23%25");
  EXPECT_EQ(url_encode("/a b/c", "/"), "/a%20b/c");
  EXPECT_EQ(url_encode("\xC3\xA9"), "%C3%A9");
  EXPECT_EQ(url_encode(std::string_view("\0", 1)), "%00");
}

TEST(Query, BuildsEncodedPairs) {
  EXPECT_EQ(Query().str(), "");
  Query q;
  q.add("path", "/workspace/my file&x.txt").add("recursive", "true");
  EXPECT_EQ(q.str(), "?path=/workspace/my%20file%26x.txt&recursive=true");
}

TEST(Query, MetadataFilter) {
  Query q;
  q.add("status", "running").add_metadata("team", "a b").add_metadata("k:v", "x=y");
  EXPECT_EQ(q.str(), "?status=running&metadata[team]=a%20b&metadata[k%3Av]=x%3Dy");
}

TEST(SandboxPath, EncodesId) {
  EXPECT_EQ(sandbox_path("sbx_1"), "/v1/sandboxes/sbx_1");
  EXPECT_EQ(sandbox_path("sbx_1", "/exec"), "/v1/sandboxes/sbx_1/exec");
  EXPECT_EQ(sandbox_path("../x"), "/v1/sandboxes/..%2Fx");
}

}  // namespace
}  // namespace b3os::cli
