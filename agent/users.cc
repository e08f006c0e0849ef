#include "agent/users.h"

#include <algorithm>
#include <cstdint>

namespace b3os::agent {

namespace {

// (uid_t)-1 means "leave unchanged" to setuid and friends, never a user.
constexpr uint64_t kMaxId = 0xfffffffeull;
// Linux's NGROUPS_MAX: setgroups refuses a longer list.
constexpr size_t kMaxGroups = 65536;

std::optional<uint32_t> parse_id(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > kMaxId) return std::nullopt;
  return static_cast<uint32_t>(v);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t i = 0;
  for (;;) {
    const size_t j = s.find(sep, i);
    if (j == std::string_view::npos) {
      out.push_back(s.substr(i));
      return out;
    }
    out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
}

// Calls `f` with each line of `text` that could be an entry: not empty, not a comment, not a
// NIS "+"/"-" line (those name no user by themselves).
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find('\n', i);
    if (j == std::string_view::npos) j = text.size();
    std::string_view line = text.substr(i, j - i);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && line[0] != '#' && line[0] != '+' && line[0] != '-') {
      if (f(line)) return;
    }
    i = j + 1;
  }
}

std::optional<PasswdEntry> parse_passwd_line(std::string_view line) {
  const auto f = split(line, ':');
  if (f.size() != 7 || f[0].empty()) return std::nullopt;
  const auto uid = parse_id(f[2]);
  const auto gid = parse_id(f[3]);
  if (!uid || !gid) return std::nullopt;
  return PasswdEntry{std::string(f[0]), *uid, *gid, std::string(f[5]), std::string(f[6])};
}

template <typename Match>
std::optional<PasswdEntry> find_passwd(std::string_view passwd, Match&& match) {
  std::optional<PasswdEntry> found;
  for_each_line(passwd, [&](std::string_view line) {
    auto e = parse_passwd_line(line);
    if (e && match(*e)) found = std::move(e);
    return found.has_value();
  });
  return found;
}

}  // namespace

std::optional<PasswdEntry> find_passwd_name(std::string_view passwd, std::string_view name) {
  return find_passwd(passwd, [&](const PasswdEntry& e) { return e.name == name; });
}

std::optional<PasswdEntry> find_passwd_uid(std::string_view passwd, uid_t uid) {
  return find_passwd(passwd, [&](const PasswdEntry& e) { return e.uid == uid; });
}

std::vector<gid_t> member_groups(std::string_view group, std::string_view user) {
  std::vector<gid_t> out;
  if (user.empty()) return out;
  for_each_line(group, [&](std::string_view line) {
    const auto f = split(line, ':');
    if (f.size() != 4 || f[0].empty()) return false;
    const auto gid = parse_id(f[2]);
    if (!gid) return false;
    for (std::string_view m : split(f[3], ',')) {
      if (m == user) {
        out.push_back(*gid);
        break;
      }
    }
    return false;
  });
  return out;
}

Result<ExecUser> resolve_user(std::string_view user, std::string_view passwd, std::string_view group) {
  ExecUser u;
  std::optional<PasswdEntry> entry;
  std::optional<gid_t> gid;
  const size_t colon = user.find(':');
  const auto uid = parse_id(user.substr(0, colon));
  if (uid) {
    if (colon != std::string_view::npos) {
      gid = parse_id(user.substr(colon + 1));
      if (!gid) {
        return fail(ErrorCode::kInvalidRequest,
                    "user: \"" + std::string(user) + "\" is neither a name, UID nor UID:GID");
      }
    }
    u.uid = *uid;
    entry = find_passwd_uid(passwd, *uid);
  } else {
    if (user.empty() || colon != std::string_view::npos ||
        user.find_first_of(std::string_view("\n\0", 2)) != std::string_view::npos) {
      return fail(ErrorCode::kInvalidRequest,
                  "user: \"" + std::string(user) + "\" is neither a name, UID nor UID:GID");
    }
    entry = find_passwd_name(passwd, user);
    if (!entry) {
      return fail(ErrorCode::kInvalidRequest,
                  "user: no user \"" + std::string(user) + "\" in the sandbox's /etc/passwd");
    }
    u.uid = entry->uid;
  }
  // A uid that /etc/passwd does not know gets the group of the same number, not root's.
  u.gid = gid ? *gid : entry ? entry->gid : u.uid;
  u.groups.push_back(u.gid);
  if (entry) {
    u.name = entry->name;
    if (!entry->home.empty()) u.home = entry->home;
    u.shell = entry->shell;
    for (gid_t g : member_groups(group, entry->name)) {
      if (u.groups.size() >= kMaxGroups) break;
      if (std::find(u.groups.begin(), u.groups.end(), g) == u.groups.end()) u.groups.push_back(g);
    }
  }
  return u;
}

void add_user_env(std::vector<std::string>& env, const ExecUser& u) {
  const auto add = [&env](std::string_view key, const std::string& value) {
    for (const auto& e : env) {
      if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') return;
    }
    env.push_back(std::string(key) + "=" + value);
  };
  add("HOME", u.home);
  if (u.name.empty()) return;
  add("USER", u.name);
  add("LOGNAME", u.name);
}

}  // namespace b3os::agent
