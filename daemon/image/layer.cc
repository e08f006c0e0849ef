#include "daemon/image/layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "daemon/image/archive.h"
#include "daemon/image/digest.h"
#include "daemon/image/manifest.h"

// Why the writer is ours and not archive_write_disk: its ARCHIVE_EXTRACT_SECURE_* checks look
// paths up by name with lstat and then act on them, racy by construction and blind to what a
// whiteout must do (delete lower content, never through a symlink, keep this layer's own
// entries under an opaque directory). Here every change is an *at() call on a directory fd
// obtained without following any symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or one
// O_NOFOLLOW component at a time), leaves are made with O_EXCL/O_NOFOLLOW or their *at()
// NOFOLLOW forms, so no entry, link or whiteout can reach outside the root.

namespace b3os::image {

namespace {

constexpr size_t kMaxDepth = 256;
constexpr size_t kMaxPath = 4096;
constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";
constexpr int64_t kMaxId = 0xFFFFFFFEll;  // (uid_t)-1 means "leave unchanged" to chown

tl::unexpected<Error> bad(std::string message) { return fail(ErrorCode::kInvalidRequest, "image: " + std::move(message)); }

std::string error_string(archive* a) {
  const char* s = archive_error_string(a);
  return s ? s : "unknown error";
}

std::string join(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

struct timespec entry_time(bool set, time_t sec, long nsec) {
  if (!set) return {0, UTIME_OMIT};
  return {sec, nsec >= 0 && nsec < 1'000'000'000 ? nsec : 0};
}

Result<void> write_all(int fd, const char* p, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, offset);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail(Error{ErrorCode::kInternal, "", errno});
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
  return {};
}

}  // namespace

// The two readers a layer goes through: `stored` undoes the compression (raw format), `tar`
// reads the entries from what `stored` gives. Both pull through callbacks, so a limit is
// checked on every block before the tar reader sees it.
struct LayerWriter::Pipeline {
  LayerWriter* writer;
  const BlockSource* source;
  Sha256* diff;  // null unless the diff_id is wanted
  archive* stored = nullptr;
};

Result<std::string> entry_path(std::string_view raw) {
  std::string out;
  size_t depth = 0, s = 0;
  while (s <= raw.size()) {
    size_t e = raw.find('/', s);
    if (e == std::string_view::npos) e = raw.size();
    const std::string_view c = raw.substr(s, e - s);
    s = e + 1;
    if (c.empty() || c == ".") continue;
    if (c == "..") return fail(ErrorCode::kInvalidRequest, "has a \"..\" component (entries stay beneath the root)");
    if (!out.empty()) out += '/';
    out += c;
    ++depth;
  }
  if (depth > kMaxDepth) return fail(ErrorCode::kInvalidRequest, "is nested more than 256 directories deep");
  if (out.size() > kMaxPath) return fail(ErrorCode::kInvalidRequest, "is longer than 4096 bytes");
  return out;
}

LayerWriter::LayerWriter(Tree tree, const Limits& limits)
    : tree_(std::move(tree)), limits_(limits), own_(::geteuid() == 0) {}

Result<LayerWriter> LayerWriter::open(const std::string& rootfs, const Limits& limits) {
  auto tree = Tree::open(rootfs);
  if (!tree) return fail(tree.error());
  return LayerWriter(std::move(*tree), limits);
}

tl::unexpected<Error> LayerWriter::refuse(const std::string& path, const std::string& why) const {
  return bad(layer_ + ": entry " + quote(path.empty() ? "." : path) + " " + why);
}

Error LayerWriter::host(const std::string& doing, const std::string& path, int err) const {
  return host_error("image: " + layer_ + ": " + doing + " " + quote(path.empty() ? "." : path), err);
}

Result<void> LayerWriter::charge(uint64_t n) {
  layer_bytes_ += n;
  total_bytes_ += n;
  if (layer_bytes_ > limits_.max_layer_bytes)
    return bad(layer_ + " is larger than " + std::to_string(limits_.max_layer_bytes) +
               " bytes uncompressed (the limit of one layer)");
  if (total_bytes_ > limits_.max_total_bytes)
    return bad("the layers are larger than " + std::to_string(limits_.max_total_bytes) +
               " bytes uncompressed together (the limit of an image), past it in " + layer_);
  return {};
}

ssize_t LayerWriter::read_stored(archive*, void* self, const void** buf) {
  auto* p = static_cast<Pipeline*>(self);
  auto block = (*p->source)();
  if (!block) {
    p->writer->stopped_ = block.error();
    return -1;
  }
  *buf = block->data();
  return static_cast<ssize_t>(block->size());
}

ssize_t LayerWriter::read_tar(archive*, void* self, const void** buf) {
  auto* p = static_cast<Pipeline*>(self);
  for (;;) {
    size_t n = 0;
    la_int64_t offset = 0;
    const int r = archive_read_data_block(p->stored, buf, &n, &offset);
    if (r == ARCHIVE_EOF) return 0;
    if (r < ARCHIVE_WARN) {
      if (!p->writer->stopped_)
        p->writer->stopped_ = bad(p->writer->layer_ + " is not valid compressed data: " + error_string(p->stored)).value();
      return -1;
    }
    if (n == 0) continue;  // 0 would read as the end
    if (auto ok = p->writer->charge(n); !ok) {
      p->writer->stopped_ = ok.error();
      return -1;
    }
    if (p->diff) p->diff->update(*buf, n);
    return static_cast<ssize_t>(n);
  }
}

Result<AppliedLayer> LayerWriter::apply(const BlockSource& source, uint64_t stored_size, const std::string& name,
                                        bool want_diff_id) {
  layer_ = name;
  layer_bytes_ = 0;
  stopped_.reset();
  written_.clear();
  touched_.clear();
  dirs_.clear();
  Sha256 diff;
  AppliedLayer out;
  if (stored_size > 0) {
    Pipeline p{this, &source, want_diff_id ? &diff : nullptr};
    auto failed = [&](archive* a, const std::string& what) -> tl::unexpected<Error> {
      if (stopped_) return fail(*stopped_);
      return bad(layer_ + " " + what + ": " + error_string(a));
    };
    ArchivePtr stored(archive_read_new());
    add_decompressors(stored.get());
    archive_read_support_format_raw(stored.get());
    archive_read_support_format_empty(stored.get());
    p.stored = stored.get();
    archive_entry* e = nullptr;
    if (archive_read_open(stored.get(), &p, nullptr, &read_stored, nullptr) != ARCHIVE_OK)
      return failed(stored.get(), "could not be read");
    const int first = archive_read_next_header(stored.get(), &e);
    if (first < ARCHIVE_WARN) return failed(stored.get(), "could not be read");
    if (first != ARCHIVE_EOF) {
      ArchivePtr tar(archive_read_new());
      archive_read_support_format_tar(tar.get());
      archive_read_support_format_empty(tar.get());
      if (archive_read_open(tar.get(), &p, nullptr, &read_tar, nullptr) != ARCHIVE_OK)
        return failed(tar.get(), "is not a tar");
      for (;;) {
        const int r = archive_read_next_header(tar.get(), &e);
        if (r == ARCHIVE_EOF) break;
        // ARCHIVE_WARN: a name that is not UTF-8 in this locale, kept as the bytes it is.
        if (r < ARCHIVE_WARN) return failed(tar.get(), out.entries == 0 ? "is not a tar" : "is damaged");
        ++out.entries;
        if (++total_entries_ > limits_.max_entries)
          return bad("the layers have more than " + std::to_string(limits_.max_entries) +
                     " entries together (the limit of an image), past it in " + layer_);
        if (auto ok = entry(tar.get(), e); !ok) return fail(ok.error());
      }
      // Whatever follows the tar's end marker is part of the layer's diff_id.
      const void* buf = nullptr;
      for (ssize_t n; (n = read_tar(nullptr, &p, &buf)) != 0;)
        if (n < 0) return fail(*stopped_);
    }
    if (auto ok = finish_dirs(); !ok) return fail(ok.error());
  }
  out.bytes = layer_bytes_;
  if (want_diff_id) out.diff_id = diff.hex();
  return out;
}

Result<void> LayerWriter::entry(archive* tar, archive_entry* e) {
  const char* raw = archive_entry_pathname(e);
  if (raw == nullptr) return bad(layer_ + ": an entry has no name");
  auto path = entry_path(raw);
  if (!path) return refuse(raw, path.error().message);
  const std::string leaf = path->substr(path->rfind('/') == std::string::npos ? 0 : path->rfind('/') + 1);
  if (leaf.starts_with(kWhiteout)) return whiteout(*path);
  if (const char* target = archive_entry_hardlink(e)) return hardlink(*path, target);

  Attrs a;
  a.uid = archive_entry_uid(e);
  a.gid = archive_entry_gid(e);
  if (a.uid < 0 || a.uid > kMaxId || a.gid < 0 || a.gid > kMaxId)
    return refuse(*path, "has uid " + std::to_string(a.uid) + " and gid " + std::to_string(a.gid) +
                             ", outside 0 to 4294967294");
  a.mode = archive_entry_perm(e) & 07777;
  a.times[1] = entry_time(archive_entry_mtime_is_set(e), archive_entry_mtime(e), archive_entry_mtime_nsec(e));
  a.times[0] = archive_entry_atime_is_set(e)
                   ? entry_time(true, archive_entry_atime(e), archive_entry_atime_nsec(e))
                   : a.times[1];
  const mode_t type = archive_entry_filetype(e);
  if (type == AE_IFCHR || type == AE_IFBLK)
    return refuse(*path, std::string("is a ") + (type == AE_IFCHR ? "character" : "block") + " device (" +
                             std::to_string(archive_entry_rdevmajor(e)) + "," + std::to_string(archive_entry_rdevminor(e)) +
                             "); device nodes are refused (a sandbox gets its own /dev)");
  if ((type == AE_IFREG || type == AE_IFIFO) && (a.mode & (S_ISUID | S_ISGID))) {
    if (limits_.setuid == Setuid::kRefuse) {
      char octal[16];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(a.mode));
      return refuse(*path, std::string("is ") + ((a.mode & S_ISUID) ? "setuid" : "setgid") + " (mode " + octal +
                               "), and this import refuses setuid and setgid files");
    }
    if (limits_.setuid == Setuid::kStrip) a.mode &= ~mode_t{S_ISUID | S_ISGID};
  }
  if (path->empty() && type != AE_IFDIR) return refuse(*path, "is the root, which can only be a directory");
  switch (type) {
    case AE_IFREG:
      return regular(tar, *path, a, archive_entry_size_is_set(e) ? archive_entry_size(e) : 0);
    case AE_IFDIR:
      return directory(*path, a);
    case AE_IFLNK:
      return symlink(*path, a, archive_entry_symlink(e));
    case AE_IFIFO:
      return fifo(*path, a);
    default:
      return refuse(*path, "has a type this importer does not write (a socket or unknown)");
  }
}

Result<std::pair<int, std::string>> LayerWriter::parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  auto fd = tree_.dir(dir, true, [this](std::string_view made) { touched_.emplace(made); });
  if (!fd) {
    if (fd.error().code == ErrorCode::kInvalidRequest) return refuse(path, fd.error().message);
    return fail(fd.error());
  }
  return std::pair{*fd, slash == std::string::npos ? path : path.substr(slash + 1)};
}

