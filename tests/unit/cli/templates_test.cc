#include "cli/templates.h"

#include <gtest/gtest.h>

namespace b3os::cli {
namespace {

TemplateBuildOptions with_spec(std::string file) {
  TemplateBuildOptions o;
  o.spec_file = std::move(file);
  return o;
}

TEST(CheckBuildOptions, NeedsASpecOrAnImage) {
  auto none = check_build_options(TemplateBuildOptions{});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("--from-image"), std::string::npos) << none.error().message;
  EXPECT_TRUE(check_build_options(with_spec("web.json")));
  TemplateBuildOptions image;
  image.from_image = "app.tar";
  image.name = "app";
  EXPECT_TRUE(check_build_options(image));
  TemplateBuildOptions flag;
  flag.spec_flag = "web.json";
  EXPECT_TRUE(check_build_options(flag));
  EXPECT_EQ(spec_file_of(flag), "web.json");
}

TEST(CheckBuildOptions, RejectsTwoSpecsStartWithoutImageAndStdinUploads) {
  auto two = with_spec("a.json");
  two.spec_flag = "b.json";
  EXPECT_FALSE(check_build_options(two));
  two.spec_flag = "a.json";  // the same file twice is one spec
  EXPECT_TRUE(check_build_options(two));

  auto start = with_spec("web.json");
  start.start = true;
  auto r = check_build_options(start);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("--start"), std::string::npos);

  auto ctx = with_spec("web.json");
  ctx.context = "-";
  EXPECT_FALSE(check_build_options(ctx));
}

TEST(ParseSpecText, ObjectKeepsOrderOthersFail) {
  auto spec = parse_spec_text(R"({"name": "web", "run": ["true"], "from": "base"})", "web.json");
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->dump(), R"({"name":"web","run":["true"],"from":"base"})");
  auto broken = parse_spec_text(R"({"name": )", "web.json");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().message.rfind("web.json: not JSON", 0), 0u) << broken.error().message;
  auto array = parse_spec_text("[1]", "web.json");
  ASSERT_FALSE(array);
  EXPECT_NE(array.error().message.find("JSON object"), std::string::npos);
}

TEST(BuildTemplateSpec, FileAsItIs) {
  auto spec = build_template_spec(Json::parse(R"({"name": "web", "start": "python3 -m http.server"})"),
                                  with_spec("web.json"), {});
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->dump(), R"({"name":"web","start":"python3 -m http.server"})");
}

TEST(BuildTemplateSpec, FromImageWithNameAndStart) {
  TemplateBuildOptions o;
  o.from_image = "app.tar";
  o.name = "app";
  o.start = true;
  auto spec = build_template_spec(Json::object(), o, {.image = "upl_1", .context = std::nullopt});
  ASSERT_TRUE(spec);
  EXPECT_EQ(*spec, Json::parse(R"({"name": "app", "image": {"upload": "upl_1"}, "start": true})"));
}

TEST(BuildTemplateSpec, FlagsOverTheSpecFileAndContextKeepsDest) {
  TemplateBuildOptions o;
  o.spec_flag = "extra.json";
  o.from_image = "app.tar";
  o.name = "app2";
  o.context = "src";
  auto spec = build_template_spec(
      Json::parse(R"({"name": "app", "run": ["make"], "context": {"dest": "/src", "upload": "upl_old"}})"), o,
      {.image = "upl_img", .context = "upl_ctx"});
  ASSERT_TRUE(spec);
  EXPECT_EQ(*spec, Json::parse(R"({"name": "app2", "run": ["make"],
    "context": {"dest": "/src", "upload": "upl_ctx"}, "image": {"upload": "upl_img"}})"));
}

