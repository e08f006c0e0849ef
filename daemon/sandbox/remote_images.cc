#include "daemon/sandbox/remote_images.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "daemon/image/digest.h"
#include "daemon/objstore/objstore.h"
#include "daemon/objstore/transfer.h"

namespace fs = std::filesystem;

namespace b3os::sandbox {

namespace {

constexpr const char* kFingerprintFile = ".b3os-fingerprint";

/// One fetch or upload of a root at a time per fingerprint on this node: the second waits
/// for the first and then finds it done.
std::mutex& root_lock(const std::string& fp) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<std::mutex>> locks;
  std::lock_guard lk(mu);
  auto& m = locks[fp];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

bool plain_fingerprint(const std::string& fp) {
  return fp.size() == 64 && fp.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

std::string rootfs_fingerprint(const Config& cfg, const std::string& rootfs) {
  const fs::path root(rootfs);
  std::ifstream in(root.parent_path() / kFingerprintFile);
  std::string fp;
  if (in && std::getline(in, fp) && plain_fingerprint(fp)) return fp;
  struct stat st {};
  ::stat(rootfs.c_str(), &st);
  std::ostringstream id;
  id << cfg.node_id << '\n'
     << rootfs << '\n'
     << st.st_ino << ' ' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec << ' ' << st.st_ctim.tv_sec << '.'
     << st.st_ctim.tv_nsec;
  image::Sha256 h;
  const std::string s = id.str();
  h.update(s.data(), s.size());
  return h.hex();
}

Result<std::string> publish_snapshot(const Config& cfg, store::SandboxStore& records, const std::string& snap_id,
                                     const std::string& dir, const std::string& rootfs,
                                     const std::string& template_name, const nlohmann::json& names) {
  auto* os = cfg.object_store;
  if (!os) return std::string();
  const std::string fp = rootfs_fingerprint(cfg, rootfs);
  const std::string root_key = "rootfs/" + fp;
  {
    std::lock_guard lk(root_lock(fp));
    // Touched before it is looked for: a collector removing it finishes first, and none
    // starts before the grace (an hour) is over.
    if (auto t = records.touch_object_root(root_key); !t) return fail(t.error().wrap("snapshot " + snap_id));
    auto have = os->exists("rootfs/" + fp + "/manifest.json");
    if (!have) return fail(have.error());
    if (!*have) {
      spdlog::info("object store: putting the root {} ({}) of template {}", fp.substr(0, 12), rootfs, template_name);
      if (auto r = objstore::push_tree(*os, "rootfs/" + fp, rootfs, cfg.fork_images_dir()); !r)
        return fail(r.error().wrap("putting the root of template " + template_name));
    }
  }
  nlohmann::json extra = {{"snapshot", snap_id}, {"node", cfg.node_id}, {"rootfs", fp}, {"template", template_name}};
  if (names.is_object())
    for (auto& [k, v] : names.items()) extra[k] = v;
  auto m = objstore::push_set(*os, "snapshots/" + snap_id, dir, extra);
  if (!m) return fail(m.error());
  return root_key;
}

Result<FetchedSnapshot> fetch_snapshot(const Config& cfg, const std::string& snap_id, const std::string& held_by) {
  auto* os = cfg.object_store;
  if (!os)
    return fail(ErrorCode::kNodeUnavailable, "snapshot " + snap_id + "'s image is on node " + held_by +
                                                 ", and this node has no object store to fetch it from "
                                                 "(--object-store); retry when that node is back");
  std::error_code ec;
  fs::create_directories(cfg.fork_images_dir(), ec);
  auto m = objstore::read_manifest(*os, "snapshots/" + snap_id, cfg.fork_images_dir());
  if (!m) {
    if (m.error().code == ErrorCode::kNotFound)
      return fail(ErrorCode::kNodeUnavailable, "snapshot " + snap_id + "'s image is on node " + held_by +
                                                   " and not in the object store (it was taken before the node had "
                                                   "one); restore it there");
    return fail(m.error());
  }
  const std::string fp = m->value("rootfs", "");
  if (!plain_fingerprint(fp))
    return fail(ErrorCode::kInternal, "snapshot " + snap_id + "'s manifest names no root it was taken against");
  FetchedSnapshot out;
  out.manifest = *m;
  out.image_dir = cfg.fork_images_dir() + "/" + new_id("fetch");
  fs::create_directories(out.image_dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + out.image_dir + ": " + ec.message());
  if (auto r = objstore::pull_set(*os, "snapshots/" + snap_id, *m, out.image_dir); !r) {
    fs::remove_all(out.image_dir, ec);
    return fail(r.error().wrap("fetching snapshot " + snap_id));
  }
  const std::string cache = cfg.rootfs_cache_dir() + "/" + fp;
  out.rootfs = cache + "/rootfs";
  std::lock_guard lk(root_lock(fp));
  // Marked used now: the collector leaves a root alone for an hour after a restore took it.
  fs::last_write_time(cache + "/" + kFingerprintFile, fs::file_time_type::clock::now(), ec);
  ec.clear();
  if (!fs::exists(cache + "/" + kFingerprintFile)) {
    spdlog::info("object store: fetching the root {} of snapshot {}", fp.substr(0, 12), snap_id);
    fs::create_directories(cache, ec);
    fs::remove_all(out.rootfs, ec);  // a fetch cut short before its rename never leaves one; be sure
    auto r = objstore::pull_tree(*os, "rootfs/" + fp, out.rootfs, cfg.fork_images_dir());
    if (r) {
      std::ofstream f(cache + "/" + kFingerprintFile + std::string(".part"));
      f << fp << "\n";
      f.close();
      fs::rename(cache + "/" + kFingerprintFile + std::string(".part"), cache + "/" + kFingerprintFile, ec);
      if (ec) r = fail(ErrorCode::kInternal, "writing " + cache + "/" + kFingerprintFile + ": " + ec.message());
    }
    if (!r) {
      fs::remove_all(out.image_dir, ec);
      fs::remove_all(cache, ec);
      return fail(r.error().wrap("fetching the root of snapshot " + snap_id));
    }
  }
  return out;
}

Result<void> forget_snapshot(const Config& cfg, const std::string& snap_id) {
  if (!cfg.object_store) return {};
  std::error_code ec;
  fs::create_directories(cfg.fork_images_dir(), ec);
  return objstore::remove_set(*cfg.object_store, "snapshots/" + snap_id, cfg.fork_images_dir());
}

int collect_rootfs_cache(const Config& cfg, const std::set<std::string>& in_use, int64_t idle_ms) {
  int removed = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (auto it = fs::directory_iterator(cfg.rootfs_cache_dir(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string fp = it->path().filename().string();
    const std::string rootfs = it->path().string() + "/rootfs";
    if (in_use.count(rootfs)) continue;
    std::lock_guard lk(root_lock(fp));  // not while a restore fetches or takes it
    std::error_code e2;
    const auto used = fs::last_write_time(it->path() / kFingerprintFile, e2);
    if (e2) continue;  // a fetch in progress (sweep_rootfs_cache takes those cut short)
    if (now - used < std::chrono::milliseconds(idle_ms)) continue;
    fs::remove_all(it->path(), e2);
    if (e2) {
      spdlog::warn("rootfs cache: removing {}: {}", it->path().string(), e2.message());
      continue;
    }
    spdlog::info("rootfs cache: removed the root {} (no sandbox or snapshot here uses it, no restore took it for {} min)",
                 fp.substr(0, 12), idle_ms / 60000);
    ++removed;
  }
  return removed;
}

void sweep_rootfs_cache(const Config& cfg) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(cfg.rootfs_cache_dir(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (fs::exists(it->path() / kFingerprintFile, e2)) continue;
    fs::remove_all(it->path(), e2);
    spdlog::warn("removed {} (a root fetch cut short)", it->path().string());
  }
}

}  // namespace b3os::sandbox