Result<int> LayerWriter::make_replacing(int dirfd, const std::string& path, const std::string& name,
                                        const std::function<int()>& make) {
  int r = make();
  if (r >= 0 || errno != EEXIST) return r;
  if (auto ok = remove_at(dirfd, name); !ok) return fail(ok.error());
  removed(path);
  return make();
}

void LayerWriter::removed(const std::string& path) {
  tree_.forget(path);
  // Attributes waiting for a directory that is gone must not land on whatever comes next.
  for (auto it = dirs_.lower_bound(path); it != dirs_.end();) {
    if (it->first != path && !(it->first.starts_with(path) && it->first[path.size()] == '/')) break;
    it = dirs_.erase(it);
  }
}

void LayerWriter::written(const std::string& path) {
  written_.insert(path);
  for (std::string_view p = path; p.find('/') != std::string_view::npos;) {
    p = p.substr(0, p.rfind('/'));
    if (!touched_.emplace(p).second) break;  // and so are all above it
  }
}

Result<void> LayerWriter::set_owner_at(int dirfd, const std::string& name, const Attrs& a, const std::string& path) {
  if (own_ && ::fchownat(dirfd, name.c_str(), static_cast<uid_t>(a.uid), static_cast<gid_t>(a.gid),
                         AT_SYMLINK_NOFOLLOW) != 0)
    return fail(host("chown of", path, errno));
  return {};
}

