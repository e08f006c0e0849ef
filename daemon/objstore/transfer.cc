#include "daemon/objstore/transfer.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/json.h"
#include "common/ids.h"
#include "common/scope_exit.h"
#include "daemon/image/digest.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace b3os::objstore {

namespace {

constexpr size_t kMaxManifest = 1 << 20;
constexpr const char* kManifest = "manifest.json";

bool plain_name(const std::string& n) {
  if (n.empty() || n.size() > 200 || n == "." || n == ".." || n == kManifest) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

/// A scratch file of ours in `dir`, removed when this goes.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& dir) : path_(dir + "/.objstore-" + new_id("t")) {}
  ~ScratchFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

tl::unexpected<Error> internal(const std::string& what) { return fail(ErrorCode::kInternal, what); }

/// A name in a tree's archive that stays inside it: relative, no ".." segment.
bool inside_name(std::string_view n) {
  if (n.empty() || n.front() == '/') return false;
  size_t i = 0;
  while (i <= n.size()) {
    const size_t j = std::min(n.find('/', i), n.size());
    if (n.substr(i, j - i) == "..") return false;
    i = j + 1;
  }
  return true;
}

std::string archive_message(archive* a) {
  const char* m = archive_error_string(a);
  return m ? m : "unknown libarchive error";
}

}  // namespace

Result<std::pair<std::string, uint64_t>> file_sha256(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(ErrorCode::kInternal, "opening " + path + ": " + std::strerror(errno));
  ScopeExit close_fd([fd] { ::close(fd); });
  image::Sha256 h;
  std::vector<char> buf(1 << 20);
  uint64_t size = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kInternal, "reading " + path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    size += static_cast<uint64_t>(n);
  }
  return std::make_pair(h.hex(), size);
}

Result<json> push_set(ObjectStore& os, const std::string& prefix, const std::string& dir, const json& extra) {
  json files = json::array();
  std::vector<std::string> put;
  auto undo = [&] {
    for (auto& k : put) (void)os.remove(k);
  };
  std::vector<fs::path> entries;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) entries.push_back(e.path());
  if (ec) return fail(ErrorCode::kInternal, "listing " + dir + ": " + ec.message());
  std::sort(entries.begin(), entries.end());
  for (auto& p : entries) {
    const std::string name = p.filename().string();
    if (!plain_name(name)) continue;  // nothing of ours has such names; never put them
    auto sum = file_sha256(p.string());
    if (!sum) {
      undo();
      return fail(sum.error());
    }
    const std::string key = prefix + "/" + name;
    if (auto r = os.put_file(key, p.string(), sum->first); !r) {
      undo();
      return fail(r.error());
    }
    put.push_back(key);
    files.push_back({{"name", name}, {"size", sum->second}, {"sha256", sum->first}});
  }
  json manifest = extra.is_object() ? extra : json::object();
  manifest["version"] = 1;
  manifest["files"] = files;
  ScratchFile mf(dir);
  {
    std::ofstream out(mf.path(), std::ios::binary | std::ios::trunc);
    out << manifest.dump();
    if (!out.flush()) {
      undo();
      return fail(ErrorCode::kInternal, "writing " + mf.path());
    }
  }
  auto sum = file_sha256(mf.path());
  if (!sum) {
    undo();
    return fail(sum.error());
  }
  if (auto r = os.put_file(prefix + "/" + kManifest, mf.path(), sum->first); !r) {
    undo();
    return fail(r.error());
  }
  return manifest;
}

