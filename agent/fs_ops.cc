#include "agent/fs_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <cstring>
#include <vector>

#include "protocol/frame.h"

namespace b3os::agent {

namespace {

const char* type_name(mode_t m) {
  if (S_ISREG(m)) return "file";
  if (S_ISDIR(m)) return "dir";
  if (S_ISLNK(m)) return "symlink";
  return "other";
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

Json describe(const struct stat& st) {
  return Json{{"type", type_name(st.st_mode)},
              {"size", static_cast<uint64_t>(st.st_size)},
              {"mode", static_cast<unsigned>(st.st_mode & 07777)},
              {"mtime_ns", mtime_ns(st)},
              {"uid", static_cast<unsigned>(st.st_uid)},
              {"gid", static_cast<unsigned>(st.st_gid)}};
}

/// The name of `id` in account-file text (name:x:id:...), or its number.
std::string account_name(const std::string& text, unsigned id) {
  const std::string want = std::to_string(id);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    const size_t c1 = line.find(':');
    if (c1 == std::string_view::npos || c1 == 0) continue;
    const size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const size_t c3 = line.find(':', c2 + 1);
    if (line.substr(c2 + 1, (c3 == std::string_view::npos ? line.size() : c3) - c2 - 1) == want)
      return std::string(line.substr(0, c1));
  }
  return want;
}

/// describe() with owner and group names, and a symlink's target.
Json describe_named(const std::string& path, const struct stat& st) {
  Json j = describe(st);
  auto passwd = read_account_file("/etc/passwd");
  auto group = read_account_file("/etc/group");
  j["owner"] = account_name(passwd ? *passwd : std::string(), st.st_uid);
  j["group"] = account_name(group ? *group : std::string(), st.st_gid);
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    if (n >= 0) j["target"] = std::string(buf, static_cast<size_t>(n));
  }
  return j;
}

// Resolves "." and ".." lexically; used only to refuse removing the root in any spelling.
std::string lexical_normal(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

// nftw offers no user pointer; the agent is single-threaded, so file-scope state is safe.
int g_tree_errno = 0;
std::string g_tree_failed_path;

int remove_entry(const char* p, const struct stat*, int type, struct FTW*) {
  const int r = (type == FTW_DP || type == FTW_DNR) ? ::rmdir(p) : ::unlink(p);
  if (r != 0 && errno != ENOENT) {
    g_tree_errno = errno;
    g_tree_failed_path = p;
    return 1;
  }
  return 0;
}

}  // namespace

Error fs_error(std::string_view what, std::string_view path, int err, bool enoent_is_not_found) {
  ErrorCode code = ErrorCode::kInternal;
  switch (err) {
    case ENOENT:
      code = enoent_is_not_found ? ErrorCode::kFileNotFound : ErrorCode::kInvalidRequest;
      break;
    case EISDIR:
    case ENOTDIR:
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case ENOTEMPTY:
    case EEXIST:
    case EXDEV:
    case EBUSY:
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ETXTBSY:
      code = ErrorCode::kInvalidRequest;
      break;
    case ENXIO:  // a socket, or a device or FIFO end with nothing behind it
    case ENODEV:
      return Error{ErrorCode::kInvalidRequest,
                   std::string(what) + " " + std::string(path) + ": not a regular file (a socket or a device)", err};
    case EACCES:
    case EPERM:
    case EROFS:
      code = ErrorCode::kForbidden;
      break;
    default:
      break;
  }
  std::string context(what);
  context += ' ';
  context += path;
  return errno_error(code, context, err);
}

Result<void> make_dirs(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return fail(fs_error("mkdir", dir, ENOTDIR, false));
  }
  // Walk down from the root, creating each missing component.
  size_t pos = 1;
  while (pos <= dir.size()) {
    const size_t slash = std::min(dir.find('/', pos), dir.size());
    const std::string prefix = dir.substr(0, slash);
    pos = slash + 1;
    if (prefix.empty() || prefix.back() == '/') continue;
    if (::mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST) continue;
    return fail(fs_error("mkdir", prefix, errno, false));
  }
  if (::stat(dir.c_str(), &st) != 0) return fail(fs_error("mkdir", dir, errno, false));
  if (!S_ISDIR(st.st_mode)) return fail(fs_error("mkdir", dir, ENOTDIR, false));
  return {};
}

