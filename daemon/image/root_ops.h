#pragma once
// Host-side operations on a tree a tenant wrote: a template's root (an image's layers, a
// build's result, a `from:` parent's copy), a build's root on its disk. b3osd runs as root, so
// a path through such a tree may lead anywhere on the host (`workspace -> /etc`); every call
// here opens the tree's root once, by a path that is ours, and works beneath that fd without
// following a symlink. This is the one place in daemon/template, daemon/objstore,
// daemon/sandbox and daemon/image that changes a mode, an owner or a file's content inside
// such a tree (tests/root_ops_check.py keeps it so).

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::image {

/// A tenant's root, opened by its path (which b3osd made). Paths given to its methods are
/// relative and normalized ("a/b"; no ".", "..", or empty components); a symlink met on the
/// way, or where the entry itself would be, is never followed: the call leaves it as it is
/// (the sandbox resolves it inside, where it can reach nothing of the host).
class TenantRoot {
 public:
  static Result<TenantRoot> open(const std::string& path);

  int fd() const { return root_.get(); }

  /// Makes the directory `rel` with `mode` when nothing is at that name. True when `rel` is a
  /// real directory afterwards (made now or before), false when something else is there (a
  /// symlink, a file) or its parent is not a real directory.
  Result<bool> ensure_dir(std::string_view rel, mode_t mode = 0755);
  /// fchmod of `rel` when it is a real directory; false (and nothing changed) otherwise.
  Result<bool> chmod_dir(std::string_view rel, mode_t mode);
  /// Creates the empty regular file `rel` when nothing is at that name (its parent a real
  /// directory); false when something is there already or the parent is not a directory.
  Result<bool> ensure_file(std::string_view rel, mode_t mode = 0644);
  /// Copies the host file `src` (b3osd's own) to `rel`, replacing a regular file or symlink
  /// there (unlinked, never written through); its parent must be a real directory.
  Result<void> copy_in(const std::string& src, std::string_view rel, mode_t mode = 0644);

 private:
  explicit TenantRoot(UniqueFd root) : root_(std::move(root)) {}
  /// The parent directory of `rel` (an fd of the caller's; invalid when it is absent, a
  /// symlink or not a directory) and the last name of `rel`.
  Result<UniqueFd> parent_of(std::string_view rel, std::string* name) const;

  UniqueFd root_;
};

}  // namespace b3os::image
