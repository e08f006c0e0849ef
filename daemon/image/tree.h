#pragma once
// A directory tree written through file descriptors: every path is looked up beneath the
// tree's root without following a symlink, so nothing done through a Tree reaches outside it.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::image {

/// The root directory of an import, and lookups beneath it. Paths are relative and normalized
/// ("a/b", "" is the root; no ".", "..", or empty components). A lookup that meets a symlink or
/// a non-directory is a kInvalidRequest whose message is a fragment naming the component
/// ("goes through the symlink \"etc\""), for the caller to put after the entry's name.
class Tree {
 public:
  /// Opens `path`, which must be an empty directory (kInternal otherwise: the caller's fault).
  static Result<Tree> open(const std::string& path);

  /// The root's fd (read-only, a directory).
  int root() const { return root_.get(); }

  /// The directory `path` as an O_PATH fd owned by the Tree, valid until the next call or
  /// forget() of it; -1 when it is absent and `create` is false. With `create`, missing
  /// directories are made (mode 0755) and `made` hears each.
  Result<int> dir(std::string_view path, bool create, const std::function<void(std::string_view)>& made = {});
  /// The same, as an fd of the caller's (invalid when absent).
  Result<UniqueFd> open_dir(std::string_view path, bool create,
                            const std::function<void(std::string_view)>& made = {});
  /// Says that `path` was removed or replaced: a cached lookup at or beneath it is dropped.
  void forget(std::string_view path);

 private:
  explicit Tree(UniqueFd root) : root_(std::move(root)) {}
  Result<UniqueFd> walk(std::string_view path, bool create, const std::function<void(std::string_view)>& made);

  UniqueFd root_;
  std::string cached_path_;
  UniqueFd cached_fd_;
};

/// The names in the directory `dirfd` (not "." or "..").
Result<std::vector<std::string>> list_dir(int dirfd);
/// Removes `name` in `dirfd`, with everything under it if it is a directory, never following a
/// symlink. Absent is success. Keeps one fd open per level of the tree.
Result<void> remove_at(int dirfd, const std::string& name);
/// The error for a failed host call: kCapacityUnavailable when the disk is full, else kInternal.
Error host_error(std::string_view context, int err);

}  // namespace b3os::image
