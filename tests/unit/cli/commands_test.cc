#include "cli/commands.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/http_client.h"

namespace b3os::cli {
namespace {

TEST(BuildCreateBody, EmptyWhenNothingGiven) {
  auto body = build_create_body(CreateOptions{});
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json::object());
}

TEST(BuildCreateBody, AllFields) {
  CreateOptions o;
  o.template_name = "base";
  o.timeout_s = 60;
  o.vcpu = 2;
  o.memory_mib = 1024;
  o.env = {"A=1", "B=x=y"};
  o.secrets = {"TOKEN=s3cret"};
  o.metadata = {"team=infra"};
  auto body = build_create_body(o);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json::parse(R"({"template": "base", "timeout_s": 60, "vcpu": 2,
    "memory_mib": 1024, "env": {"A": "1", "B": "x=y"}, "secrets": {"TOKEN": "s3cret"},
    "metadata": {"team": "infra"}})"));
}

TEST(BuildCreateBody, BadPairNamesFlag) {
  CreateOptions o;
  o.secrets = {"NOVALUE"};
  auto body = build_create_body(o);
  ASSERT_FALSE(body);
  EXPECT_EQ(body.error().message.rfind("--secret: ", 0), 0u);
}

TEST(BuildCreateBody, SnapshotPortsEgress) {
  CreateOptions o;
  o.snapshot = "snp_1";
  o.disk_gib = 2;
  o.forkable = true;
  o.allow = {"pypi.org", "10.0.0.0/8"};
  o.ports = {"8000:public", "9000"};
  auto body = build_create_body(o);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json::parse(R"({"snapshot": "snp_1", "disk_gib": 2, "forkable": true,
    "egress": {"mode": "allowlist", "allow": ["pypi.org", "10.0.0.0/8"]},
    "ports": [{"port": 8000, "public": true}, {"port": 9000, "public": false}]})"));
}

TEST(BuildCreateBody, RefusesWhatDoesNotGoTogether) {
  CreateOptions a;
  a.snapshot = "snp_1";
  a.template_name = "base";
  EXPECT_FALSE(build_create_body(a));
  CreateOptions b;
  b.egress = "public";
  b.allow = {"pypi.org"};
  EXPECT_FALSE(build_create_body(b));
  for (const char* bad : {"0", "65536", "80:open", "x", ":public", "80x"}) {
    CreateOptions c;
    c.ports = {bad};
    auto body = build_create_body(c);
    ASSERT_FALSE(body) << bad;
    EXPECT_NE(body.error().message.find("--port"), std::string::npos) << bad;
  }
}

TEST(CompletionScript, ListsEveryCommandAndOption) {
  CLI::App app{"t"};
  GlobalOptions g;
  Action action;
  add_sandbox_commands(app, g, action);
  add_process_commands(app, g, action);
  add_more_sandbox_commands(app, g, action);
  add_completion_command(app, action);
  auto bash = completion_script(app, "bash");
  ASSERT_TRUE(bash);
  for (const char* want : {"[\".\"]=\"", " exec ", " shell ", " watch ", " egress ", "[\"egress\"]=\"get set",
                           "[\"egress set\"]=\"--help -h --mode --allow --json", "[\"watch\"]=",
                           "--recursive -r", "complete -F _b3os b3os"})
    EXPECT_NE(bash->find(want), std::string::npos) << want << "\n" << *bash;
  auto zsh = completion_script(app, "zsh");
  ASSERT_TRUE(zsh);
  EXPECT_NE(zsh->find("bashcompinit"), std::string::npos);
  EXPECT_FALSE(completion_script(app, "fish"));
}

TEST(BuildListPath, Plain) {
  auto p = build_list_path(ListOptions{}, std::nullopt);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, "/v1/sandboxes");
}

TEST(BuildListPath, FiltersLimitAndCursor) {
  ListOptions o;
  o.status = "running";
  o.metadata = {"team=a b"};
  o.limit = 5;
  auto p = build_list_path(o, std::string("sbx_9"));
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, "/v1/sandboxes?status=running&metadata[team]=a%20b&limit=5&cursor=sbx_9");
}

TEST(BuildListPath, AllUsesLargestPage) {
  ListOptions o;
  o.all = true;
  auto p = build_list_path(o, std::nullopt);
  ASSERT_TRUE(p);
  EXPECT_EQ(*p, "/v1/sandboxes?limit=100");
  o.metadata = {"broken"};
  EXPECT_FALSE(build_list_path(o, std::nullopt));
}

