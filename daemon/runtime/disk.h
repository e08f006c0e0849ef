#pragma once
// Per-sandbox disks: a sparse image file of disk_gib GiB holding an ext4 filesystem, attached
// to a loop device and mounted, in DISKS_DIR/ID/. gVisor puts the root overlay's writable
// layer in an (unlinked) file in its mount point (--overlay2=root:dir=...): the sandbox's
// file data lives on the host's disk instead of in its memory, and the filesystem's size is a
// hard limit (a write past it gets ENOSPC inside; the sandbox runs on).
//
// Each disk holds one loop device while mounted (autoclear: the device is let go when the
// filesystem is unmounted, or when the last user of a detached mount goes).

#include <string>
#include <vector>

#include "common/result.h"

namespace b3os::runtime {

struct DiskConfig {
  std::string dir;                 // DISKS_DIR: one directory per disk
  std::string mkfs = "mkfs.ext4";  // e2fsprogs
};

/// Layout of one disk's directory.
struct DiskPaths {
  std::string dir, image, mount;
};
DiskPaths disk_paths(const DiskConfig& cfg, const std::string& id);

/// Creates, formats and mounts the disk of `id`; returns its mount point. On failure nothing
/// is left (no mount, loop device, image or directory).
Result<std::string> make_disk(const DiskConfig& cfg, const std::string& id, int gib);
/// Unmounts (lazily if still busy) and deletes the disk of `id`; missing is not an error.
Result<void> remove_disk(const DiskConfig& cfg, const std::string& id);
/// The ids of the disks in cfg.dir.
Result<std::vector<std::string>> list_disks(const DiskConfig& cfg);

}  // namespace b3os::runtime
