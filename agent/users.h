#pragma once
// The user an exec runs as: the exec request's `user` ("alice", "1000" or "1000:1000")
// resolved against the sandbox's own /etc/passwd and /etc/group. Pure: the caller reads the
// files (the agent is static and makes no NSS calls, so getpwnam is not an option).

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace b3os::agent {

/// One well-formed line of /etc/passwd.
struct PasswdEntry {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;
  std::string shell;
};

/// Who an exec runs as, and what its environment says about it.
struct ExecUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // for setgroups: `gid` first, then the groups listing the user
  std::string name;           // empty for a numeric uid that /etc/passwd does not know
  std::string home = "/";
  std::string shell;
};

/// The first entry named `name` in passwd text; malformed lines are skipped.
std::optional<PasswdEntry> find_passwd_name(std::string_view passwd, std::string_view name);
/// The first entry with uid `uid` in passwd text; malformed lines are skipped.
std::optional<PasswdEntry> find_passwd_uid(std::string_view passwd, uid_t uid);
/// The gids of the groups in group text whose member list names `user`, in file order.
std::vector<gid_t> member_groups(std::string_view group, std::string_view user);

/// Resolves `user`: a name that must be in `passwd`, or "UID" (the primary group is that of
/// the uid's entry, or the same number without one), or "UID:GID". A name that is not there is
/// invalid_request "user: no user \"x\" in the sandbox's /etc/passwd".
Result<ExecUser> resolve_user(std::string_view user, std::string_view passwd, std::string_view group);

/// Adds HOME, USER and LOGNAME for `u` to `env` ("K=V" strings), each only when `env` does not
/// set it already (USER and LOGNAME only when `u` has a name).
void add_user_env(std::vector<std::string>& env, const ExecUser& u);

}  // namespace b3os::agent
