#pragma once
// Container image archives into root filesystems: a `docker save` tarball or an OCI image
// layout tarball, its layers applied in order into an empty directory, nothing ever written
// outside it (docs/image-import.md).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace b3os::image {

/// What to do with setuid and setgid bits on files (directories keep setgid: it only chooses
/// the group of new files).
enum class Setuid { kAllow, kStrip, kRefuse };

/// Bounds on what one import may take; an image past one is refused (400) while it is read.
struct Limits {
  uint64_t max_layer_bytes = uint64_t{4} << 30;   // uncompressed bytes of one layer
  uint64_t max_total_bytes = uint64_t{16} << 30;  // uncompressed bytes of all layers together
  uint64_t max_entries = 1'000'000;               // entries of all layers together
  uint64_t max_metadata_bytes = 1 << 20;          // manifest.json / index.json / config json each
  Setuid setuid = Setuid::kAllow;
};

/// The image config's defaults for a container ("config" object; empty when absent), and what
/// the import applied.
struct Config {
  std::vector<std::string> entrypoint, cmd;
  std::vector<std::string> env;  // "K=V" as in the image
  std::string workdir, user;
  std::vector<std::string> exposed_ports;  // "8080/tcp"
  std::string format;                      // "docker-save" or "oci-layout"
  int layers = 0;
  uint64_t bytes = 0;    // uncompressed layer bytes read (holes of sparse files included)
  uint64_t entries = 0;  // layer entries applied, whiteouts included
};

/// Reads the image archive at `archive` (a regular file) and applies its layers in order into
/// `rootfs`, an existing empty directory. Errors are kInvalidRequest with a message starting
/// "image: " that names what is wrong (which layer, which entry), kCapacityUnavailable when the
/// host's disk is full, kInternal for other host failures. On error `rootfs` may hold partial
/// content; the caller removes it (remove_tree). `log` hears one line per layer.
Result<Config> import(const std::string& archive, const std::string& rootfs, const Limits& limits,
                      const std::function<void(std::string_view)>& log = {});

/// Reads only the archive's metadata (manifest or index, config, the layers named): what a
/// request can be told at once. The layers' entries are judged by import().
Result<Config> inspect(const std::string& archive, const Limits& limits);

/// True if the archive at `archive` is compressed as a whole (gzip, zstd, xz, bzip2): its
/// metadata can be reached only by decompressing it, to its end for docker save, so a request
/// leaves its inspection to the build. Reads its first member's header only; false when the
/// file cannot be read as an archive at all (inspect() then says why, quickly).
bool is_compressed(const std::string& archive);

/// Deletes `path` and everything under it without following symlinks (a symlink is removed,
/// never its target). Absent is success.
Result<void> remove_tree(const std::string& path);

}  // namespace b3os::image