Result<void> LayerWriter::regular(archive* tar, const std::string& path, const Attrs& a, int64_t size) {
  auto parent = parent_of(path);
  if (!parent) return fail(parent.error());
  const auto& [dirfd, name] = *parent;
  auto made = make_replacing(dirfd, path, name, [&, dirfd = dirfd, &name = name] {
    return ::openat(dirfd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  });
  if (!made) return fail(made.error());
  if (*made < 0) return fail(host("creating", path, errno));
  UniqueFd fd(*made);
  uint64_t pos = 0;
  for (;;) {
    const void* buf = nullptr;
    size_t n = 0;
    la_int64_t offset = 0;
    const int r = archive_read_data_block(tar, &buf, &n, &offset);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      if (stopped_) return fail(*stopped_);
      return refuse(path, "could not be read: " + error_string(tar));
    }
    if (offset < 0 || static_cast<uint64_t>(offset) < pos) return refuse(path, "has sparse data out of order");
    // A hole costs no disk here, but counts: a sandbox or a copy of the template may fill it.
    if (auto ok = charge(static_cast<uint64_t>(offset) - pos); !ok) return fail(ok.error());
    pos = static_cast<uint64_t>(offset);
    if (auto ok = write_all(fd.get(), static_cast<const char*>(buf), n, static_cast<off_t>(pos)); !ok)
      return fail(host("writing", path, ok.error().err_no));
    pos += n;
  }
  if (size > 0 && static_cast<uint64_t>(size) > pos) {
    if (auto ok = charge(static_cast<uint64_t>(size) - pos); !ok) return fail(ok.error());
    if (::ftruncate(fd.get(), size) != 0) return fail(host("writing", path, errno));
  }
  // chown before chmod: chown clears the setuid and setgid bits.
  if (own_ && ::fchown(fd.get(), static_cast<uid_t>(a.uid), static_cast<gid_t>(a.gid)) != 0)
    return fail(host("chown of", path, errno));
  if (::fchmod(fd.get(), a.mode) != 0) return fail(host("chmod of", path, errno));
  if (::futimens(fd.get(), a.times) != 0) return fail(host("setting the times of", path, errno));
  written(path);
  return {};
}