Result<json> read_manifest(ObjectStore& os, const std::string& prefix, const std::string& scratch_dir) {
  ScratchFile mf(scratch_dir);
  if (auto r = os.get_file(prefix + "/" + kManifest, mf.path()); !r) return fail(r.error());
  std::error_code ec;
  const auto size = fs::file_size(mf.path(), ec);
  if (ec || size > kMaxManifest) return fail(ErrorCode::kInternal, prefix + "/manifest.json is larger than 1 MiB");
  std::ifstream in(mf.path(), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (json_depth(text) > 16) return fail(ErrorCode::kInternal, prefix + "/manifest.json nests too deep");
  json m = json::parse(text, nullptr, false);
  if (!m.is_object() || m.value("version", 0) != 1 || !m.contains("files") || !m["files"].is_array())
    return fail(ErrorCode::kInternal, prefix + "/manifest.json is not a version 1 manifest");
  for (auto& f : m["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !plain_name(f["name"].get<std::string>()) ||
        !f.contains("size") || !f["size"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string() ||
        f["sha256"].get<std::string>().size() != 64)
      return fail(ErrorCode::kInternal, prefix + "/manifest.json lists a file it cannot: " + f.dump().substr(0, 200));
  }
  return m;
}

Result<void> pull_set(ObjectStore& os, const std::string& prefix, const json& manifest, const std::string& dir) {
  for (auto& f : manifest["files"]) {
    const std::string name = f["name"].get<std::string>();
    const std::string path = dir + "/" + name;
    if (auto r = os.get_file(prefix + "/" + name, path); !r) {
      // A file the manifest names is not there: the set is broken, not the store down.
      if (r.error().code == ErrorCode::kNotFound) return internal(prefix + "/" + name + " is missing from its set");
      return r;
    }
    auto sum = file_sha256(path);
    if (!sum) return fail(sum.error());
    if (sum->first != f["sha256"].get<std::string>() || sum->second != f["size"].get<uint64_t>())
      return internal(prefix + "/" + name + " does not match its manifest (SHA-256 " + sum->first.substr(0, 12) + "..., " +
                      std::to_string(sum->second) + " bytes; the manifest says " +
                      f["sha256"].get<std::string>().substr(0, 12) + "..., " + std::to_string(f["size"].get<uint64_t>()) +
                      ")");
  }
  return {};
}

Result<void> remove_set(ObjectStore& os, const std::string& prefix, const std::string& scratch_dir) {
  auto m = read_manifest(os, prefix, scratch_dir);
  if (!m) return m.error().code == ErrorCode::kNotFound ? Result<void>() : fail(m.error());
  if (auto r = os.remove(prefix + "/" + kManifest); !r) return r;
  for (auto& f : (*m)["files"])
    if (auto r = os.remove(prefix + "/" + f["name"].get<std::string>()); !r) return r;
  return {};
}

Result<void> push_tree(ObjectStore& os, const std::string& prefix, const std::string& tree,
                       const std::string& scratch_dir) {
  const std::string stage = scratch_dir + "/.tree-" + new_id("t");
  std::error_code ec;
  fs::create_directories(stage, ec);
  if (ec) return internal("creating " + stage + ": " + ec.message());
  ScopeExit rm_stage([&] {
    std::error_code e2;
    fs::remove_all(stage, e2);
  });
  const std::string tar = stage + "/tree.tar";
  archive* disk = archive_read_disk_new();
  archive* out = archive_write_new();
  ScopeExit free_archives([&] {
    archive_read_free(disk);
    archive_write_free(out);
  });
  archive_read_disk_set_symlink_physical(disk);  // a link is stored as a link, never followed
  archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
  archive_write_set_format_pax(out);  // long names, xattrs and times to the nanosecond
  // Names as the bytes they are: b3osd runs in the C locale, and a root holds names that
  // are not ASCII (the CA bundle's, for one).
  archive_write_set_options(out, "hdrcharset=BINARY");
  if (archive_write_open_filename(out, tar.c_str()) != ARCHIVE_OK)
    return internal("writing " + tar + ": " + archive_message(out));
  if (archive_read_disk_open(disk, tree.c_str()) != ARCHIVE_OK)
    return internal("reading " + tree + ": " + archive_message(disk));
  std::vector<char> buf(1 << 20);
  for (;;) {
    archive_entry* e = archive_entry_new();
    ScopeExit free_entry([e] { archive_entry_free(e); });
    const int r = archive_read_next_header2(disk, e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return internal("reading " + tree + ": " + archive_message(disk));
    archive_read_disk_descend(disk);
    std::string name = archive_entry_pathname(e);
    name = "." + name.substr(std::min(name.size(), tree.size()));  // relative to the tree's root
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_uname(e, nullptr);  // numeric owners: the same ids on every node
    archive_entry_set_gname(e, nullptr);
    if (archive_write_header(out, e) != ARCHIVE_OK) return internal("writing " + tar + ": " + archive_message(out));
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_size(e) == 0) continue;
    const char* src = archive_entry_sourcepath(e);
    const int fd = ::open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return internal("reading " + std::string(src) + ": " + std::strerror(errno));
    ScopeExit close_fd([fd] { ::close(fd); });
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return internal("reading " + std::string(src) + ": " + std::strerror(errno));
      if (n == 0) break;
      if (archive_write_data(out, buf.data(), static_cast<size_t>(n)) < 0)
        return internal("writing " + tar + ": " + archive_message(out));
    }
  }
  if (archive_write_close(out) != ARCHIVE_OK) return internal("writing " + tar + ": " + archive_message(out));
  auto m = push_set(os, prefix, stage);
  if (!m) return fail(m.error());
  return {};
}

Result<void> pull_tree(ObjectStore& os, const std::string& prefix, const std::string& tree,
                       const std::string& scratch_dir) {
  auto m = read_manifest(os, prefix, scratch_dir);
  if (!m) return fail(m.error());
  if ((*m)["files"].size() != 1 || (*m)["files"][0]["name"] != "tree.tar")
    return internal(prefix + " is not a tree (its manifest lists no tree.tar)");
  const std::string stage = scratch_dir + "/.tree-" + new_id("t");
  const std::string unpacked = tree + ".part-" + new_id("t");
  std::error_code ec;
  fs::create_directories(stage, ec);
  if (!ec) fs::create_directories(unpacked, ec);  // ours: a new name, made empty here
  if (ec) return internal("creating " + stage + ": " + ec.message());
  bool done = false;
  ScopeExit cleanup([&] {
    std::error_code e2;
    fs::remove_all(stage, e2);
    if (!done) fs::remove_all(unpacked, e2);
  });
  if (auto r = pull_set(os, prefix, *m, stage); !r) return r;
  const std::string tar = stage + "/tree.tar";
  archive* in = archive_read_new();
  archive* disk = archive_write_disk_new();
  ScopeExit free_archives([&] {
    archive_read_free(in);
    archive_write_free(disk);
  });
  archive_read_support_format_tar(in);
  // Everything the sandbox's root had (owners, modes, times, xattrs); nothing outside it.
  archive_write_disk_set_options(disk, ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_OWNER |
                                           ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                           ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  if (archive_read_open_filename(in, tar.c_str(), 1 << 20) != ARCHIVE_OK)
    return internal("reading " + tar + ": " + archive_message(in));
  for (;;) {
    archive_entry* e = nullptr;
    const int r = archive_read_next_header(in, &e);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return internal("reading " + tar + ": " + archive_message(in));
    // Names are made relative to `unpacked` here, so libarchive sees absolute paths: its own
    // check of them is off, and ours refuses any name that is absolute or climbs out.
    const std::string name = archive_entry_pathname(e);
    const char* hl = archive_entry_hardlink(e);
    if (!inside_name(name) || (hl && !inside_name(hl))) return internal(prefix + ": the archive names " + name.substr(0, 200));
    archive_entry_set_pathname(e, (unpacked + "/" + name).c_str());
    if (hl) archive_entry_set_hardlink(e, (unpacked + "/" + hl).c_str());
    if (archive_write_header(disk, e) != ARCHIVE_OK)
      return internal("unpacking " + name + ": " + archive_message(disk));
    const void* block;
    size_t size;
    la_int64_t offset;
    for (;;) {
      const int rr = archive_read_data_block(in, &block, &size, &offset);
      if (rr == ARCHIVE_EOF) break;
      if (rr != ARCHIVE_OK) return internal("reading " + tar + ": " + archive_message(in));
      if (archive_write_data_block(disk, block, size, offset) != ARCHIVE_OK)
        return internal("unpacking " + name + ": " + archive_message(disk));
    }
    if (archive_write_finish_entry(disk) != ARCHIVE_OK) return internal("unpacking " + name + ": " + archive_message(disk));
  }
  if (archive_write_close(disk) != ARCHIVE_OK) return internal("unpacking " + tar + ": " + archive_message(disk));
  fs::rename(unpacked, tree, ec);
  if (ec) return internal("renaming " + unpacked + " to " + tree + ": " + ec.message());
  done = true;
  return {};
}

}  // namespace b3os::objstore
