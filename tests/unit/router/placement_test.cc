// The cluster's one placement policy (router::pick_node), which routers, a node relaying an
// MCP create and a draining node's moves all use.
#include <gtest/gtest.h>

#include <set>

#include "daemon/router/router.h"

namespace b3os::router {
namespace {

store::NodeRecord node(std::string id, int64_t sandboxes, std::string state = "ready") {
  store::NodeRecord n;
  n.id = std::move(id);
  n.state = std::move(state);
  n.sandboxes = sandboxes;
  n.max_sandboxes = 10;
  n.memory_mib = 8192;
  n.used_memory_mib = sandboxes * 512;
  return n;
}

std::string picked(const std::vector<store::NodeRecord>& all, const PlaceRequest& req) {
  const store::NodeRecord* n = pick_node(all, req);
  return n ? n->id : "";
}

TEST(Placement, TheFewestSandboxesAmongReadyNodes) {
  PlaceRequest create;
  create.memory_mib = 512;
  EXPECT_EQ(picked({node("a", 3), node("b", 1), node("c", 2)}, create), "b");
  EXPECT_EQ(picked({node("a", 3), node("b", 1, "draining"), node("c", 2, "down")}, create), "a");
  create.skip = {"a"};
  EXPECT_EQ(picked({node("a", 0), node("b", 5)}, create), "b");
  EXPECT_EQ(picked({}, create), "");
}

TEST(Placement, ACreateNeedsRoomAndOtherRequestsMayGoToADrainingNode) {
  PlaceRequest create;
  create.memory_mib = 512;
  EXPECT_EQ(picked({node("a", 10), node("b", 7)}, create), "b");  // a is at its max_sandboxes
  auto b = node("b", 2);
  b.used_memory_mib = 7800;  // 512 more would pass its memory
  EXPECT_EQ(picked({node("a", 9), b}, create), "a");
  EXPECT_EQ(picked({node("a", 10), b}, create), "");
  PlaceRequest other;
  other.draining_ok = true;
  EXPECT_EQ(picked({node("a", 10), node("b", 1, "draining")}, other), "b");
  EXPECT_EQ(picked({node("a", 0, "down")}, other), "");
}

TEST(Placement, AWarmTemplateFirstThenPendingCountsAsLoad) {
  PlaceRequest create;
  create.memory_mib = 512;
  create.tpl = "py";
  auto c = node("c", 6);
  c.warm = {"py"};
  EXPECT_EQ(picked({node("a", 1), node("b", 2), c}, create), "c");
  create.tpl = "other";
  create.pending = [](const std::string& id) -> int64_t { return id == "a" ? 5 : 0; };
  EXPECT_EQ(picked({node("a", 1), node("b", 2), c}, create), "b");
  // A pending count that fills a node leaves it out of creates.
  create.pending = [](const std::string& id) -> int64_t { return id == "b" ? 8 : 0; };
  EXPECT_EQ(picked({node("b", 2)}, create), "");
}

TEST(Placement, TiesGoRound) {
  PlaceRequest create;
  create.memory_mib = 512;
  std::set<std::string> seen;
  for (size_t turn = 0; turn < 3; ++turn) {
    create.turn = turn;
    seen.insert(picked({node("a", 1), node("b", 1), node("c", 1)}, create));
  }
  EXPECT_EQ(seen.size(), 3u);
}

}  // namespace
}  // namespace b3os::router