Result<void> LayerWriter::directory(const std::string& path, const Attrs& a) {
  if (!path.empty()) {
    auto parent = parent_of(path);
    if (!parent) return fail(parent.error());
    const auto& [dirfd, name] = *parent;
    // Made 0700, its own mode set once the layer's entries are in (it may forbid writing).
    if (::mkdirat(dirfd, name.c_str(), 0700) != 0) {
      if (errno != EEXIST) return fail(host("making the directory", path, errno));
      struct stat st {};
      if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(host("stat of", path, errno));
      if (!S_ISDIR(st.st_mode)) {
        // A directory over a file or a symlink replaces it; over a directory, it merges.
        if (auto ok = remove_at(dirfd, name); !ok) return fail(ok.error());
        removed(path);
        if (::mkdirat(dirfd, name.c_str(), 0700) != 0) return fail(host("making the directory", path, errno));
      }
    }
    written(path);
  }
  DirAttrs d{a.uid, a.gid, a.mode, {a.times[0], a.times[1]}};
  dirs_[path] = d;
  return {};
}

Result<void> LayerWriter::symlink(const std::string& path, const Attrs& a, const char* target) {
  // The target is stored as it is, absolute or not: it is resolved inside the sandbox, and
  // nothing here ever follows it.
  if (target == nullptr || *target == '\0') return refuse(path, "is a symlink with no target");
  auto parent = parent_of(path);
  if (!parent) return fail(parent.error());
  const auto& [dirfd, name] = *parent;
  auto made = make_replacing(dirfd, path, name, [&, dirfd = dirfd, &name = name] {
    return ::symlinkat(target, dirfd, name.c_str());
  });
  if (!made) return fail(made.error());
  if (*made < 0) {
    if (errno == ENAMETOOLONG) return refuse(path, "is a symlink whose target is too long");
    return fail(host("making the symlink", path, errno));
  }
  if (auto ok = set_owner_at(dirfd, name, a, path); !ok) return ok;
  if (::utimensat(dirfd, name.c_str(), a.times, AT_SYMLINK_NOFOLLOW) != 0)
    return fail(host("setting the times of", path, errno));
  written(path);
  return {};
}

