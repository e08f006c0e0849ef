// Issue 42 point 3: two creates of 64 GiB, 8 vCPUs and 256 GiB of disk answered 201 on a node
// of 24 GiB. The registry admits by what sandboxes commit (their limits) against what the
// node admits, one sandbox against the host itself, and a project against its quota.
#include <gtest/gtest.h>

#include "daemon/sandbox/registry.h"

namespace b3os::sandbox {
namespace {

std::shared_ptr<LiveSandbox> admission_sandbox(const std::string& id, const std::string& project, Size size) {
  auto s = std::make_shared<LiveSandbox>();
  s->id = id;
  s->rec.id = id;
  s->rec.project_id = project;
  s->rec.memory_mib = static_cast<int>(size.memory_mib);
  s->rec.vcpu = static_cast<int>(size.vcpu);
  s->rec.disk_gib = static_cast<int>(size.disk_gib);
  return s;
}

Capacity admission_capacity() {
  Capacity c;
  c.node = Size{8192, 8, 100};
  c.max_memory_mib = 4096;
  c.per_project = Size{6144, 0, 0};
  c.disk_free_gib = [] { return int64_t{50}; };
  return c;
}

TEST(Admission, OneSandboxLargerThanTheHostIsRefusedWhateverElseRuns) {
  Registry r(64, 256);
  r.set_capacity(admission_capacity());
  auto big = r.reserve("p", 1, Size{65536, 1, 1});
  ASSERT_FALSE(big);
  EXPECT_EQ(big.error().code, ErrorCode::kCapacityUnavailable);
  EXPECT_NE(big.error().message.find("memory_mib 65536"), std::string::npos) << big.error().message;
  auto disk = r.reserve("p", 1, Size{512, 1, 256});
  ASSERT_FALSE(disk);
  EXPECT_EQ(disk.error().code, ErrorCode::kCapacityUnavailable);
  EXPECT_NE(disk.error().message.find("disk_gib 256"), std::string::npos) << disk.error().message;
  EXPECT_EQ(r.usage().committed.memory_mib, 0);  // nothing taken by a refusal
}

TEST(Admission, TheNodesSumsAndAProjectsQuotaAreKeptAcrossStartingAndLive) {
  Registry r(64, 256);
  r.set_capacity(admission_capacity());
  // A project's quota (6144 MiB) before the node's sum (8192).
  ASSERT_TRUE(r.reserve("a", 1, Size{4096, 1, 1}));
  auto quota = r.reserve("a", 1, Size{4096, 1, 1});
  ASSERT_FALSE(quota);
  EXPECT_EQ(quota.error().code, ErrorCode::kQuotaExceeded);
  // Another project fits the node's sum, then the node is full for anyone.
  ASSERT_TRUE(r.reserve("b", 1, Size{4096, 1, 1}));
  auto node = r.reserve("c", 1, Size{512, 1, 1});
  ASSERT_FALSE(node);
  EXPECT_EQ(node.error().code, ErrorCode::kCapacityUnavailable);
  EXPECT_NE(node.error().message.find("memory_mib: 8192 committed"), std::string::npos) << node.error().message;
  // A start that becomes live is counted once its reservation is given back.
  r.add(admission_sandbox("sbx_a", "a", Size{4096, 1, 1}));
  r.unreserve("a", 1, Size{4096, 1, 1});
  EXPECT_EQ(r.usage().committed.memory_mib, 8192);
  // What ends frees its share.
  ASSERT_TRUE(r.remove("sbx_a"));
  r.unreserve("b", 1, Size{4096, 1, 1});
  EXPECT_EQ(r.usage().committed.memory_mib, 0);
  EXPECT_TRUE(r.reserve("c", 1, Size{4096, 4, 50}));
  EXPECT_TRUE(r.reserve("g", 1, Size{4096, 4, 50}));
  auto full = r.reserve("d", 1, Size{128, 1, 1});
  ASSERT_FALSE(full);
  EXPECT_NE(full.error().message.find("memory_mib"), std::string::npos) << full.error().message;
  r.unreserve("c", 1, Size{4096, 4, 50});
  r.unreserve("g", 1, Size{4096, 4, 50});
  // vCPUs and disk are judged the same way.
  ASSERT_TRUE(r.reserve("e", 1, Size{128, 8, 1}));
  auto more_cpu = r.reserve("f", 1, Size{128, 1, 1});
  ASSERT_FALSE(more_cpu);
  EXPECT_NE(more_cpu.error().message.find("vcpu: 8 committed"), std::string::npos) << more_cpu.error().message;
}

TEST(Admission, PoolsRefillsCommitNothingAndNoCapacityMeansNoLimit) {
  Registry r(64, 256);
  ASSERT_TRUE(r.reserve("p", 1, Size{65536, 8, 256}));  // no capacity set: only the counts
  r.set_capacity(admission_capacity());
  EXPECT_TRUE(r.reserve("", 4));  // a pool's refill (project "", no size)
}

}  // namespace
}  // namespace b3os::sandbox