TEST(BuildExecBody, SingleArgumentIsShellString) {
  ExecOptions o;
  o.cmd = {"echo hi | wc -c"};
  auto body = build_exec_body(o, std::nullopt);
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json({{"cmd", "echo hi | wc -c"}}));
}

TEST(BuildExecBody, SeveralArgumentsAreArgvWithOptions) {
  ExecOptions o;
  o.cmd = {"python3", "-c", "print(1)"};
  o.env = {"X=1"};
  o.cwd = "/tmp";
  o.timeout_ms = 5000;
  o.user = "alice";
  auto body = build_exec_body(o, std::string("input\n"));
  ASSERT_TRUE(body);
  EXPECT_EQ(*body, Json::parse(R"j({"cmd": ["python3", "-c", "print(1)"], "env": {"X": "1"},
    "cwd": "/tmp", "user": "alice", "timeout_ms": 5000, "stdin": "input\n"})j"));
}

TEST(BuildExecBody, NeedsACommand) { EXPECT_FALSE(build_exec_body(ExecOptions{}, std::nullopt)); }

TEST(ExecExitStatus, Cases) {
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", 0}})), 0);
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", 3}})), 3);
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", 137}, {"timed_out", true}})), 124);
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", -9}})), 137);
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", 1000}})), 255);
  EXPECT_EQ(exec_exit_status(Json({{"exit_code", nullptr}})), 1);
  EXPECT_EQ(exec_exit_status(Json::object()), 1);
}

TEST(RenderSandboxTable, Columns) {
  auto data = Json::parse(R"([
    {"id": "sbx_a", "status": "running", "template": {"id": "tpl_base", "name": "base"},
     "created_at": 1714564800000, "expires_at": null},
    {"id": "sbx_bb", "status": "stopped"}
  ])");
  EXPECT_EQ(render_sandbox_table(data),
            "ID      STATUS   TEMPLATE  CREATED               EXPIRES\n"
            "sbx_a   running  base      2024-05-01T12:00:00Z  -\n"
            "sbx_bb  stopped  -         -                     -\n");
}

TEST(RenderSandboxDetails, LeadFieldsFirstSkipsObjectAndTiming) {
  auto doc = Json::parse(R"({"env": {"A": "1"}, "id": "sbx_a", "object": "sandbox",
    "status": "running", "timing": {"total_ms": 3}})");
  EXPECT_EQ(render_sandbox_details(doc), "id:     sbx_a\nstatus: running\nenv.A:  1\n");
}

TEST(RenderFileTable, Columns) {
  auto data = Json::parse(R"([{"name": "a.txt", "path": "/workspace/a.txt", "type": "file",
    "size": 12, "mode": 420, "modified_at": 1714564800}])");
  EXPECT_EQ(render_file_table(data),
            "NAME   TYPE  SIZE  MODE  MODIFIED\n"
            "a.txt  file  12    0644  2024-05-01T12:00:00Z\n");
}

TEST(ApiError, ApiShape) {
  HttpResponse r{404, "application/json",
                 R"({"error": {"code": "sandbox_not_found", "message": "no sandbox sbx_x"}})"};
  Error e = api_error(r);
  EXPECT_EQ(e.code, ErrorCode::kSandboxNotFound);
  EXPECT_EQ(e.message, "sandbox_not_found: no sandbox sbx_x");
  EXPECT_FALSE(json_reply(r));
}

TEST(ApiError, OtherBodies) {
  Error e = api_error(HttpResponse{502, "text/html", "Bad Gateway\n"});
  EXPECT_EQ(e.message, "http_502: unexpected reply \"Bad Gateway\"");
  Error empty = api_error(HttpResponse{500, "", ""});
  EXPECT_EQ(empty.message, "http_500: unexpected reply");
  EXPECT_EQ(error_code_from_name("rate_limited"), ErrorCode::kRateLimited);
  EXPECT_EQ(error_code_from_name("nope"), ErrorCode::kInternal);
}

TEST(JsonReply, ParsesSuccessKeepingOrder) {
  auto doc = json_reply(HttpResponse{200, "application/json", R"({"z": 1, "a": 2})"});
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->dump(), R"({"z":1,"a":2})");
  EXPECT_FALSE(json_reply(HttpResponse{200, "text/plain", "not json"}));
  auto empty = json_reply(HttpResponse{200, "", ""});
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->is_object());
}

TEST(DumpJson, RejectsInvalidUtf8) {
  EXPECT_EQ(*dump_json(Json({{"stdin", "ok"}})), R"({"stdin":"ok"})");
  EXPECT_FALSE(dump_json(Json({{"stdin", "\xff\xfe"}})));
}

}  // namespace
}  // namespace b3os::cli
