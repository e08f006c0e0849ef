#include "daemon/sandbox/spec.h"

#include <gtest/gtest.h>

namespace b3os::sandbox {
namespace {

using nlohmann::json;

Error create_error(const json& body) {
  auto r = parse_create(body, SpecLimits{});
  EXPECT_FALSE(r.has_value()) << body.dump();
  return r ? Error{} : r.error();
}

TEST(ParseCreate, DefaultsFromEmptyBody) {
  auto r = parse_create(json::object(), SpecLimits{});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->template_name, "base");
  EXPECT_EQ(r->timeout_s, 300);
  EXPECT_EQ(r->on_idle, "stop");
  EXPECT_EQ(r->egress.mode, "deny");
  EXPECT_EQ(r->vcpu, 1);
  EXPECT_FALSE(r->forkable);
  EXPECT_TRUE(check_supported(*r));
}

TEST(ParseCreate, EveryField) {
  json body = {{"template", "base"}, {"timeout_s", 600}, {"on_idle", "stop"}, {"env", {{"A", "1"}}},
               {"secrets", {{"TOKEN", "x"}}}, {"metadata", {{"team", "a"}}}, {"vcpu", 2}, {"memory_mib", 1024},
               {"disk_gib", 4}, {"forkable", false}, {"egress", {{"mode", "deny"}}},
               {"api", {{"scopes", json::array()}, {"spend_cap_usd", nullptr}}}, {"ports", json::array()}};
  auto r = parse_create(body, SpecLimits{});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->timeout_s, 600);
  EXPECT_EQ(r->env.at("A"), "1");
  EXPECT_EQ(r->secrets.at("TOKEN"), "x");
  EXPECT_EQ(r->vcpu, 2);
  EXPECT_EQ(r->memory_mib, 1024);
  EXPECT_EQ(r->disk_gib, 4);
}

TEST(ParseCreate, NamesTheBadField) {
  EXPECT_NE(create_error({{"timeout_s", 0}}).message.find("timeout_s"), std::string::npos);
  EXPECT_NE(create_error({{"timeout_s", "10"}}).message.find("timeout_s"), std::string::npos);
  EXPECT_NE(create_error({{"vcpu", 99}}).message.find("vcpu"), std::string::npos);
  EXPECT_NE(create_error({{"memory_mib", 1}}).message.find("memory_mib"), std::string::npos);
  EXPECT_NE(create_error({{"bogus", 1}}).message.find("bogus"), std::string::npos);
  EXPECT_NE(create_error({{"on_idle", "sleep"}}).message.find("on_idle"), std::string::npos);
  EXPECT_NE(create_error({{"egress", {{"mode", "open"}}}}).message.find("egress.mode"), std::string::npos);
  EXPECT_NE(create_error({{"api", {{"scopes", {"root"}}}}}).message.find("unknown scope"), std::string::npos);
  EXPECT_NE(create_error({{"env", {{"1BAD", "x"}}}}).message.find("env"), std::string::npos);
  EXPECT_NE(create_error({{"env", {{"B3OS_X", "x"}}}}).message.find("reserved"), std::string::npos);
  EXPECT_NE(create_error({{"ports", {{{"port", 70000}}}}}).message.find("ports[0].port"), std::string::npos);
  EXPECT_EQ(create_error(json::array()).code, ErrorCode::kInvalidRequest);
}

TEST(ParseMetadata, SpecRules) {
  json ok = json::object();
  for (int i = 0; i < 16; ++i) ok["k" + std::to_string(i)] = "v";
  EXPECT_TRUE(parse_metadata(ok, "metadata"));
  json many = ok;
  many["k16"] = "v";
  EXPECT_FALSE(parse_metadata(many, "metadata"));
  EXPECT_TRUE(parse_metadata({{"A-z_0.9:x", "v"}}, "metadata"));
  EXPECT_FALSE(parse_metadata({{"a b", "v"}}, "metadata"));
  EXPECT_FALSE(parse_metadata({{"", "v"}}, "metadata"));
  EXPECT_TRUE(parse_metadata({{std::string(40, 'k'), "v"}}, "metadata"));
  EXPECT_FALSE(parse_metadata({{std::string(41, 'k'), "v"}}, "metadata"));
  EXPECT_TRUE(parse_metadata({{"k", std::string(500, 'v')}}, "metadata"));
  EXPECT_FALSE(parse_metadata({{"k", std::string(501, 'v')}}, "metadata"));
  // 500 characters, not bytes: 500 two-byte characters fit.
  std::string accents;
  for (int i = 0; i < 500; ++i) accents += "\xc3\xa9";
  EXPECT_TRUE(parse_metadata({{"k", accents}}, "metadata"));
  EXPECT_FALSE(parse_metadata({{"k", 5}}, "metadata"));
}

