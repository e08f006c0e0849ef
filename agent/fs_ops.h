#pragma once
// The one-shot filesystem requests (list, stat, remove) and the helpers the file streams share:
// errno to API error mapping and `mkdir -p`.

#include <string>
#include <string_view>

#include "agent/request.h"
#include "common/result.h"

namespace b3os::agent {

/// Maps a failed filesystem call to an API error with context, "open /x: Is a directory".
/// ENOENT is file_not_found when `enoent_is_not_found`, otherwise invalid_request.
Error fs_error(std::string_view what, std::string_view path, int err,
               bool enoent_is_not_found = true);

/// The sandbox's /etc/passwd or /etc/group as text: only a regular file of at most 8 MiB is
/// read (code inside may have put a FIFO or a huge file there); a missing one is "".
Result<std::string> read_account_file(const char* path);

/// Creates `dir` and its missing parents with mode 0755.
Result<void> make_dirs(const std::string& dir);

/// The `list` op: {"ok":true,"entries":[...]} sorted by name.
/// A page of `path`'s entries: the names after `after` in byte order, at most `limit`, and
/// "truncated" with "last" when more follow.
Result<Json> list_dir(const std::string& path, const std::string& after = {}, size_t limit = 1000);
/// The `stat` op: {"ok":true,"type","size","mode","mtime_ns","uid","gid","owner","group"}
/// and a symlink's "target" (symlinks are not followed).
Result<Json> stat_path(const std::string& path);
/// The `mkdir` op: `path` and its missing parents; {"ok":true,"created":false} when it was a
/// directory already, with its stat.
Result<Json> make_dir(const std::string& path);
/// The `rename` op: `path` to `to` (rename(2): within the sandbox's filesystem, replacing a
/// file at `to`); the stat of `to`.
Result<Json> rename_path(const std::string& path, const std::string& to);
/// The `remove` op: a file, symlink, empty directory, or with `recursive` a whole tree.
Result<void> remove_path(const std::string& path, bool recursive);

/// Runs list/stat/remove/mkdir/rename for an OPEN request and returns the END payload.
Json run_fs_op(const std::string& op, const Json& req);

}  // namespace b3os::agent
