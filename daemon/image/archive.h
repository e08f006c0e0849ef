#pragma once
// The image archive itself (the outer tar): which members it has, small members read whole,
// large ones streamed in the order asked, and every blob checked against its digest as it is
// read. libarchive reads the tar; members are never written anywhere.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
#include "daemon/image/digest.h"
#include "daemon/image/image.h"

struct archive;

namespace b3os::image {

/// libarchive's read handle, freed on scope exit.
struct ArchiveFree {
  void operator()(archive* a) const;
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

/// A reader of tar archives only, compressed with gzip, zstd, xz or bzip2 or not at all.
ArchivePtr new_tar_reader();
/// Adds the decompressors a layer or an archive may use to `a`. Not support_filter_all: that
/// would let libarchive run external programs (lrzip, lzop, grzip) on bytes from outside.
void add_decompressors(archive* a);

/// A member being read: its bytes, block by block. The blocks stay valid until the next call.
class MemberReader {
 public:
  MemberReader(archive* a, std::string name, uint64_t size, std::string_view blob_hex);
  /// The next block of the member; empty at its end.
  Result<std::string_view> next();
  /// Reads what is left and checks the digest of a blob (a member named blobs/sha256/<hex>);
  /// once (ImageArchive::stream calls it after the caller's function, which may call it first).
  Result<void> finish();
  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }

 private:
  archive* a_;
  std::string name_;
  uint64_t size_;
  uint64_t read_ = 0;
  bool done_ = false;
  bool finished_ = false;
  std::string want_hex_;
  std::unique_ptr<Sha256> hash_;
};

/// An image archive on disk, a regular file: its members' names and sizes, read in one pass.
class ImageArchive {
 public:
  /// Reads the member list; 400 if the file is not a tar or has more than `limits.max_entries`.
  static Result<ImageArchive> open(const std::string& path, const Limits& limits);

  /// True if `name` is a member, of any type.
  bool contains(std::string_view name) const;
  /// The regular member `name` stands for, following links between members (docker save
  /// writes a layer it saved already as a symlink to it); 400 naming `what` when absent.
  Result<std::string> resolve(std::string_view name, std::string_view what) const;
  /// The size of a regular member (0 if there is none of this name).
  uint64_t size(const std::string& member) const;
  /// A whole regular member, at most `max` bytes (else 400 naming `what`), digest checked.
  Result<std::string> read(const std::string& member, uint64_t max, std::string_view what);
  /// Reads regular `members` in this order, calling `fn(i, reader)` for each and checking each
  /// blob's digest after it. An uncompressed archive is read at each member's place (seeked
  /// to); a compressed one from its start again whenever the next member lies behind the last
  /// (docker save does not write layers in their order), and refused (400) when that would
  /// decompress more than `limits.max_total_bytes` in all.
  Result<void> stream(const std::vector<std::string>& members,
                      const std::function<Result<void>(size_t, MemberReader&)>& fn);

 private:
  struct Member {
    enum class Kind { kFile, kDir, kSymlink, kHardlink, kOther } kind = Kind::kOther;
    uint64_t size = 0;
    std::string link;
    uint64_t index = 0;    // its place among the members
    int64_t position = 0;  // of its header, in the uncompressed stream
  };
  ImageArchive(std::string path, UniqueFd fd, const Limits& limits)
      : path_(std::move(path)), fd_(std::move(fd)), limits_(limits) {}
  Result<ArchivePtr> reader_at(int64_t position);
  Result<void> stream_compressed(const std::vector<std::string>& members,
                                 const std::function<Result<void>(size_t, MemberReader&)>& fn);

  std::string path_;
  UniqueFd fd_;
  Limits limits_;
  bool compressed_ = false;
  uint64_t stream_bytes_ = 0;  // the archive's size uncompressed
  std::unordered_map<std::string, Member> members_;
  // manifest.json and index.json, read in the first pass: always needed, and at the end of a
  // docker save, where a compressed archive would be read again to reach them.
  std::unordered_map<std::string, std::string> early_;
};

/// A member's name as it is looked up: no leading "/" or "./", no "." or empty components.
std::string member_path(std::string_view raw);

}  // namespace b3os::image