TEST(BuildTemplateSpec, Refusals) {
  TemplateBuildOptions image;
  image.from_image = "app.tar";
  auto no_name = build_template_spec(Json::object(), image, {.image = "upl_1", .context = std::nullopt});
  ASSERT_FALSE(no_name);
  EXPECT_NE(no_name.error().message.find("--name"), std::string::npos);

  image.name = "app";
  auto both = build_template_spec(Json::parse(R"({"from": "base"})"), image, {.image = "upl_1", .context = std::nullopt});
  ASSERT_FALSE(both);
  EXPECT_NE(both.error().message.find("\"from\""), std::string::npos);

  auto bad_ctx = build_template_spec(Json::parse(R"({"name": "x", "context": "dir"})"), with_spec("x.json"),
                                     {.image = std::nullopt, .context = "upl_2"});
  EXPECT_FALSE(bad_ctx);
  EXPECT_FALSE(build_template_spec(Json::parse(R"({"name": 7})"), with_spec("x.json"), {}));
}

TEST(TemplatePaths, EncodedWithQueries) {
  EXPECT_EQ(template_path("web"), "/v1/templates/web");
  EXPECT_EQ(template_path("a/b", "/builds"), "/v1/templates/a%2Fb/builds");
  EXPECT_EQ(build_logs_path("web", "bld_1", false), "/v1/templates/web/builds/bld_1/logs");
  EXPECT_EQ(build_logs_path("web", "bld_1", true), "/v1/templates/web/builds/bld_1/logs?follow=true");
  EXPECT_EQ(template_delete_path("tpl_1", false), "/v1/templates/tpl_1");
  EXPECT_EQ(template_delete_path("web", true), "/v1/templates/web?force=true");
}

TEST(BuildExitStatus, ReadyOnly) {
  EXPECT_EQ(build_exit_status(Json({{"status", "ready"}})), 0);
  EXPECT_EQ(build_exit_status(Json({{"status", "failed"}})), 1);
  EXPECT_EQ(build_exit_status(Json({{"status", "building"}})), 1);
  EXPECT_EQ(build_exit_status(Json()), 1);
}

TEST(FormatSize, Units) {
  EXPECT_EQ(format_size(Json(0)), "0 B");
  EXPECT_EQ(format_size(Json(1023)), "1023 B");
  EXPECT_EQ(format_size(Json(9728)), "9.5 KiB");
  EXPECT_EQ(format_size(Json(158087614)), "151 MiB");
  EXPECT_EQ(format_size(Json(3ll << 30)), "3.0 GiB");
  EXPECT_EQ(format_size(Json()), "-");
}

TEST(RenderTemplateTable, BuiltInAndBuiltColumns) {
  auto data = Json::parse(R"([
    {"id": "tpl_base", "object": "template", "name": "base", "status": "ready", "description": "Debian",
     "checkpoint": {"status": "off"}},
    {"id": "tpl_1", "name": "web", "status": "ready", "version": 2, "size_bytes": 158087614,
     "checkpoint": {"status": "ready", "memory_mib": 512},
     "build": {"id": "bld_3", "version": 3, "status": "building"}},
    {"id": "tpl_2", "name": "bad", "status": "failed", "version": null, "size_bytes": 0,
     "checkpoint": {"status": "none"}, "build": {"id": "bld_4", "version": 1, "status": "failed"}}
  ])");
  EXPECT_EQ(render_template_table(data),
            "NAME  ID        STATUS               VERSION  CHECKPOINT      SIZE\n"
            "base  tpl_base  ready                -        off             -\n"
            "web   tpl_1     ready (v3 building)  2        ready, 512 MiB  151 MiB\n"
            "bad   tpl_2     failed               -        none            0 B\n");
}

TEST(RenderTemplateDetails, SummarizesBuildAndDropsEmptyDefaults) {
  auto tpl = Json::parse(R"({"build": {"id": "bld_2", "version": 1, "status": "failed", "steps": [],
      "error": {"step": "run[1]", "exit_code": 3, "message": "run[1] exited with 3: "}},
    "checkpoint": {"status": "none"}, "created_at": "2026-12-03T11:42:49.279Z",
    "defaults": {"env": {}, "start": null, "workdir": "/srv"}, "id": "tpl_1", "name": "bad",
    "object": "template", "public": false, "ready_build_id": null, "size_bytes": 0,
    "source": {"kind": "base"}, "status": "failed", "timing": {"total_ms": 0.3}, "version": null})");
  EXPECT_EQ(render_template_details(tpl),
            "id:               tpl_1\n"
            "name:             bad\n"
            "status:           failed\n"
            "version:          -\n"
            "public:           false\n"
            "ready_build_id:   -\n"
            "build:            bld_2 (version 1, failed)\n"
            "build.error:      run[1] exited with 3: \n"
            "source.kind:      base\n"
            "size:             0 B\n"
            "checkpoint:       none\n"
            "defaults.workdir: /srv\n"
            "created_at:       2026-12-03T11:42:49.279Z\n");
}

