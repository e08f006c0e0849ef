#pragma once
// Sets of files in an object store, each set complete once its manifest is there
// (docs/cluster.md, "Snapshots move"):
//   PREFIX/FILE ...            each file of a local directory (flat: a snapshot's image)
//   PREFIX/manifest.json       {"version": 1, "files": [{"name", "size", "sha256"}], ...}: put
//                              last, removed first, so a reader never takes a half set
// and a directory tree (a template's root filesystem) as a set of one tar archive, written
// and read with libarchive, keeping modes, owners, times and extended attributes (a restored
// sandbox's root must be the same files, times included, as the one it was saved against).

#include <string>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/objstore/objstore.h"

namespace b3os::objstore {

/// Puts every regular file of `dir` (not its subdirectories) under `prefix`/, then the
/// manifest: `extra`'s fields with the files'. Returns the manifest. On failure what was put
/// is removed again (best effort) and the error says what failed.
Result<nlohmann::json> push_set(ObjectStore& os, const std::string& prefix, const std::string& dir,
                                const nlohmann::json& extra = nlohmann::json::object());

/// The manifest of the set at `prefix`: kNotFound when there is none; kInternal when it is
/// not a manifest (too large, not JSON, a file name that is not a plain name).
Result<nlohmann::json> read_manifest(ObjectStore& os, const std::string& prefix, const std::string& scratch_dir);

/// Fetches the files `manifest` lists into `dir` (which must exist), checking each one's
/// size and SHA-256 (kInternal, naming the file, when one does not match).
Result<void> pull_set(ObjectStore& os, const std::string& prefix, const nlohmann::json& manifest,
                      const std::string& dir);

/// Removes the set at `prefix`: the manifest first, then its files. No set there: nothing to do.
Result<void> remove_set(ObjectStore& os, const std::string& prefix, const std::string& scratch_dir);

/// Puts the tree at `tree` as the set `prefix` (one file, tree.tar), staging the archive in
/// `scratch_dir`.
Result<void> push_tree(ObjectStore& os, const std::string& prefix, const std::string& tree,
                       const std::string& scratch_dir);

/// Fetches the set `prefix` written by push_tree and unpacks it into `tree` (which must not
/// exist yet; made through a sibling and a rename, so it is whole or absent).
Result<void> pull_tree(ObjectStore& os, const std::string& prefix, const std::string& tree,
                       const std::string& scratch_dir);

/// The SHA-256 of a file, as 64 hex digits, and its size.
Result<std::pair<std::string, uint64_t>> file_sha256(const std::string& path);

}  // namespace b3os::objstore
