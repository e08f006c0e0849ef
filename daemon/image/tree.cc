#include "daemon/image/tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "daemon/image/image.h"
#include "daemon/image/manifest.h"

namespace b3os::image {

namespace {

tl::unexpected<Error> refuse(std::string fragment) { return fail(ErrorCode::kInvalidRequest, std::move(fragment)); }

}  // namespace

Error host_error(std::string_view context, int err) {
  return errno_error(err == ENOSPC || err == EDQUOT ? ErrorCode::kCapacityUnavailable : ErrorCode::kInternal, context,
                     err);
}

Result<Tree> Tree::open(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(host_error("image: opening the root directory " + path, errno));
  auto names = list_dir(fd.get());
  if (!names) return fail(names.error());
  if (!names->empty()) return fail(ErrorCode::kInternal, "image: the root directory " + path + " is not empty");
  return Tree(std::move(fd));
}

Result<int> Tree::dir(std::string_view path, bool create, const std::function<void(std::string_view)>& made) {
  if (path.empty()) return root_.get();
  if (cached_fd_ && path == cached_path_) return cached_fd_.get();
  auto fd = open_dir(path, create, made);
  if (!fd) return fail(fd.error());
  if (!fd->valid()) return -1;
  cached_path_ = path;
  cached_fd_ = std::move(*fd);
  return cached_fd_.get();
}

Result<UniqueFd> Tree::open_dir(std::string_view path, bool create, const std::function<void(std::string_view)>& made) {
  if (path.empty()) {
    UniqueFd fd(::fcntl(root_.get(), F_DUPFD_CLOEXEC, 0));
    if (!fd) return fail(host_error("image: dup", errno));
    return fd;
  }
  // The kernel walks the whole path at once and refuses any symlink on the way (and any way
  // out, which normalized paths cannot take anyway). On ENOENT, ELOOP or ENOTDIR the walk below
  // goes component by component, to make what is missing or to name the component at fault.
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const std::string p(path);
  const long fd = ::syscall(SYS_openat2, root_.get(), p.c_str(), &how, sizeof how);
  if (fd >= 0) return UniqueFd(static_cast<int>(fd));
  const int err = errno;
  if (err != ENOENT && err != ELOOP && err != ENOTDIR && err != ENOSYS && err != EPERM)
    return fail(host_error("image: opening the directory " + quote(path), err));
  return walk(path, create, made);
}

// One component at a time with O_NOFOLLOW: a single name, never "." or "..", cannot lead out of
// the directory it is looked up in, and O_NOFOLLOW|O_DIRECTORY refuses a symlink. This is also
// the whole lookup where openat2 is missing (ENOSYS) or filtered (EPERM).
Result<UniqueFd> Tree::walk(std::string_view path, bool create, const std::function<void(std::string_view)>& made) {
  UniqueFd held;
  int cur = root_.get();
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string name(path.substr(start, end - start));
    const std::string_view prefix = path.substr(0, end);
    constexpr int kFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::openat(cur, name.c_str(), kFlags);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(cur, name.c_str(), 0755) == 0) {
        // mkdirat's mode passed through the process's umask; the image expects 0755. The name
        // is the directory just made: nothing else writes in the tree during an import.
        if (::fchmodat(cur, name.c_str(), 0755, 0) != 0)
          return fail(host_error("image: chmod of the directory " + quote(prefix), errno));
        if (made) made(prefix);
      } else if (errno != EEXIST) {
        return fail(host_error("image: making the directory " + quote(prefix), errno));
      }
      fd = ::openat(cur, name.c_str(), kFlags);
    }
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) return UniqueFd();
      if (err == ENOTDIR || err == ELOOP) {
        struct stat st {};
        if (::fstatat(cur, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
          return refuse("goes through the symlink " + quote(prefix) + " (paths may not pass through symlinks)");
        return refuse("goes through " + quote(prefix) + ", which is not a directory");
      }
      return fail(host_error("image: opening the directory " + quote(prefix), err));
    }
    held.reset(fd);
    cur = fd;
    start = end + 1;
  }
  return held;
}

void Tree::forget(std::string_view path) {
  if (!cached_fd_) return;
  const std::string_view c = cached_path_;
  if (path.empty() || c == path || (c.size() > path.size() && c.starts_with(path) && c[path.size()] == '/')) {
    cached_fd_.reset();
    cached_path_.clear();
  }
}

Result<std::vector<std::string>> list_dir(int dirfd) {
  // fdopendir takes the fd; a reopened "." gives it an fd and an offset of its own.
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fail(host_error("image: opening a directory to list it", errno));
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return fail(host_error("image: listing a directory", err));
  }
  std::vector<std::string> names;
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return fail(host_error("image: listing a directory", err));
  return names;
}

Result<void> remove_at(int dirfd, const std::string& name) {
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail(host_error("image: stat of " + quote(name), errno));
  }
  if (S_ISDIR(st.st_mode)) {
    UniqueFd d(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return fail(host_error("image: opening " + quote(name) + " to remove it", errno));
    auto names = list_dir(d.get());
    if (!names) return fail(names.error());
    for (const auto& n : *names)
      if (auto r = remove_at(d.get(), n); !r) return r;
  }
  if (::unlinkat(dirfd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT)
    return fail(host_error("image: removing " + quote(name), errno));
  return {};
}

Result<void> remove_tree(const std::string& path_in) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  // The parent is the caller's; everything from `path` down is looked up without following.
  const auto slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..")
    return fail(ErrorCode::kInternal, "image: remove_tree needs a path that ends in a name, not " + quote(path));
  UniqueFd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return {};
    return fail(host_error("image: opening " + parent, errno));
  }
  return remove_at(dir.get(), name);
}

}  // namespace b3os::image
