#include "daemon/api/target.h"

#include <gtest/gtest.h>

#include "daemon/api/api.h"
#include "daemon/api/rate_limit.h"

namespace b3os::api {
namespace {

TEST(ParseTarget, PathAndQuery) {
  auto t = parse_target("/v1/sandboxes/sbx_1/files?path=%2Fworkspace%2Fa%20b.txt&recursive=true");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/v1/sandboxes/sbx_1/files");
  ASSERT_EQ(t->segments.size(), 4u);
  EXPECT_EQ(*t->param("path"), "/workspace/a b.txt");
  EXPECT_EQ(*t->param("recursive"), "true");
  EXPECT_FALSE(t->param("x"));
}

TEST(ParseTarget, MetadataFiltersAndPlus) {
  auto t = parse_target("/v1/sandboxes?metadata%5Bteam%5D=a+b&metadata[x]=1&limit=5");
  ASSERT_TRUE(t);
  EXPECT_EQ(*t->param("metadata[team]"), "a b");
  EXPECT_EQ(*t->param("metadata[x]"), "1");
  EXPECT_EQ(t->query.size(), 3u);
}

TEST(ParseTarget, Rejects) {
  EXPECT_FALSE(parse_target(""));
  EXPECT_FALSE(parse_target("v1/x"));
  EXPECT_FALSE(parse_target("/v1/%zz"));
  EXPECT_FALSE(parse_target("/v1/x?path=%"));
  EXPECT_FALSE(parse_target("/v1/x?path=%0"));
  EXPECT_FALSE(parse_target("/v1/%00"));
}

TEST(ParseTarget, EmptySegmentsCollapse) {
  auto t = parse_target("//v1///templates/");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/v1/templates");
}

TEST(ServerTiming, PhasesAndTotal) {
  sandbox::Timing t;
  t.add("create", 12.3456);
  t.add("agent", 0.5);
  EXPECT_EQ(server_timing(t, 13.0), "create;dur=12.346, agent;dur=0.500, total;dur=13.000");
}

TEST(ErrorReply, Shape) {
  Reply r = error_reply({ErrorCode::kSandboxNotFound, "no sandbox x", 0});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body["error"]["code"], "sandbox_not_found");
  EXPECT_EQ(r.body["error"]["message"], "no sandbox x");
  Reply u = error_reply({ErrorCode::kUnauthorized, "no key", 0});
  ASSERT_EQ(u.headers.size(), 1u);
  EXPECT_EQ(u.headers[0].first, "WWW-Authenticate");
}

TEST(DumpJson, InvalidUtf8IsReplaced) {
  nlohmann::json j = {{"stdout", std::string("a\xff") + "b"}};
  EXPECT_EQ(dump_json(j), "{\"stdout\":\"a\xef\xbf\xbd" "b\"}");
}

TEST(RateLimiter, BurstThenRefuse) {
  RateLimiter rl(1, 3);
  double wait = 0;
  EXPECT_TRUE(rl.take("k", &wait));
  EXPECT_TRUE(rl.take("k", &wait));
  EXPECT_TRUE(rl.take("k", &wait));
  EXPECT_FALSE(rl.take("k", &wait));
  EXPECT_GT(wait, 0);
  EXPECT_TRUE(rl.take("other", &wait));
}

}  // namespace
}  // namespace b3os::api
