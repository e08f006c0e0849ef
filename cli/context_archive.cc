#include "cli/context_archive.h"

// libarchive, not the system `tar`: the build links it already (image import, daemon/image), it
// writes the same bytes on every machine whatever tar(1) is installed, and it lets us fix the
// order, owners and times that make a context's hash stable.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

namespace b3os::cli {

namespace fs = std::filesystem;

TempFile::TempFile(TempFile&& o) noexcept : path_(std::move(o.path_)), fd_(std::move(o.fd_)) { o.path_.clear(); }

TempFile& TempFile::operator=(TempFile&& o) noexcept {
  if (this != &o) {
    if (!path_.empty()) ::unlink(path_.c_str());
    path_ = std::move(o.path_);
    o.path_.clear();
    fd_ = std::move(o.fd_);
  }
  return *this;
}

TempFile::~TempFile() {
  if (!path_.empty()) ::unlink(path_.c_str());
}

Result<TempFile> TempFile::create(const std::string& stem) {
  const char* dir = std::getenv("TMPDIR");
  std::string name = std::string(dir && *dir ? dir : "/tmp") + "/b3os-" + stem + "-XXXXXX";
  int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) return fail(errno_error(ErrorCode::kInvalidRequest, "creating a temporary file " + name, errno));
  TempFile t;
  t.path_ = std::move(name);
  t.fd_.reset(fd);
  return t;
}

namespace {

struct ArchiveDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

Error archive_failure(archive* a, const std::string& what) {
  const char* msg = archive_error_string(a);
  return Error{ErrorCode::kInvalidRequest, what + ": " + (msg ? msg : "libarchive failed"), 0};
}

// Every path under `dir`, relative to it, sorted; symlinked directories are not entered.
Result<std::vector<std::string>> list_tree(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  if (ec) return fail(ErrorCode::kInvalidRequest, "reading " + dir + ": " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return fail(ErrorCode::kInvalidRequest, "reading " + dir + ": " + ec.message());
    // Lexically: fs::relative would resolve a symlink to where it points.
    out.push_back(it->path().lexically_relative(dir).generic_string());
  }
  if (ec) return fail(ErrorCode::kInvalidRequest, "reading " + dir + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

// Copies st.st_size bytes of a regular file into the archive (fewer if it shrank: libarchive
// pads the entry).
Result<void> write_file_data(archive* a, const std::string& path, const struct stat& st) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(errno_error(ErrorCode::kInvalidRequest, "open " + path, errno));
  std::vector<char> buf(256 << 10);
  auto left = static_cast<uint64_t>(st.st_size);
  while (left > 0) {
    ssize_t n = ::read(fd.get(), buf.data(), std::min<uint64_t>(buf.size(), left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_error(ErrorCode::kInvalidRequest, "read " + path, errno));
    if (n == 0) break;
    if (archive_write_data(a, buf.data(), static_cast<size_t>(n)) < 0) return fail(archive_failure(a, "packing " + path));
    left -= static_cast<uint64_t>(n);
  }
  return {};
}

}  // namespace

Result<PackedDirectory> pack_directory(const std::string& dir) {
  struct stat root{};
  if (::stat(dir.c_str(), &root) != 0) return fail(errno_error(ErrorCode::kInvalidRequest, "stat " + dir, errno));
  if (!S_ISDIR(root.st_mode)) return fail(ErrorCode::kInvalidRequest, dir + " is not a directory");
  auto names = list_tree(dir);
  if (!names) return fail(names.error());

  auto file = TempFile::create("context");
  if (!file) return fail(file.error());
  PackedDirectory out;
  out.file = std::move(*file);

  std::unique_ptr<archive, ArchiveDeleter> a(archive_write_new());
  if (!a) return fail(ErrorCode::kInternal, "libarchive: out of memory");
  if (archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_open_fd(a.get(), out.file.fd()) != ARCHIVE_OK) {
    return fail(archive_failure(a.get(), "writing " + out.file.path()));
  }
  for (const auto& name : *names) {
    const std::string path = dir + "/" + name;
    struct stat st{};
    if (::lstat(path.c_str(), &st) != 0) return fail(errno_error(ErrorCode::kInvalidRequest, "lstat " + path, errno));
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
      ++out.skipped;
      continue;
    }
    std::unique_ptr<archive_entry, EntryDeleter> e(archive_entry_new());
    archive_entry_copy_stat(e.get(), &st);
    archive_entry_copy_pathname(e.get(), name.c_str());
    archive_entry_set_uid(e.get(), 0);
    archive_entry_set_gid(e.get(), 0);
    archive_entry_unset_atime(e.get());
    archive_entry_unset_ctime(e.get());
    archive_entry_unset_birthtime(e.get());
    archive_entry_set_mtime(e.get(), st.st_mtime, 0);
    archive_entry_set_nlink(e.get(), 1);  // hard links are stored as separate files
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      auto target = fs::read_symlink(path, ec);
      if (ec) return fail(ErrorCode::kInvalidRequest, "readlink " + path + ": " + ec.message());
      archive_entry_copy_symlink(e.get(), target.c_str());
    }
    if (!S_ISREG(st.st_mode)) archive_entry_set_size(e.get(), 0);
    if (archive_write_header(a.get(), e.get()) < ARCHIVE_WARN) return fail(archive_failure(a.get(), "packing " + path));
    if (S_ISREG(st.st_mode)) {
      if (auto r = write_file_data(a.get(), path, st); !r) return fail(r.error());
    }
    ++out.entries;
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return fail(archive_failure(a.get(), "writing " + out.file.path()));
  return out;
}

}  // namespace b3os::cli
