// Every REST route has a row in the access table, and every REST row a route: a route added
// without saying who may call it fails here. The rows' kinds are what docs/api.md says.
#include "daemon/api/access.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon/api/api.h"

namespace b3os::api {
namespace {

TEST(AccessTable, EveryRestRouteHasARowAndEveryRowARoute) {
  for (auto& [method, pattern] : Api::rest_routes()) {
    const access::Rule* r = access::find("rest", method, pattern);
    ASSERT_NE(r, nullptr) << method << " " << pattern << " has no row in daemon/api/access.cc";
    EXPECT_EQ(r->method, method) << pattern << ": a row of its own, not a wildcard";
  }
  for (const access::Rule& r : access::rules()) {
    if (r.surface != "rest" || r.method == "*") continue;  // "*": the 501 ports routes
    bool found = false;
    for (auto& [method, pattern] : Api::rest_routes()) found = found || (method == r.method && pattern == r.pattern);
    EXPECT_TRUE(found) << r.method << " " << r.pattern << " is a row without a route";
  }
}

TEST(AccessTable, AnEnvdTokenReachesEnvdAloneAndAKeyNeverEnvd) {
  for (const access::Rule& r : access::rules()) {
    const bool envd = r.surface == "envd";
    EXPECT_EQ(access::admits(r, sandbox::CredentialKind::kEnvdToken), envd) << r.surface << " " << r.pattern;
    if (envd) EXPECT_FALSE(access::admits(r, sandbox::CredentialKind::kApiKey)) << r.pattern;
    EXPECT_FALSE(access::admits(r, sandbox::CredentialKind::kInternal)) << r.surface << " " << r.pattern;
  }
}

TEST(AccessTable, PrintsAsJson) {
  auto j = nlohmann::json::parse(access::to_json());
  ASSERT_TRUE(j["rules"].is_array());
  EXPECT_EQ(j["rules"].size(), access::rules().size());
  EXPECT_EQ(j["rules"][0]["kinds"][0], "none");
}

}  // namespace
}  // namespace b3os::api
