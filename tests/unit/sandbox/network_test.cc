// Networked sandboxes (egress public and allowlist) against the fakes, the network's among
// them: a namespace per sandbox made before its container and gone after it, its policy
// applied before anyone can reach it, carried to forks and restored after a restart, changed
// live (stored, then applied, reverted when the firewall refuses), and every failure leaving
// nothing behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/fakes/fake_network.h"
#include "tests/unit/sandbox/service_fixture.h"

namespace b3os::sandbox {
namespace {

namespace fs = std::filesystem;

class NetworkTest : public FakeServiceTest {
 protected:
  void SetUp() override {
    FakeServiceTest::SetUp();
    network_ = &net_;
    cfg_.net_warm_pool_size = 0;  // no pool members: what is on the fake host is the test's
    cfg_.net_fork_pool_size = 0;
  }
  static SandboxSpec spec(const std::string& mode, std::vector<std::string> allow = {}, bool forkable = false) {
    SandboxSpec s;
    s.egress.mode = mode;
    s.egress.allow = std::move(allow);
    s.forkable = forkable;
    return s;
  }
  /// Namespaces, containers and records: only those of `keep`.
  void expect_only(const std::set<std::string>& keep) {
    svc_->settle();
    std::set<std::string> ns;
    for (auto& [id, n] : net_.namespaces()) ns.insert(id);
    EXPECT_EQ(ns, keep) << "namespaces";
    EXPECT_EQ(rt_.ids(), keep) << "containers";
  }
  UpdateRequest to(const std::string& mode, std::vector<std::string> allow = {}) {
    UpdateRequest u;
    u.egress = EgressSpec{mode, std::move(allow)};
    return u;
  }
  fakes::FakeNetwork net_;
};

TEST_F(NetworkTest, PublicAndAllowlistGetANamespaceAndTheirPolicyDenyGetsNone) {
  start();
  const std::string d = create(spec("deny"));
  const std::string p = create(spec("public"));
  const std::string a = create(spec("allowlist", {"a.b3t.test", "203.0.113.0/24:5432"}));
  EXPECT_FALSE(net_.of(d));
  auto pn = net_.of(p), an = net_.of(a);
  ASSERT_TRUE(pn && an);
  EXPECT_TRUE(pn->active && an->active);
  ASSERT_TRUE(pn->policy && an->policy);
  EXPECT_EQ(pn->policy->mode, "public");
  EXPECT_EQ(an->policy->mode, "allowlist");
  EXPECT_EQ(an->policy->allow, (std::vector<std::string>{"a.b3t.test", "203.0.113.0/24:5432"}));
  Timing t;
  for (auto& id : {d, p, a}) ASSERT_TRUE(svc_->remove(p_, id, t));
  expect_only({});
}

TEST_F(NetworkTest, ANetworkedCreateThatFailsAtAnyStepLeavesNothing) {
  start();
  for (const char* verb : {"prepare", "activate", "apply"}) {
    net_.fail(verb);
    Timing t;
    auto r = svc_->create(p_, spec("public"), t);
    ASSERT_FALSE(r) << verb;
    EXPECT_NE(r.error().message.find(verb), std::string::npos) << r.error().message;
    expect_only({});
    EXPECT_EQ(store_.sandboxes().size(), 0u) << verb;
  }
  for (const char* verb : {"create", "start"}) {
    rt_.fail(verb);
    Timing t;
    ASSERT_FALSE(svc_->create(p_, spec("allowlist", {"a.b3t.test"}), t)) << verb;
    expect_only({});
  }
}

TEST_F(NetworkTest, WithoutNetworksANetworkedCreateIs503AndLeavesNothing) {
  network_ = nullptr;
  start();
  Timing t;
  auto r = svc_->create(p_, spec("public"), t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kProductUnavailable);
  EXPECT_NE(r.error().message.find("--network off"), std::string::npos) << r.error().message;
  EXPECT_TRUE(rt_.ids().empty());
  EXPECT_EQ(store_.sandboxes().size(), 0u);
  EXPECT_NE(create(spec("deny")), "");  // deny works as before
}

TEST_F(NetworkTest, ForksGetANamespaceOfTheirOwnWithTheSourcesPolicy) {
  start();
  const std::string src = create(spec("allowlist", {"a.b3t.test"}, true));
  Timing t;
  auto f = svc_->fork(p_, src, 3, std::nullopt, t);
  ASSERT_TRUE(f) << f.error().message;
  std::set<std::string> all = {src};
  for (auto& fork : (*f)["data"]) {
    const std::string id = fork["id"];
    all.insert(id);
    auto n = net_.of(id);
    ASSERT_TRUE(n && n->policy) << id;
    EXPECT_TRUE(n->active);
    EXPECT_EQ(n->policy->allow, std::vector<std::string>{"a.b3t.test"});
    EXPECT_NE(n->slot.index, net_.of(src)->slot.index);
  }
  expect_only(all);
  // A fork whose policy cannot be applied: all or none.
  net_.fail("apply");
  auto bad = svc_->fork(p_, src, 2, std::nullopt, t);
  ASSERT_FALSE(bad);
  expect_only(all);
}

TEST_F(NetworkTest, ALiveChangeIsStoredThenAppliedAndRevertedWhenTheFirewallRefuses) {
  start();
  const std::string id = create(spec("public"));
  Timing t;
  auto r = svc_->update(p_, id, to("allowlist", {"b.b3t.test"}), t);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["egress"]["mode"], "allowlist");
  EXPECT_EQ(net_.of(id)->policy->allow, std::vector<std::string>{"b.b3t.test"});
  EXPECT_EQ(store_.sandboxes().at(id).egress_allow, std::vector<std::string>{"b.b3t.test"});
  // The firewall refuses the next one: the old policy is in force, and the record says so.
  net_.fail("apply");
  ASSERT_FALSE(svc_->update(p_, id, to("public"), t));
  EXPECT_EQ(store_.sandboxes().at(id).egress_mode, "allowlist");
  EXPECT_EQ((*svc_->get(p_, id))["egress"]["allow"], nlohmann::json::array({"b.b3t.test"}));
  // A store that refuses the write: nothing is applied.
  const int applies = net_.of(id)->applies;
  store_.fail_writes(1);
  ASSERT_FALSE(svc_->update(p_, id, to("public"), t));
  EXPECT_EQ(net_.of(id)->applies, applies);
  EXPECT_EQ((*svc_->get(p_, id))["egress"]["mode"], "allowlist");
}

TEST_F(NetworkTest, ALiveChangeOfADenySandboxOrAStoppedOneIsRefused) {
  start();
  const std::string d = create(spec("deny"));
  Timing t;
  auto r = svc_->update(p_, d, to("public"), t);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kConflict);
  const std::string p = create(spec("public"));
  ASSERT_TRUE(svc_->remove(p_, p, t));
  auto stopped = svc_->update(p_, p, to("public"), t);
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().code, ErrorCode::kSandboxNotRunning);
  auto unknown = svc_->update(p_, "sbx_00000000000000000000000000", to("public"), t);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, ErrorCode::kSandboxNotFound);
  // The request layer refuses deny and other fields before any of this.
  EXPECT_FALSE(parse_update({{"egress", {{"mode", "deny"}}}}));
  EXPECT_FALSE(parse_update({{"egress", {{"allow", {"a.b3t.test"}}}}}));
  EXPECT_FALSE(parse_update({{"vcpu", 2}}));
  EXPECT_EQ(parse_update({{"egress", {{"mode", "allowlist"}, {"allow", {"10.0.0.0/8"}}}}}).error().code,
            ErrorCode::kEgressDenied);
}