Result<void> LayerWriter::fifo(const std::string& path, const Attrs& a) {
  auto parent = parent_of(path);
  if (!parent) return fail(parent.error());
  const auto& [dirfd, name] = *parent;
  auto made = make_replacing(dirfd, path, name, [&, dirfd = dirfd, &name = name] {
    return ::mknodat(dirfd, name.c_str(), S_IFIFO | 0600, 0);
  });
  if (!made) return fail(made.error());
  if (*made < 0) return fail(host("making the FIFO", path, errno));
  if (auto ok = set_owner_at(dirfd, name, a, path); !ok) return ok;
  // glibc does AT_SYMLINK_NOFOLLOW through /proc/self/fd, and refuses it on a symlink.
  if (::fchmodat(dirfd, name.c_str(), a.mode, AT_SYMLINK_NOFOLLOW) != 0) return fail(host("chmod of", path, errno));
  if (::utimensat(dirfd, name.c_str(), a.times, AT_SYMLINK_NOFOLLOW) != 0)
    return fail(host("setting the times of", path, errno));
  written(path);
  return {};
}

Result<void> LayerWriter::hardlink(const std::string& path, const char* raw_target) {
  auto target = entry_path(raw_target);
  if (!target) return refuse(path, "is a hard link to " + quote(raw_target) + ", which " + target.error().message);
  if (target->empty() || path.empty()) return refuse(path, "is a hard link to or as the root");
  if (*target == path) {
    written(path);
    return {};
  }
  const auto slash = target->rfind('/');
  const std::string tdir = slash == std::string::npos ? "" : target->substr(0, slash);
  const std::string tname = slash == std::string::npos ? *target : target->substr(slash + 1);
  const std::string to = "is a hard link to " + quote(*target) + ", which ";
  // The target's directory is an fd of our own: parent_of below may replace the cached one.
  auto tfd = tree_.open_dir(tdir, false);
  if (!tfd) {
    if (tfd.error().code == ErrorCode::kInvalidRequest) return refuse(path, to + tfd.error().message);
    return fail(tfd.error());
  }
  struct stat tst {};
  if (!tfd->valid() || ::fstatat(tfd->get(), tname.c_str(), &tst, AT_SYMLINK_NOFOLLOW) != 0)
    return refuse(path, to + "is not in the image before it");
  if (S_ISDIR(tst.st_mode)) return refuse(path, to + "is a directory");
  auto parent = parent_of(path);
  if (!parent) return fail(parent.error());
  const auto& [dirfd, name] = *parent;
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == tst.st_dev &&
      st.st_ino == tst.st_ino) {
    written(path);
    return {};
  }
  // Flags 0: a symlink as the target is linked itself, never followed.
  auto made = make_replacing(dirfd, path, name, [&, dirfd = dirfd, &name = name] {
    return ::linkat(tfd->get(), tname.c_str(), dirfd, name.c_str(), 0);
  });
  if (!made) return fail(made.error());
  if (*made < 0) return fail(host("making the hard link", path, errno));
  written(path);
  return {};
}

