// The template spec: what a build may ask, and the typed 400 naming the field for everything else.
#include "daemon/template/spec.h"

#include <gtest/gtest.h>

namespace b3os::tpl {
namespace {

using nlohmann::json;

Result<TemplateSpec> parse(const json& j) { return parse_template_spec(j, SpecLimits{}); }

std::string error_of(const json& j) {
  auto r = parse(j);
  EXPECT_FALSE(r) << j.dump();
  if (r) return "";
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidRequest);
  return r.error().message;
}

TEST(TemplateSpec, FullSpecParses) {
  auto r = parse(json::parse(R"({
    "name": "web", "from": "base", "packages": ["nodejs", "jq=1.6-2.1"],
    "files": [{"path": "/srv/a.txt", "content": "hi", "mode": 420, "owner": "app:app"},
              {"path": "/srv/b.bin", "content_base64": "AP8="}],
    "context": {"upload": "upl_abcdef12", "dest": "/app"},
    "run": ["echo one", "echo two"], "env": {"A": "1"}, "workdir": "/srv", "user": "app",
    "start": "python3 -m http.server 8000", "ready": {"port": 8000, "timeout_s": 30},
    "vcpu": 2, "memory_mib": 1024, "disk_gib": 2,
    "build": {"egress": {"mode": "allowlist", "allow": ["deb.debian.org"]}, "timeout_s": 600, "disk_gib": 4}})"));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->name, "web");
  EXPECT_EQ(r->packages.size(), 2u);
  ASSERT_EQ(r->files.size(), 2u);
  EXPECT_EQ(r->files[1].content, std::string("\0\xff", 2));
  EXPECT_EQ(r->files[0].mode, 0644);
  EXPECT_EQ(*r->context_upload, "upl_abcdef12");
  EXPECT_EQ(r->context_dest, "/app");
  EXPECT_EQ(*r->ready.port, 8000);
  EXPECT_EQ(r->build_egress.mode, "allowlist");
  EXPECT_TRUE(r->has_steps());
}

TEST(TemplateSpec, NameOnlyHasNoSteps) {
  auto r = parse({{"name", "plain"}, {"env", {{"X", "1"}}}, {"start", "sleep 1000"}});
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_steps());
  EXPECT_EQ(r->source.from, "base");
}

TEST(TemplateSpec, BadInputNamesTheField) {
  EXPECT_EQ(error_of({{"from", "base"}}).rfind("name:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "Web"}}).rfind("name:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "base"}}).rfind("name:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "tpl_x"}}).rfind("name:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"colour", 1}}).rfind("colour:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"packages", {"Bad Name"}}}).rfind("packages[0]:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"packages", {"ok", "x;rm -rf /"}}}).rfind("packages[1]:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"files", {{{"path", "rel"}, {"content", ""}}}}}).rfind("files[0].path:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"files", {{{"path", "/a/../b"}, {"content", ""}}}}}).rfind("files[0].path:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"files", {{{"path", "/a"}}}}}).rfind("files[0]:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"files", {{{"path", "/a"}, {"content_base64", "!!"}}}}}).rfind("files[0].content_base64:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"files", {{{"path", "/a"}, {"content", "x"}, {"mode", 99999}}}}}).rfind("files[0].mode:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"run", {1}}}).rfind("run[0]:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"ready", {{"port", 80}}}}).rfind("ready:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"start", "x"}, {"ready", {{"port", 80}, {"file", "/x"}}}}).rfind("ready:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"start", "x"}, {"ready", {{"port", 0}}}}).rfind("ready.port:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"user", "root"}}).rfind("user:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"workdir", "srv"}}).rfind("workdir:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"start", true}}).rfind("start:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"from", "base"}, {"image", {{"upload", "upl_abcdefgh"}}}}).rfind("image:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"image", {{"upload", "nope"}}}}).rfind("image.upload:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"image", {{"path", "x.tar"}}}}).rfind("image.path:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"build", {{"egress", {{"mode", "deny"}}}}}}).rfind("build.egress.mode:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"build", {{"timeout_s", 999999}}}}).rfind("build.timeout_s:", 0), 0u);
  EXPECT_EQ(error_of({{"name", "a"}, {"memory_mib", 1}}).rfind("memory_mib:", 0), 0u);
  EXPECT_EQ(error_of(json::array()).rfind("body:", 0), 0u);
}

TEST(TemplateSpec, InlineFilesAreBounded) {
  SpecLimits l;
  l.max_files_bytes = 10;
  auto r = parse_template_spec({{"name", "a"}, {"files", {{{"path", "/a"}, {"content", "0123456789A"}}}}}, l);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("files"), std::string::npos);
}

TEST(TemplateSpec, CanonicalLeavesOutTheNameOnly) {
  auto a = parse({{"name", "one"}, {"run", {"echo hi"}}});
  auto b = parse({{"name", "two"}, {"run", {"echo hi"}}});
  auto c = parse({{"name", "one"}, {"run", {"echo ho"}}});
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(canonical(*a).dump(), canonical(*b).dump());
  EXPECT_NE(canonical(*a).dump(), canonical(*c).dump());
}

TEST(TemplateSpec, PackageNames) {
  EXPECT_TRUE(valid_package("nodejs"));
  EXPECT_TRUE(valid_package("g++"));
  EXPECT_TRUE(valid_package("libc6=2.36-9+deb12u4"));
  EXPECT_FALSE(valid_package("-o"));
  EXPECT_FALSE(valid_package("a"));
  EXPECT_FALSE(valid_package("x y"));
  EXPECT_FALSE(valid_package("x=$(id)"));
}

}  // namespace
}  // namespace b3os::tpl