Result<Json> list_dir(const std::string& path, const std::string& after, size_t limit) {
  const int dfd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return fail(fs_error("list", path, errno));
  DIR* dir = ::fdopendir(dfd);
  if (dir == nullptr) {
    const int err = errno;
    ::close(dfd);
    return fail(fs_error("list", path, err));
  }
  // Names first, in order; only the page's entries are stat'ed (a directory of 100,000 files
  // read page by page would otherwise stat every one of them for every page).
  std::vector<std::string> names;
  while (const dirent* d = ::readdir(dir)) {
    std::string name = d->d_name;
    if (name == "." || name == "..") continue;
    if (!after.empty() && name <= after) continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());

  // The END payload must fit one frame: a page ends at `limit` entries or at that budget,
  // whichever comes first, and says where the next one starts (`last`).
  constexpr size_t kBudget = protocol::kMaxPayload - 4096;
  Json entries = Json::array();
  size_t used = 0, i = 0;
  std::string last;
  auto passwd = read_account_file("/etc/passwd");
  auto group = read_account_file("/etc/group");
  std::map<unsigned, std::string> owners, groups;  // each id looked up once per list
  auto named = [](std::map<unsigned, std::string>& seen, const Result<std::string>& text, unsigned id) {
    auto it = seen.find(id);
    if (it == seen.end()) it = seen.emplace(id, account_name(text ? *text : std::string(), id)).first;
    return it->second;
  };
  for (; i < names.size() && entries.size() < limit; ++i) {
    struct stat st;
    // An entry removed between readdir and stat is simply no longer there.
    if (::fstatat(dfd, names[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    Json e = describe(st);
    e["name"] = names[i];
    e["owner"] = named(owners, passwd, st.st_uid);
    e["group"] = named(groups, group, st.st_gid);
    used += dump_json(e).size() + 1;
    if (used > kBudget) break;
    last = names[i];
    entries.push_back(std::move(e));
  }
  ::closedir(dir);
  Json out{{"ok", true}, {"entries", std::move(entries)}};
  if (i < names.size()) {
    out["truncated"] = true;
    out["last"] = last;  // the next page starts after it
  }
  return out;
}

Result<Json> stat_path(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return fail(fs_error("stat", path, errno));
  Json out = describe_named(path, st);
  out["ok"] = true;
  return out;
}

Result<Json> make_dir(const std::string& path) {
  struct stat st;
  const bool existed = ::lstat(path.c_str(), &st) == 0;
  if (existed && !S_ISDIR(st.st_mode)) return fail(fs_error("mkdir", path, EEXIST, false));
  if (!existed)
    if (auto r = make_dirs(path); !r) return fail(r.error());
  auto out = stat_path(path);
  if (!out) return out;
  (*out)["created"] = !existed;
  return out;
}

Result<Json> rename_path(const std::string& path, const std::string& to) {
  if (lexical_normal(path) == "/") return fail(ErrorCode::kInvalidRequest, "rename " + path + ": refusing to move /");
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return fail(fs_error("rename", path, errno));
  if (::rename(path.c_str(), to.c_str()) != 0) return fail(fs_error("rename " + path + " to", to, errno, false));
  return stat_path(to);
}

Result<void> remove_path(const std::string& path, bool recursive) {
  if (lexical_normal(path) == "/") {
    return fail(ErrorCode::kInvalidRequest, "remove " + path + ": refusing to remove /");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return fail(fs_error("remove", path, errno));
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0) return fail(fs_error("remove", path, errno));
    return {};
  }
  if (::rmdir(path.c_str()) == 0) return {};
  if (errno != ENOTEMPTY && errno != EEXIST) return fail(fs_error("remove", path, errno));
  if (!recursive) {
    return fail(ErrorCode::kInvalidRequest,
                "remove " + path + ": directory not empty; pass recursive=true", ENOTEMPTY);
  }
  g_tree_errno = 0;
  g_tree_failed_path.clear();
  // FTW_PHYS: symlinks are removed, never followed; FTW_DEPTH: children before parents.
  const int r = ::nftw(path.c_str(), remove_entry, 32, FTW_DEPTH | FTW_PHYS);
  if (r != 0) {
    const int err = g_tree_errno != 0 ? g_tree_errno : errno;
    return fail(fs_error("remove", g_tree_failed_path.empty() ? path : g_tree_failed_path, err));
  }
  return {};
}

Json run_fs_op(const std::string& op, const Json& req) {
  auto path = get_path(req);
  if (!path) return error_json(path.error());
  if (op == "list") {
    // A page: the names after `after` (in byte order), at most `limit` (1-1000, default 1000).
    std::string after;
    size_t limit = 1000;
    if (auto it = req.find("after"); it != req.end() && it->is_string()) after = it->get<std::string>();
    if (auto it = req.find("limit"); it != req.end() && it->is_number_unsigned())
      limit = std::clamp<size_t>(it->get<size_t>(), 1, 1000);
    auto r = list_dir(*path, after, limit);
    return r ? std::move(*r) : error_json(r.error());
  }
  if (op == "stat") {
    auto r = stat_path(*path);
    return r ? std::move(*r) : error_json(r.error());
  }
  if (op == "mkdir") {
    auto r = make_dir(*path);
    return r ? std::move(*r) : error_json(r.error());
  }
  if (op == "rename") {
    auto to = get_string(req, "to");
    if (!to) return error_json(to.error());
    if (to->empty() || to->front() != '/' || to->find('\0') != std::string::npos)
      return error_json(Error{ErrorCode::kInvalidRequest, "rename: the destination must be an absolute path", 0});
    auto r = rename_path(*path, *to);
    return r ? std::move(*r) : error_json(r.error());
  }
  auto recursive = get_bool(req, "recursive", false);
  if (!recursive) return error_json(recursive.error());
  auto r = remove_path(*path, *recursive);
  return r ? Json{{"ok", true}} : error_json(r.error());
}

}  // namespace b3os::agent
