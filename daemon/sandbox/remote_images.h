#pragma once
// Snapshots through a cluster's object storage (docs/cluster.md, "Snapshots move"): a node
// that takes a snapshot puts its image there, and the template root it was taken against
// (once per root); a node that restores a snapshot it does not hold fetches both, checking
// every file against its manifest. A single node (no object store) does none of this.
//
// Keys: snapshots/SNAPSHOT_ID/{files, manifest.json} and rootfs/FINGERPRINT/{tree.tar,
// manifest.json}. A root's fingerprint names the exact files (the node and path it was
// built at, and the root's inode and times): a restored sandbox's root must be the very
// files its memory image was taken against (gVisor checks sizes and times at restore), so a
// template root rebuilt anywhere is another root.

#include <cstdint>
#include <set>
#include <string>

#include "common/result.h"
#include "daemon/sandbox/config.h"
#include "daemon/store/store.h"

namespace b3os::sandbox {

/// The fingerprint of the template root at `rootfs` on this node: what a root fetched from
/// another node was (its cache directory says), else a digest of this node, the path and the
/// root directory's inode and times.
std::string rootfs_fingerprint(const Config& cfg, const std::string& rootfs);

/// Puts the image in `dir` as snapshot `snap_id`, after the root it needs if the store does
/// not have it yet (the root touched in `records` first, so the collector leaves it). Returns
/// the root's key ("rootfs/FP"), for the snapshot's record. Errors are the object store's
/// (kNodeUnavailable when it is down) or the records store's; on failure nothing of the
/// snapshot stays in the store (its root may: it is whole or absent).
/// `names`: more fields for its manifest (a move names its sandbox and project there).
Result<std::string> publish_snapshot(const Config& cfg, store::SandboxStore& records, const std::string& snap_id,
                                     const std::string& dir, const std::string& rootfs,
                                     const std::string& template_name,
                                     const nlohmann::json& names = nlohmann::json::object());

/// A snapshot's image fetched for one restore, and the root to restore it on.
struct FetchedSnapshot {
  std::string image_dir;  // under fork_images_dir(): remove it after the restore
  std::string rootfs;
  nlohmann::json manifest;  // what its publisher wrote (snapshot, node, rootfs, template, ...)
};

/// Fetches snapshot `snap_id` (held by `held_by`, for errors) from the object store, and its
/// root unless this node has it cached. kNodeUnavailable when there is no object store or it
/// cannot be reached; kInternal when the store's copy is missing or does not match.
Result<FetchedSnapshot> fetch_snapshot(const Config& cfg, const std::string& snap_id, const std::string& held_by);

/// Removes snapshot `snap_id`'s objects (the roots stay: other snapshots may need them).
Result<void> forget_snapshot(const Config& cfg, const std::string& snap_id);

/// At start: removes roots whose fetch was cut short.
void sweep_rootfs_cache(const Config& cfg);

/// Removes the cached roots (rootfs_cache_dir()) that nothing in `in_use` (the roots of this
/// node's live sandboxes and of the snapshots it holds) runs on and that no restore took for
/// `idle_ms` (each restore that takes a cached root marks it used). Returns how many went.
int collect_rootfs_cache(const Config& cfg, const std::set<std::string>& in_use, int64_t idle_ms);

}  // namespace b3os::sandbox
