#include "daemon/image/root_ops.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "daemon/image/manifest.h"
#include "daemon/image/tree.h"

namespace b3os::image {

namespace {

// ENOENT: absent; ELOOP: a symlink (O_NOFOLLOW); ENOTDIR: not a directory. Each means "not a
// real directory here", which the callers answer by leaving the name alone.
bool not_a_dir(int err) { return err == ENOENT || err == ELOOP || err == ENOTDIR; }

bool normalized(std::string_view rel) {
  if (rel.empty() || rel.front() == '/' || rel.back() == '/') return false;
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string_view::npos) end = rel.size();
    const std::string_view c = rel.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

Result<TenantRoot> TenantRoot::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(host_error("opening the root " + path, errno));
  return TenantRoot(std::move(fd));
}

Result<UniqueFd> TenantRoot::parent_of(std::string_view rel, std::string* name) const {
  if (!normalized(rel)) return fail(ErrorCode::kInternal, "root: not a normalized relative path: " + quote(rel));
  const size_t slash = rel.rfind('/');
  *name = std::string(slash == std::string_view::npos ? rel : rel.substr(slash + 1));
  UniqueFd cur(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
  if (!cur) return fail(host_error("root: dup", errno));
  if (slash == std::string_view::npos) return cur;
  // One component at a time: a single name that is not "." or ".." cannot lead out of the
  // directory it is looked up in, and O_NOFOLLOW|O_DIRECTORY refuses a symlink.
  const std::string_view dir = rel.substr(0, slash);
  size_t start = 0;
  while (start <= dir.size()) {
    size_t end = dir.find('/', start);
    if (end == std::string_view::npos) end = dir.size();
    const std::string c(dir.substr(start, end - start));
    const int fd = ::openat(cur.get(), c.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (not_a_dir(errno)) return UniqueFd();
      return fail(host_error("root: opening " + quote(dir.substr(0, end)), errno));
    }
    cur.reset(fd);
    start = end + 1;
  }
  return cur;
}

Result<bool> TenantRoot::ensure_dir(std::string_view rel, mode_t mode) {
  std::string name;
  auto parent = parent_of(rel, &name);
  if (!parent) return fail(parent.error());
  if (!parent->valid()) return false;
  bool made = false;
  if (::mkdirat(parent->get(), name.c_str(), mode) == 0)
    made = true;
  else if (errno != EEXIST)
    return fail(host_error("root: making the directory " + quote(rel), errno));
  UniqueFd d(::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) {
    if (not_a_dir(errno)) return false;
    return fail(host_error("root: opening " + quote(rel), errno));
  }
  // mkdirat's mode passed through the umask; what was there before keeps its own.
  if (made && ::fchmod(d.get(), mode) != 0) return fail(host_error("root: chmod of " + quote(rel), errno));
  return true;
}

Result<bool> TenantRoot::chmod_dir(std::string_view rel, mode_t mode) {
  std::string name;
  auto parent = parent_of(rel, &name);
  if (!parent) return fail(parent.error());
  if (!parent->valid()) return false;
  UniqueFd d(::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d) {
    if (not_a_dir(errno)) return false;
    return fail(host_error("root: opening " + quote(rel), errno));
  }
  if (::fchmod(d.get(), mode) != 0) return fail(host_error("root: chmod of " + quote(rel), errno));
  return true;
}

Result<bool> TenantRoot::ensure_file(std::string_view rel, mode_t mode) {
  std::string name;
  auto parent = parent_of(rel, &name);
  if (!parent) return fail(parent.error());
  if (!parent->valid()) return false;
  // O_EXCL with O_CREAT never follows a symlink at the name, dangling or not.
  UniqueFd f(::openat(parent->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!f) {
    if (errno == EEXIST) return false;
    return fail(host_error("root: creating " + quote(rel), errno));
  }
  if (::fchmod(f.get(), mode) != 0) return fail(host_error("root: chmod of " + quote(rel), errno));
  return true;
}

Result<void> TenantRoot::copy_in(const std::string& src, std::string_view rel, mode_t mode) {
  std::string name;
  auto parent = parent_of(rel, &name);
  if (!parent) return fail(parent.error());
  if (!parent->valid())
    return fail(ErrorCode::kInvalidRequest, "the root's " + quote(rel) + " goes through a symlink or a file");
  UniqueFd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in) return fail(host_error("root: opening " + src, errno));
  // Whatever the tenant put at the name goes (a symlink is unlinked, never written through); a
  // directory there is refused.
  if (::unlinkat(parent->get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    if (errno == EISDIR || errno == EPERM)
      return fail(ErrorCode::kInvalidRequest, "the root's " + quote(rel) + " is a directory");
    return fail(host_error("root: removing " + quote(rel), errno));
  }
  UniqueFd out(::openat(parent->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!out) return fail(host_error("root: creating " + quote(rel), errno));
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t n = ::read(in.get(), buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(host_error("root: reading " + src, errno));
    }
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(out.get(), buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return fail(host_error("root: writing " + quote(rel), errno));
      }
      off += w;
    }
  }
  if (::fchmod(out.get(), mode) != 0) return fail(host_error("root: chmod of " + quote(rel), errno));
  return {};
}

}  // namespace b3os::image
