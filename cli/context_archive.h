#pragma once
// A template build's context as a tarball: a local directory packed into a temporary file, or a
// tarball the user made, sent as it is.

#include <cstdint>
#include <string>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::cli {

/// A temporary file, open, removed when this goes out of scope.
class TempFile {
 public:
  TempFile() = default;
  TempFile(TempFile&& o) noexcept;
  TempFile& operator=(TempFile&& o) noexcept;
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();

  /// Creates an empty file under $TMPDIR (or /tmp) named b3os-STEM-XXXXXX.
  static Result<TempFile> create(const std::string& stem);
  const std::string& path() const { return path_; }
  int fd() const { return fd_.get(); }

 private:
  std::string path_;
  UniqueFd fd_;
};

/// What pack_directory wrote.
struct PackedDirectory {
  TempFile file;
  uint64_t entries = 0;
  uint64_t skipped = 0;  // sockets, FIFOs and devices: not packed
};

/// Packs the tree under `dir` into a pax tarball in a temporary file: entries named relative to
/// `dir` ("a", "a/b.txt"), sorted by name, owner 0:0, mtimes in whole seconds, no atime or
/// ctime, so the same tree packs to the same bytes (and the node reuses a build whose context
/// hashes the same). Symlinks are stored as links, never followed.
Result<PackedDirectory> pack_directory(const std::string& dir);

}  // namespace b3os::cli
