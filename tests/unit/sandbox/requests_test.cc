// The command layer's parsers: the same structs whether the arguments came from a REST body,
// a query string or (next) an MCP tool.
#include "daemon/sandbox/requests.h"

#include <gtest/gtest.h>

namespace b3os::sandbox {
namespace {

using nlohmann::json;

TEST(ForkRequest, CountAndMetadataOrAClearError) {
  auto d = parse_fork(json::object());
  ASSERT_TRUE(d);
  EXPECT_EQ(d->count, 1);
  EXPECT_FALSE(d->metadata);
  auto r = parse_fork({{"count", 3}, {"metadata", {{"run", "a"}}}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->count, 3);
  EXPECT_EQ(r->metadata->at("run"), "a");
  for (const json& bad : {json{{"count", 0}}, json{{"count", 17}}, json{{"count", "2"}}, json{{"count", 1.5}},
                          json{{"counts", 2}}, json::array(), json{{"metadata", {{"k", 1}}}}}) {
    auto e = parse_fork(bad);
    ASSERT_FALSE(e) << bad.dump();
    EXPECT_EQ(e.error().code, ErrorCode::kInvalidRequest);
  }
  EXPECT_NE(parse_fork({{"count", 99}}).error().message.find("count"), std::string::npos);
}

TEST(ListSandboxes, FiltersCursorAndLimit) {
  auto q = parse_list_sandboxes({{"limit", "5"}, {"status", "paused"}, {"metadata[team]", "a"}});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->limit, 5);
  EXPECT_EQ(q->status, "paused");
  ASSERT_EQ(q->metadata.size(), 1u);
  EXPECT_EQ(q->metadata[0], std::make_pair(std::string("team"), std::string("a")));
  EXPECT_EQ(parse_list_sandboxes({})->limit, 20);
  for (const Params& bad : {Params{{"limit", "0"}}, Params{{"limit", "101"}}, Params{{"limit", "5x"}},
                            Params{{"status", "gone"}}, Params{{"cursor", "snp_nope"}}, Params{{"colour", "red"}}}) {
    auto e = parse_list_sandboxes(bad);
    ASSERT_FALSE(e) << bad[0].first;
    EXPECT_EQ(e.error().code, ErrorCode::kInvalidRequest);
    EXPECT_NE(e.error().message.find(bad[0].first.substr(0, 5)), std::string::npos) << e.error().message;
  }
}

TEST(ListSnapshots, CursorMustBeASnapshotId) {
  EXPECT_EQ(parse_list_snapshots({{"limit", "7"}})->limit, 7);
  EXPECT_FALSE(parse_list_snapshots({{"cursor", "sbx_01m5t68q1b590rj801nbzsqzkk"}}));
  EXPECT_EQ(parse_list_snapshots({{"cursor", "snp_01m5t68q1b590rj801nbzsqzkk"}})->cursor,
            "snp_01m5t68q1b590rj801nbzsqzkk");
}

TEST(FileRequest, PathResolvedRecursiveOnlyWhereItMeansSomething) {
  auto r = parse_file_request({{"path", "data/x.csv"}}, false);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->path, "/workspace/data/x.csv");
  EXPECT_FALSE(parse_file_request({}, false));
  EXPECT_FALSE(parse_file_request({{"path", "/a/../b"}}, false));
  EXPECT_TRUE(parse_file_request({{"path", "/tmp"}, {"recursive", "true"}}, true)->recursive);
  EXPECT_FALSE(parse_file_request({{"path", "/tmp"}, {"recursive", "yes"}}, true));
}

TEST(ProcessRequests, StartSignalStdinWaitOutput) {
  auto ps = parse_process(json{{"cmd", "sleep 1"}, {"stdin", true}, {"tag", "srv"}, {"output_bytes", 8192}}, 1 << 20);
  ASSERT_TRUE(ps);
  EXPECT_EQ(ps->cmd.argv, (std::vector<std::string>{"/bin/sh", "-c", "sleep 1"}));
  EXPECT_TRUE(ps->stdin_open);
  EXPECT_EQ(ps->tag, "srv");
  EXPECT_EQ(ps->output_bytes, 8192u);
  EXPECT_EQ(parse_process(json{{"cmd", "x"}}, 4096)->output_bytes, 4096u);
  EXPECT_FALSE(parse_process(json{{"cmd", "x"}, {"timeout_ms", 5}}, 4096));
  EXPECT_FALSE(parse_process(json{{"cmd", "x"}, {"output_bytes", 100}}, 4096));
  EXPECT_FALSE(parse_process(json{{"cmd", "x"}, {"stdin", "text"}}, 4096));
  EXPECT_FALSE(parse_process(json{{"cmd", "x"}, {"tag", "a\nb"}}, 4096));
  EXPECT_FALSE(parse_process(json{{"env", json::object()}}, 4096));

  EXPECT_EQ(parse_signal(json::object())->signal, 15);
  EXPECT_EQ(parse_signal(json{{"signal", "int"}})->signal, 2);
  EXPECT_EQ(parse_signal(json{{"signal", "SIGKILL"}})->signal, 9);
  EXPECT_EQ(parse_signal(json{{"signal", 10}, {"group", false}})->group, false);
  EXPECT_FALSE(parse_signal(json{{"signal", 0}}));
  EXPECT_FALSE(parse_signal(json{{"signal", 65}}));
  EXPECT_FALSE(parse_signal(json{{"signal", "NOPE"}}));
  EXPECT_FALSE(parse_signal(json{{"signal", 1.5}}));

  EXPECT_EQ(parse_stdin(json{{"data", "aGk="}, {"encoding", "base64"}})->data, "hi");
  EXPECT_TRUE(parse_stdin(json{{"eof", true}})->eof);
  EXPECT_FALSE(parse_stdin(json::object()));
  EXPECT_FALSE(parse_stdin(json{{"data", "!!"}, {"encoding", "base64"}}));
  EXPECT_FALSE(parse_stdin(json{{"data", "x"}, {"encoding", "hex"}}));

  EXPECT_EQ(*parse_wait(json::object()), 30000);
  EXPECT_EQ(*parse_wait(json{{"timeout_ms", 5}}), 5);
  EXPECT_FALSE(parse_wait(json{{"timeout_ms", 0}}));

  auto o = parse_output_request({{"since", "12"}, {"follow", "true"}}, "");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->since, 12u);
  EXPECT_TRUE(o->follow);
  EXPECT_EQ(parse_output_request({}, "40")->since, 40u);            // Last-Event-ID
  EXPECT_EQ(parse_output_request({{"since", "3"}}, "40")->since, 3u);  // since wins
  EXPECT_FALSE(parse_output_request({{"since", "-1"}}, ""));
  EXPECT_FALSE(parse_output_request({{"follow", "yes"}}, ""));
  EXPECT_FALSE(parse_output_request({{"limit", "3"}}, ""));

  EXPECT_TRUE(valid_process_key("proc_12"));
  EXPECT_TRUE(valid_process_key("412"));
  EXPECT_FALSE(valid_process_key("proc_"));
  EXPECT_FALSE(valid_process_key("proc_1x"));
  EXPECT_FALSE(valid_process_key("../x"));
}

}  // namespace
}  // namespace b3os::sandbox
