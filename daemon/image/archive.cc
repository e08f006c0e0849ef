#include "daemon/image/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "daemon/image/manifest.h"
#include "daemon/image/tree.h"

namespace b3os::image {

namespace {

// Read size of the archive file: large reads keep the per-block overhead of libarchive small
// on layers of hundreds of MB; skipped members are seeked over, not read.
constexpr size_t kReadBlock = 1 << 20;
constexpr int kMaxLinkHops = 8;

tl::unexpected<Error> bad(std::string message) { return fail(ErrorCode::kInvalidRequest, "image: " + std::move(message)); }

std::string error_string(archive* a) {
  const char* s = archive_error_string(a);
  return s ? s : "unknown error";
}

// Joins a symlink's target to the directory of the member holding it, resolving ".." the way
// the target would be read on a filesystem whose root is the archive's. Empty if it climbs out.
std::string join_link(std::string_view member, std::string_view target) {
  std::vector<std::string> parts;
  if (!target.starts_with('/')) {
    const std::string dir = member.find('/') == std::string_view::npos ? "" : std::string(member.substr(0, member.rfind('/')));
    size_t s = 0;
    while (s < dir.size()) {
      size_t e = dir.find('/', s);
      if (e == std::string::npos) e = dir.size();
      parts.emplace_back(dir.substr(s, e - s));
      s = e + 1;
    }
  }
  size_t s = 0;
  while (s <= target.size()) {
    size_t e = target.find('/', s);
    if (e == std::string_view::npos) e = target.size();
    const std::string_view c = target.substr(s, e - s);
    if (c == "..") {
      if (parts.empty()) return {};
      parts.pop_back();
    } else if (!c.empty() && c != ".") {
      parts.emplace_back(c);
    }
    s = e + 1;
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "/") + p;
  return out;
}

}  // namespace

void ArchiveFree::operator()(archive* a) const { archive_read_free(a); }

void add_decompressors(archive* a) {
  archive_read_support_filter_none(a);
  archive_read_support_filter_gzip(a);
  archive_read_support_filter_zstd(a);
  archive_read_support_filter_xz(a);
  archive_read_support_filter_bzip2(a);
}

ArchivePtr new_tar_reader() {
  ArchivePtr a(archive_read_new());
  // Tar only (ustar, pax, GNU): support_format_all would put the readers of iso9660, rar, 7z,
  // cab... in front of bytes from outside, for nothing an image holds.
  archive_read_support_format_tar(a.get());
  add_decompressors(a.get());
  return a;
}

std::string member_path(std::string_view raw) {
  std::string out;
  size_t s = 0;
  while (s <= raw.size()) {
    size_t e = raw.find('/', s);
    if (e == std::string_view::npos) e = raw.size();
    const std::string_view c = raw.substr(s, e - s);
    if (!c.empty() && c != ".") {
      if (!out.empty()) out += '/';
      out += c;
    }
    s = e + 1;
  }
  return out;
}

MemberReader::MemberReader(archive* a, std::string name, uint64_t size, std::string_view blob_hex)
    : a_(a), name_(std::move(name)), size_(size), want_hex_(blob_hex) {
  if (!want_hex_.empty()) hash_ = std::make_unique<Sha256>();
}

Result<std::string_view> MemberReader::next() {
  while (!done_) {
    const void* buf = nullptr;
    size_t n = 0;
    la_int64_t offset = 0;
    const int r = archive_read_data_block(a_, &buf, &n, &offset);
    if (r == ARCHIVE_EOF) {
      done_ = true;
      if (read_ != size_) return bad("the archive ends inside " + quote(name_));
      break;
    }
    if (r < ARCHIVE_WARN) return bad("reading " + quote(name_) + " from the archive: " + error_string(a_));
    if (static_cast<uint64_t>(offset) != read_) return bad(quote(name_) + " is a sparse member; blobs are plain files");
    read_ += n;
    if (n == 0) continue;
    if (hash_) hash_->update(buf, n);
    return std::string_view(static_cast<const char*>(buf), n);
  }
  return std::string_view{};
}

Result<void> MemberReader::finish() {
  if (finished_) return {};
  finished_ = true;
  while (!done_) {
    auto b = next();
    if (!b) return fail(b.error());
  }
  if (hash_) {
    const std::string got = hash_->hex();
    if (got != want_hex_)
      return bad("the blob " + quote(name_) + " does not match its digest (its sha256 is " + got + ")");
  }
  return {};
}

Result<ImageArchive> ImageArchive::open(const std::string& path, const Limits& limits) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(host_error("image: opening the archive " + path, errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(host_error("image: stat of the archive " + path, errno));
  // A pipe or a device could not be read twice, and /dev/zero never ends.
  if (!S_ISREG(st.st_mode)) return bad("the archive " + path + " is not a regular file");
  ImageArchive out(path, std::move(fd), limits);
  auto a = out.reader_at(0);
  if (!a) return fail(a.error());
  archive_entry* e = nullptr;
  uint64_t count = 0;
  for (;;) {
    const int r = archive_read_next_header(a->get(), &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      if (count == 0) return bad("the archive is not a tar file (" + error_string(a->get()) + ")");
      return bad("the archive is damaged after " + std::to_string(count) + " members (" + error_string(a->get()) + ")");
    }
    if (count == 0) out.compressed_ = archive_filter_code(a->get(), 0) != ARCHIVE_FILTER_NONE;
    if (++count > limits.max_entries)
      return bad("the archive has more than " + std::to_string(limits.max_entries) + " members");
    // A compressed archive is read by decompressing it, to its end (docker save puts its
    // manifest last): what it may decompress to is bounded before each member's bytes are
    // passed over, by the sizes its headers declare and by what was read, so a small file of
    // compressed zeros cannot hold a thread and a core for hours. The bound is what the layers
    // may hold in all, and their metadata beside them.
    if (out.compressed_) {
      const uint64_t bound = limits.max_total_bytes + 16 * limits.max_metadata_bytes;
      const uint64_t read = static_cast<uint64_t>(std::max<la_int64_t>(0, archive_filter_bytes(a->get(), 0)));
      const uint64_t size = archive_entry_size_is_set(e) ? static_cast<uint64_t>(std::max<la_int64_t>(0, archive_entry_size(e))) : 0;
      if (read > bound || size > bound - std::min(read, bound))
        return bad("the compressed archive decompresses to more than " + std::to_string(bound) +
                   " bytes (the image's layers may hold " + std::to_string(limits.max_total_bytes) + ")");
    }
    const char* raw = archive_entry_pathname(e);
    const std::string name = member_path(raw ? raw : "");
    Member m;
    m.size = archive_entry_size_is_set(e) ? static_cast<uint64_t>(archive_entry_size(e)) : 0;
    m.index = count;
    m.position = archive_read_header_position(a->get());
    if (const char* hl = archive_entry_hardlink(e)) {
      m.kind = Member::Kind::kHardlink;
      m.link = member_path(hl);
    } else if (archive_entry_filetype(e) == AE_IFREG) {
      m.kind = Member::Kind::kFile;
    } else if (archive_entry_filetype(e) == AE_IFDIR) {
      m.kind = Member::Kind::kDir;
    } else if (archive_entry_filetype(e) == AE_IFLNK) {
      m.kind = Member::Kind::kSymlink;
      const char* t = archive_entry_symlink(e);
      m.link = join_link(name, t ? t : "");
    }
    auto [it, fresh] = out.members_.try_emplace(name, m);
    if (!fresh) {
      // Which copy of a name tar would keep is a question no image should ask.
      if (it->second.kind == Member::Kind::kDir && m.kind == Member::Kind::kDir) continue;
      return bad("the archive has two members named " + quote(name));
    }
    if ((name == "manifest.json" || name == "index.json") && m.kind == Member::Kind::kFile &&
        m.size <= limits.max_metadata_bytes) {
      MemberReader reader(a->get(), name, m.size, "");
      std::string text;
      for (;;) {
        auto b = reader.next();
        if (!b) return fail(b.error());
        if (b->empty()) break;
        text.append(*b);
      }
      out.early_[name] = std::move(text);
    }
  }
  out.stream_bytes_ = static_cast<uint64_t>(archive_filter_bytes(a->get(), 0));
  return out;
}

Result<ArchivePtr> ImageArchive::reader_at(int64_t position) {
  if (::lseek(fd_.get(), position, SEEK_SET) != position)
    return fail(host_error("image: seeking in the archive " + path_, errno));
  ArchivePtr a = new_tar_reader();
  if (archive_read_open_fd(a.get(), fd_.get(), kReadBlock) != ARCHIVE_OK)
    return bad("the archive is not a tar file (" + error_string(a.get()) + ")");
  return a;
}

bool is_compressed(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  ArchivePtr a = new_tar_reader();
  if (archive_read_open_fd(a.get(), fd.get(), kReadBlock) != ARCHIVE_OK) return false;
  archive_entry* e = nullptr;
  // The first header is 512 bytes of the uncompressed stream: a few blocks of input at most.
  if (archive_read_next_header(a.get(), &e) < ARCHIVE_WARN) return false;
  return archive_filter_code(a.get(), 0) != ARCHIVE_FILTER_NONE;
}

bool ImageArchive::contains(std::string_view name) const { return members_.contains(member_path(name)); }

Result<std::string> ImageArchive::resolve(std::string_view name, std::string_view what) const {
  std::string cur = member_path(name);
  for (int hop = 0; hop <= kMaxLinkHops; ++hop) {
    auto it = members_.find(cur);
    if (cur.empty() || it == members_.end())
      return bad(std::string(what) + " names " + quote(name) + ", which is not in the archive");
    switch (it->second.kind) {
      case Member::Kind::kFile:
        return cur;
      case Member::Kind::kSymlink:
      case Member::Kind::kHardlink:
        cur = it->second.link;
        break;
      default:
        return bad(std::string(what) + " names " + quote(name) + ", which is not a file in the archive");
    }
  }
  return bad(std::string(what) + " names " + quote(name) + ", a chain of more than 8 links in the archive");
}

uint64_t ImageArchive::size(const std::string& member) const {
  auto it = members_.find(member);
  return it == members_.end() || it->second.kind != Member::Kind::kFile ? 0 : it->second.size;
}

Result<std::string> ImageArchive::read(const std::string& member, uint64_t max, std::string_view what) {
  if (size(member) > max)
    return bad(std::string(what) + " is " + std::to_string(size(member)) + " bytes, more than the " + std::to_string(max) +
               " allowed for image metadata");
  if (auto it = early_.find(member); it != early_.end()) return it->second;
  std::string out;
  auto r = stream({member}, [&](size_t, MemberReader& m) -> Result<void> {
    for (;;) {
      auto b = m.next();
      if (!b) return fail(b.error());
      if (b->empty()) return {};
      out.append(*b);
    }
  });
  if (!r) return fail(r.error());
  return out;
}

Result<void> ImageArchive::stream(const std::vector<std::string>& members,
                                  const std::function<Result<void>(size_t, MemberReader&)>& fn) {
  for (const auto& name : members) {
    auto it = members_.find(name);
    if (it == members_.end() || it->second.kind != Member::Kind::kFile)
      return bad(quote(name) + " is not a file in the archive");
  }
  if (compressed_) return stream_compressed(members, fn);
  // Uncompressed: each member's header is where the first pass saw it.
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members_.at(members[i]);
    auto a = reader_at(m.position);
    if (!a) return fail(a.error());
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(a->get(), &e);
    const char* raw = r >= ARCHIVE_WARN ? archive_entry_pathname(e) : nullptr;
    if (raw == nullptr || member_path(raw) != members[i])
      return fail(ErrorCode::kInternal, "image: the archive " + path_ + " changed while it was read");
    MemberReader reader(a->get(), members[i], m.size, blob_hex(members[i]));
    if (auto ok = fn(i, reader); !ok) return ok;
    if (auto ok = reader.finish(); !ok) return ok;
  }
  return {};
}

Result<void> ImageArchive::stream_compressed(const std::vector<std::string>& members,
                                             const std::function<Result<void>(size_t, MemberReader&)>& fn) {
  // A compressed stream cannot be seeked: one pass from the start per run of members in order.
  uint64_t passes = members.empty() ? 0 : 1;
  for (size_t i = 1; i < members.size(); ++i)
    if (members_.at(members[i]).index <= members_.at(members[i - 1]).index) ++passes;
  if (passes > 1 && passes * stream_bytes_ > limits_.max_total_bytes)
    return bad("the archive is compressed and its layers are not stored in their order: reading them would "
               "decompress it " + std::to_string(passes) + " times, more than the image limit of " +
               std::to_string(limits_.max_total_bytes) + " bytes; decompress it first (gunzip, unzstd)");
  size_t next = 0;
  while (next < members.size()) {
    auto a = reader_at(0);
    if (!a) return fail(a.error());
    bool progressed = false;
    archive_entry* e = nullptr;
    for (;;) {
      const int r = archive_read_next_header(a->get(), &e);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return bad("reading the archive: " + error_string(a->get()));
      if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) != nullptr) continue;
      const char* raw = archive_entry_pathname(e);
      if (member_path(raw ? raw : "") != members[next]) continue;
      MemberReader reader(a->get(), members[next], size(members[next]), blob_hex(members[next]));
      if (auto ok = fn(next, reader); !ok) return ok;
      if (auto ok = reader.finish(); !ok) return ok;
      progressed = true;
      if (++next == members.size()) return {};
    }
    if (!progressed) return fail(ErrorCode::kInternal, "image: the archive " + path_ + " changed while it was read");
  }
  return {};
}

}  // namespace b3os::image