TEST_F(NetworkTest, ARestartAppliesEachStoredPolicyAgainAndSweepsNamespacesNoRecordOwns) {
  start();
  const std::string a = create(spec("allowlist", {"a.b3t.test"}));
  const std::string p = create(spec("public"));
  Timing t;
  ASSERT_TRUE(svc_->update(p_, p, to("allowlist", {"c.b3t.test"}), t));
  ASSERT_TRUE(svc_->pause(p_, a, t));
  svc_.reset();  // b3osd stops; namespaces and containers stay
  net_.restart();  // its firewall table is made anew: nothing applied
  ASSERT_TRUE(net_.prepare("sbx_orphan0000000000000000000"));  // a create cut short by the crash
  start();
  EXPECT_EQ(status(a), "paused");
  ASSERT_TRUE(net_.of(a)->policy);
  EXPECT_EQ(net_.of(a)->policy->allow, std::vector<std::string>{"a.b3t.test"});
  ASSERT_TRUE(net_.of(p)->policy);
  EXPECT_EQ(net_.of(p)->policy->allow, std::vector<std::string>{"c.b3t.test"});
  for (int i = 0; i < 100 && net_.of("sbx_orphan0000000000000000000"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(net_.of("sbx_orphan0000000000000000000")) << "the orphaned namespace is swept";
  // A namespace that cannot be recovered fails its sandbox, which is then released.
  svc_.reset();
  net_.restart();
  net_.fail("recover");
  start();
  const bool one_failed = status(a) == "failed" || status(p) == "failed";
  EXPECT_TRUE(one_failed);
}

}  // namespace
}  // namespace b3os::sandbox