TEST(CheckSupported, LaterFeaturesAre501) {
  auto spec = [](const json& body) { return *parse_create(body, SpecLimits{}); };
  EXPECT_TRUE(check_supported(spec({{"forkable", true}})));
  EXPECT_TRUE(check_supported(spec({{"egress", {{"mode", "public"}}}})));  // networks are here
  EXPECT_TRUE(check_supported(spec({{"egress", {{"mode", "allowlist"}, {"allow", {"a.b3t.test"}}}}})));
  EXPECT_TRUE(check_supported(spec({{"api", {{"scopes", {"infer:run"}}}}})));  // the gateway is here
  EXPECT_TRUE(check_supported(spec({{"ports", {{{"port", 8080}, {"public", true}}}}})));  // ports are here
  EXPECT_TRUE(check_supported(spec({{"on_idle", "pause"}})));
  EXPECT_TRUE(check_supported(spec({{"snapshot", "snp_x"}})));
}

TEST(ParseCreate, EgressAllowEntriesAreCheckedOneByOne) {
  auto e = create_error({{"egress", {{"mode", "allowlist"}, {"allow", {"a.b3t.test", "Bad.Name"}}}}});
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest);
  EXPECT_NE(e.message.find("egress.allow[1] \"Bad.Name\""), std::string::npos) << e.message;
  e = create_error({{"egress", {{"mode", "allowlist"}, {"allow", {"10.0.0.0/8"}}}}});
  EXPECT_EQ(e.code, ErrorCode::kEgressDenied);
  EXPECT_NE(e.message.find("egress.allow[0]"), std::string::npos) << e.message;
  e = create_error({{"egress", {{"mode", "allowlist"}, {"allow", {42}}}}});
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest);
  e = create_error({{"egress", {{"mode", "public"}, {"allow", {"a.b3t.test"}}}}});
  EXPECT_EQ(e.code, ErrorCode::kInvalidRequest);
  auto ok = parse_create({{"egress", {{"mode", "allowlist"}, {"allow", {"a.b3t.test", "*.wild.b3t.test:8080", "203.0.113.0/24"}}}}},
                         SpecLimits{});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->egress.allow.size(), 3u);
}

TEST(ParseExec, StringAndArray) {
  auto s = parse_exec({{"cmd", "echo hi"}});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(s->cwd, "/workspace");
  EXPECT_EQ(s->timeout_ms, 60000);
  auto a = parse_exec({{"cmd", {"python3", "-c", "print(1)"}}, {"timeout_ms", 58000}, {"cwd", "/tmp"}, {"stdin", "x"}});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->argv.size(), 3u);
  EXPECT_EQ(a->timeout_ms, 58000);
  EXPECT_EQ(*a->stdin_data, "x");
}

TEST(ParseExec, Errors) {
  EXPECT_FALSE(parse_exec(json::object()));
  EXPECT_FALSE(parse_exec({{"cmd", ""}}));
  EXPECT_FALSE(parse_exec({{"cmd", json::array()}}));
  EXPECT_FALSE(parse_exec({{"cmd", {1, 2}}}));
  EXPECT_FALSE(parse_exec({{"cmd", "x"}, {"timeout_ms", 0}}));
  EXPECT_FALSE(parse_exec({{"cmd", "x"}, {"cwd", "../etc"}}));
  EXPECT_FALSE(parse_exec({{"cmd", "x"}, {"shell", true}}));
}

TEST(ParseExec, User) {
  auto none = parse_exec({{"cmd", "id"}});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->user, "");  // root, as before the field
  EXPECT_EQ(parse_exec({{"cmd", "id"}, {"user", nullptr}})->user, "");
  for (const char* ok : {"alice", "a", "Alice_B.c-d", "_apt", "systemd-network", "u1", "1x",
                         "0", "1000", "1234:1234", "4294967294", "4294967294:4294967294",
                         "0001:0002", "abcdefghijklmnopqrstuvwxyz012345"}) {
    auto s = parse_exec({{"cmd", "id"}, {"user", ok}});
    ASSERT_TRUE(s) << ok << ": " << s.error().message;
    EXPECT_EQ(s->user, ok);
  }
  for (const char* no : {"", "-alice", "al ice", "al:ice", "alice:", ":1000", "1000:", "1:2:3", "alice$",
                         "al/ice", "al\nice", "élodie", "abcdefghijklmnopqrstuvwxyz0123456",
                         "4294967295", "1000:4294967295", "12345678901", "1000:abc"}) {
    auto s = parse_exec({{"cmd", "id"}, {"user", no}});
    ASSERT_FALSE(s) << no;
    EXPECT_EQ(s.error().code, ErrorCode::kInvalidRequest) << no;
    EXPECT_EQ(s.error().message.rfind("user: ", 0), 0u) << no << ": " << s.error().message;
  }
  for (const json& no : {json(1000), json(true), json::array({"alice"}), json::object()}) {
    auto s = parse_exec({{"cmd", "id"}, {"user", no}});
    ASSERT_FALSE(s) << no.dump();
    EXPECT_EQ(s.error().message.rfind("user: must be a string", 0), 0u) << s.error().message;
  }
}

TEST(ResolvePath, RelativeAndNormalised) {
  EXPECT_EQ(*resolve_path("a.txt"), "/workspace/a.txt");
  EXPECT_EQ(*resolve_path("/workspace//x/./y"), "/workspace/x/y");
  EXPECT_EQ(*resolve_path("/"), "/");
  EXPECT_FALSE(resolve_path(""));
  EXPECT_FALSE(resolve_path("/a/../b"));
  EXPECT_FALSE(resolve_path(std::string("/a\0b", 4)));
}

}  // namespace
}  // namespace b3os::sandbox