TEST(RenderBuildTable, NotesReuseAndFailure) {
  auto data = Json::parse(R"([
    {"id": "bld_3", "version": 3, "status": "failed", "created_at": "2026-12-03T11:42:49Z",
     "finished_at": "2026-12-03T11:42:50Z", "error": {"step": "packages", "exit_code": 100}},
    {"id": "bld_2", "version": 2, "status": "ready", "created_at": "2026-12-03T11:40:00Z",
     "finished_at": "2026-12-03T11:40:00Z", "error": null, "reused_from": "bld_1"},
    {"id": "bld_1", "version": 1, "status": "building", "created_at": "2026-12-03T11:30:00Z",
     "finished_at": null, "error": null, "reused_from": null}
  ])");
  EXPECT_EQ(render_build_table(data),
            "VERSION  ID     STATUS    CREATED               FINISHED              NOTE\n"
            "3        bld_3  failed    2026-12-03T11:42:49Z  2026-12-03T11:42:50Z  packages failed (exit 100)\n"
            "2        bld_2  ready     2026-12-03T11:40:00Z  2026-12-03T11:40:00Z  reused bld_1\n"
            "1        bld_1  building  2026-12-03T11:30:00Z  -                     -\n");
}

TEST(RenderBuildStarted, IdsNameVersion) {
  auto reply = Json::parse(R"({"id": "tpl_1", "name": "web", "version": null,
    "build": {"id": "bld_9", "version": 4, "status": "queued", "reused_from": null}})");
  EXPECT_EQ(render_build_started(reply),
            "template: tpl_1\n"
            "name:     web\n"
            "version:  4\n"
            "build:    bld_9 (queued)\n");
  reply["build"]["status"] = "ready";
  reply["build"]["reused_from"] = "bld_2";
  EXPECT_NE(render_build_started(reply).find("bld_9 (ready, reused from bld_2)"), std::string::npos);
}

TEST(RenderBuildFailure, StepExitCodeAndTailOnce) {
  // The API's message of a failed step carries its output: the tail is printed once.
  auto build = Json::parse(R"({"id": "bld_2", "status": "failed", "error": {"code": "invalid_request",
    "step": "run[0]", "exit_code": 4, "message": "run[0] exited with 4: one\ntwo\n", "output_tail": "one\ntwo\n"}})");
  EXPECT_EQ(render_build_failure(build),
            "build bld_2 failed at step run[0] (exit code 4)\n"
            "output tail:\n"
            "one\n"
            "two\n");
  build["error"]["message"] = "ready: port 8000 never listened";
  build["error"]["output_tail"] = "Traceback";
  EXPECT_EQ(render_build_failure(build),
            "build bld_2 failed at step run[0] (exit code 4): ready: port 8000 never listened\n"
            "output tail:\n"
            "Traceback\n");
  build["error"]["output_tail"] = "";
  build["error"].erase("exit_code");
  EXPECT_EQ(render_build_failure(build), "build bld_2 failed at step run[0]: ready: port 8000 never listened\n");
  EXPECT_EQ(render_build_failure(Json({{"id", "bld_3"}, {"status", "failed"}})), "build bld_3 failed\n");
  // A failure of b3osd's own (no step, no exit code): the message alone.
  auto own = Json::parse(R"({"id": "bld_4", "status": "failed", "error": {"code": "internal", "step": null,
    "exit_code": null, "message": "runsc create failed", "output_tail": null}})");
  EXPECT_EQ(render_build_failure(own), "build bld_4 failed: runsc create failed\n");
}

}  // namespace
}  // namespace b3os::cli
