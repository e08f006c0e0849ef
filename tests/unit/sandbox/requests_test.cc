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

}  // namespace
}  // namespace b3os::sandbox