Result<void> LayerWriter::whiteout(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  const std::string leaf = slash == std::string::npos ? path : path.substr(slash + 1);
  // The directory a whiteout is in is never made: a whiteout where nothing is deletes nothing.
  auto dirfd = tree_.open_dir(dir, false);
  if (!dirfd) {
    if (dirfd.error().code == ErrorCode::kInvalidRequest) return refuse(path, "is a whiteout that " + dirfd.error().message);
    return fail(dirfd.error());
  }
  if (!dirfd->valid()) return {};
  if (leaf == kOpaque) {
    // An opaque directory hides everything lower layers put in it; this layer's entries stay,
    // whether they came before the marker or come after it.
    auto names = list_dir(dirfd->get());
    if (!names) return fail(names.error());
    for (const auto& n : *names)
      if (auto ok = remove_lower(dirfd->get(), join(dir, n), n); !ok) return ok;
    return {};
  }
  const std::string name = leaf.substr(kWhiteout.size());
  if (name.starts_with(kWhiteout)) return {};  // aufs bookkeeping (.wh..wh.plnk, ...): nothing to apply
  if (name.empty() || name == "." || name == "..")
    return refuse(path, "is a whiteout of " + quote(name) + ", which names no entry");
  return remove_lower(dirfd->get(), join(dir, name), name);
}

Result<void> LayerWriter::remove_lower(int dirfd, const std::string& path, const std::string& name) {
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return {};
    return fail(host("stat of", path, errno));
  }
  if (written_.contains(path) || touched_.contains(path)) {
    // This layer's own: keep it, and remove what lower layers left beneath it.
    if (!S_ISDIR(st.st_mode)) return {};
    UniqueFd d(::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return fail(host("opening", path, errno));
    auto names = list_dir(d.get());
    if (!names) return fail(names.error());
    for (const auto& n : *names)
      if (auto ok = remove_lower(d.get(), join(path, n), n); !ok) return ok;
    return {};
  }
  if (auto ok = remove_at(dirfd, name); !ok) return ok;
  removed(path);
  return {};
}

Result<void> LayerWriter::finish_dirs() {
  // Deepest first: setting a directory's times before its children are done would undo them.
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
    const std::string& path = it->first;
    const DirAttrs& a = it->second;
    UniqueFd fd;
    if (path.empty()) {
      fd.reset(::fcntl(tree_.root(), F_DUPFD_CLOEXEC, 0));
    } else {
      const auto slash = path.rfind('/');
      auto parent = tree_.open_dir(slash == std::string::npos ? "" : path.substr(0, slash), false);
      if (!parent || !parent->valid()) continue;  // replaced since by something we did not follow
      const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
      fd.reset(::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!fd && (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)) continue;
    }
    if (!fd) return fail(host("opening the directory", path, errno));
    if (own_ && ::fchown(fd.get(), static_cast<uid_t>(a.uid), static_cast<gid_t>(a.gid)) != 0)
      return fail(host("chown of", path, errno));
    if (::fchmod(fd.get(), a.mode) != 0) return fail(host("chmod of", path, errno));
    if (::futimens(fd.get(), a.times) != 0) return fail(host("setting the times of", path, errno));
  }
  dirs_.clear();
  return {};
}

}  // namespace b3os::image
