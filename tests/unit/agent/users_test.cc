#include "agent/users.h"

#include <gtest/gtest.h>

namespace b3os::agent {
namespace {

constexpr std::string_view kPasswd =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "# a comment line\n"
    "+nis-user::::::\n"
    "broken:x:notanumber:1::/home/broken:/bin/sh\n"
    "short:x:5:5\n"
    "\n"
    "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\r\n"
    "nohome:x:1001:1001:::/bin/sh\n"
    "twin:x:1000:77::/home/twin:/bin/sh\n"
    "big:x:4294967295:1::/:/bin/sh\n"
    "last:x:1002:1002::/home/last:/bin/zsh";  // no final newline

constexpr std::string_view kGroup =
    "root:x:0:\n"
    "sudo:x:27:alice,bob\n"
    "alice:x:1000:\n"
    "team:x:2345:bob,alice\n"
    "alicex:x:3000:alicex\n"
    "badgid:x:x:alice\n"
    "dup:x:27:alice\n"
    "last:x:1002:";

TEST(Users, PasswdByNameAndUid) {
  auto a = find_passwd_name(kPasswd, "alice");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->uid, 1000u);
  EXPECT_EQ(a->gid, 1000u);
  EXPECT_EQ(a->home, "/home/alice");
  EXPECT_EQ(a->shell, "/bin/bash");  // the CR of a CRLF line is not part of it
  auto l = find_passwd_name(kPasswd, "last");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->shell, "/bin/zsh");
  // By uid: the first entry with it.
  auto u = find_passwd_uid(kPasswd, 1000);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->name, "alice");
  EXPECT_FALSE(find_passwd_name(kPasswd, "bob"));
  EXPECT_FALSE(find_passwd_name(kPasswd, "ali"));
  EXPECT_FALSE(find_passwd_uid(kPasswd, 4242));
}

TEST(Users, MalformedPasswdLinesAreSkipped) {
  EXPECT_FALSE(find_passwd_name(kPasswd, "broken"));
  EXPECT_FALSE(find_passwd_name(kPasswd, "short"));
  EXPECT_FALSE(find_passwd_name(kPasswd, "+nis-user"));
  EXPECT_FALSE(find_passwd_name(kPasswd, "# a comment line"));
  EXPECT_FALSE(find_passwd_name(kPasswd, "big"));  // (uid_t)-1 is no user
  EXPECT_FALSE(find_passwd_name("", "root"));
  EXPECT_FALSE(find_passwd_name("root:x:0:0:root:/root:/bin/bash:extra\n", "root"));
}

TEST(Users, MemberGroups) {
  EXPECT_EQ(member_groups(kGroup, "alice"), (std::vector<gid_t>{27, 2345, 27}));
  EXPECT_EQ(member_groups(kGroup, "bob"), (std::vector<gid_t>{27, 2345}));
  EXPECT_EQ(member_groups(kGroup, "alicex"), (std::vector<gid_t>{3000}));
  EXPECT_TRUE(member_groups(kGroup, "carol").empty());
  EXPECT_TRUE(member_groups(kGroup, "").empty());
  EXPECT_TRUE(member_groups("", "alice").empty());
}

TEST(Users, ResolveName) {
  auto u = resolve_user("alice", kPasswd, kGroup);
  ASSERT_TRUE(u) << u.error().message;
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1000u);
  // The primary group first, then each group listing her once.
  EXPECT_EQ(u->groups, (std::vector<gid_t>{1000, 27, 2345}));
  EXPECT_EQ(u->name, "alice");
  EXPECT_EQ(u->home, "/home/alice");
  EXPECT_EQ(u->shell, "/bin/bash");

  auto r = resolve_user("root", kPasswd, kGroup);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->uid, 0u);
  EXPECT_EQ(r->groups, (std::vector<gid_t>{0}));
  EXPECT_EQ(r->home, "/root");

  auto n = resolve_user("nohome", kPasswd, kGroup);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->home, "/");
}

TEST(Users, UnknownNameNamesTheFile) {
  auto u = resolve_user("nobody-here", kPasswd, kGroup);
  ASSERT_FALSE(u);
  EXPECT_EQ(u.error().code, ErrorCode::kInvalidRequest);
  EXPECT_EQ(u.error().message, "user: no user \"nobody-here\" in the sandbox's /etc/passwd");
  EXPECT_FALSE(resolve_user("alice", "", kGroup));
}

TEST(Users, ResolveNumeric) {
  // A uid with an entry takes the entry's name, group, home and groups.
  auto a = resolve_user("1000", kPasswd, kGroup);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "alice");
  EXPECT_EQ(a->gid, 1000u);
  EXPECT_EQ(a->groups, (std::vector<gid_t>{1000, 27, 2345}));
  EXPECT_EQ(a->home, "/home/alice");

  // UID:GID: the group given, then the entry's other groups.
  auto g = resolve_user("1000:2345", kPasswd, kGroup);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->gid, 2345u);
  EXPECT_EQ(g->groups, (std::vector<gid_t>{2345, 27}));

  // No entry: the group of the same number (not root's), HOME=/, no name.
  auto n = resolve_user("1234", kPasswd, kGroup);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->uid, 1234u);
  EXPECT_EQ(n->gid, 1234u);
  EXPECT_EQ(n->groups, (std::vector<gid_t>{1234}));
  EXPECT_EQ(n->home, "/");
  EXPECT_EQ(n->name, "");

  auto ng = resolve_user("1234:1234", "", "");
  ASSERT_TRUE(ng);
  EXPECT_EQ(ng->uid, 1234u);
  EXPECT_EQ(ng->gid, 1234u);

  auto z = resolve_user("0:0", "", "");
  ASSERT_TRUE(z);
  EXPECT_EQ(z->uid, 0u);
  EXPECT_EQ(z->home, "/");
}

TEST(Users, MalformedRequests) {
  for (std::string_view bad : {"", "1000:", ":1000", "1000:x", "alice:1000", "1:2:3", "4294967295",
                               "1:4294967295", "99999999999"}) {
    auto u = resolve_user(bad, kPasswd, kGroup);
    ASSERT_FALSE(u) << bad;
    EXPECT_EQ(u.error().code, ErrorCode::kInvalidRequest) << bad;
  }
  EXPECT_FALSE(resolve_user(std::string_view("al\nice", 6), kPasswd, kGroup));
  EXPECT_FALSE(resolve_user(std::string_view("al\0ice", 6), kPasswd, kGroup));
}

TEST(Users, EnvAddsOnlyWhatIsMissing) {
  ExecUser u;
  u.name = "alice";
  u.home = "/home/alice";
  std::vector<std::string> env = {"PATH=/bin", "USER=someone", "HOMEDIR=/x"};
  add_user_env(env, u);
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "USER=someone", "HOMEDIR=/x", "HOME=/home/alice",
                                           "LOGNAME=alice"}));

  ExecUser anon;  // a uid /etc/passwd does not know
  std::vector<std::string> env2 = {"PATH=/bin"};
  add_user_env(env2, anon);
  EXPECT_EQ(env2, (std::vector<std::string>{"PATH=/bin", "HOME=/"}));
}

}  // namespace
}  // namespace b3os::agent
