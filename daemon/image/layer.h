#pragma once
// Applying image layers (tar streams, compressed or not) to a root directory, lowest first:
// entries made and replaced with *at() calls beneath the root's fd, never through a symlink;
// whiteouts deleting what lower layers left; every limit checked while the layer is read.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/result.h"
#include "daemon/image/image.h"
#include "daemon/image/tree.h"

struct archive;
struct archive_entry;

namespace b3os::image {

/// The bytes of one layer as they are stored (maybe compressed), block by block: the next
/// block, empty at the end. A block stays valid until the next call.
using BlockSource = std::function<Result<std::string_view>()>;

/// What applying one layer read and did.
struct AppliedLayer {
  uint64_t bytes = 0;    // uncompressed bytes read, holes of sparse files included
  uint64_t entries = 0;  // tar entries, whiteouts included
  std::string diff_id;   // sha256 hex of the uncompressed tar, when asked for
};

/// Writes layers into one root directory. Not thread-safe; one import at a time.
class LayerWriter {
 public:
  /// Opens `rootfs`, an existing empty directory.
  static Result<LayerWriter> open(const std::string& rootfs, const Limits& limits);

  /// Applies the next layer; `stored_size` is 0 for an empty member (an empty layer). `name`
  /// says which layer in messages ("layer 2 of 3 (blobs/sha256/...)").
  Result<AppliedLayer> apply(const BlockSource& source, uint64_t stored_size, const std::string& name,
                             bool want_diff_id);

  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t total_entries() const { return total_entries_; }

 private:
  struct DirAttrs {
    int64_t uid = 0, gid = 0;
    mode_t mode = 0755;
    struct timespec times[2];
  };
  struct Attrs {
    int64_t uid = 0, gid = 0;
    mode_t mode = 0;
    struct timespec times[2];
  };
  struct Pipeline;

  LayerWriter(Tree tree, const Limits& limits);
  static ssize_t read_stored(archive* a, void* self, const void** buf);
  static ssize_t read_tar(archive* a, void* self, const void** buf);

  Result<void> entry(archive* tar, archive_entry* e);
  Result<void> regular(archive* tar, const std::string& path, const Attrs& attrs, int64_t size);
  Result<void> directory(const std::string& path, const Attrs& attrs);
  Result<void> symlink(const std::string& path, const Attrs& attrs, const char* target);
  Result<void> fifo(const std::string& path, const Attrs& attrs);
  Result<void> hardlink(const std::string& path, const char* target);
  Result<void> whiteout(const std::string& path);
  Result<void> remove_lower(int dirfd, const std::string& path, const std::string& name);
  Result<void> finish_dirs();

  /// The parent directory of `path` (made if missing) and the last component.
  Result<std::pair<int, std::string>> parent_of(const std::string& path);
  /// Runs `make` (an openat/mkdirat/symlinkat... of `name` in `dirfd`); if the name is taken,
  /// removes what is there (a directory with its content) and runs it once more.
  Result<int> make_replacing(int dirfd, const std::string& path, const std::string& name, const std::function<int()>& make);
  void removed(const std::string& path);
  void written(const std::string& path);
  Result<void> charge(uint64_t n);
  Result<void> set_owner_at(int dirfd, const std::string& name, const Attrs& attrs, const std::string& path);

  tl::unexpected<Error> refuse(const std::string& path, const std::string& why) const;
  Error host(const std::string& doing, const std::string& path, int err) const;

  Tree tree_;
  Limits limits_;
  bool own_;  // ownership is applied only when running as root
  uint64_t total_bytes_ = 0, total_entries_ = 0;

  // The layer being applied.
  std::string layer_;
  uint64_t layer_bytes_ = 0;
  std::optional<Error> stopped_;             // why a libarchive callback gave up
  std::unordered_set<std::string> written_;  // paths this layer wrote
  std::unordered_set<std::string> touched_;  // their ancestors
  std::map<std::string, DirAttrs> dirs_;     // directories' modes and times, set at the end
};

/// An entry's path as written beneath the root: a leading "/" and "." or empty components
/// dropped, as tar does; a ".." component, more than 256 components or 4096 bytes refused
/// (kInvalidRequest, a message fragment).
Result<std::string> entry_path(std::string_view raw);

}  // namespace b3os::image
