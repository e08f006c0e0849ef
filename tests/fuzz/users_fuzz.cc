// libFuzzer target for an exec's user resolved from /etc/passwd and /etc/group text
// (agent/users.h): both files are written by whatever runs inside the sandbox. The input is
// "user NUL passwd NUL group"; whatever resolves must keep the promises setgroups, setgid and
// setuid rely on.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agent/users.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

bool numeric_form(std::string_view s) {
  const size_t colon = s.find(':');
  const auto digits = [](std::string_view d) {
    return !d.empty() && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(0, colon)) && (colon == std::string_view::npos || digits(s.substr(colon + 1)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace b3os::agent;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t a = in.find('\0');
  const std::string_view user = in.substr(0, a);
  const std::string_view rest = a == std::string_view::npos ? std::string_view() : in.substr(a + 1);
  const size_t b = rest.find('\0');
  const std::string_view passwd = rest.substr(0, b);
  const std::string_view group = b == std::string_view::npos ? std::string_view() : rest.substr(b + 1);

  for (gid_t g : member_groups(group, user)) require(g != static_cast<gid_t>(-1));
  auto u = resolve_user(user, passwd, group);
  if (!u) {
    require(u.error().code == b3os::ErrorCode::kInvalidRequest);
    return 0;
  }
  require(u->uid != static_cast<uid_t>(-1) && u->gid != static_cast<gid_t>(-1));
  require(!u->groups.empty() && u->groups[0] == u->gid && u->groups.size() <= 65536);
  for (size_t i = 0; i < u->groups.size(); ++i) {
    require(std::find(u->groups.begin() + static_cast<std::ptrdiff_t>(i) + 1, u->groups.end(), u->groups[i]) ==
            u->groups.end());
  }
  require(!u->home.empty());
  require(u->name.find_first_of(std::string_view(":\n\0", 3)) == std::string::npos);
  if (!numeric_form(user)) {
    // A name resolves only to its own entry.
    require(u->name == user);
    const auto e = find_passwd_name(passwd, user);
    require(e && e->uid == u->uid && e->gid == u->gid);
  }
  std::vector<std::string> env = {"PATH=/bin"};
  add_user_env(env, *u);
  require(env.size() == (u->name.empty() ? 2u : 4u) && env[1] == "HOME=" + u->home);
  return 0;
}
