#pragma once
// Reading small files (/proc, /sys, pid files) with plain read(2): never an exception.
// libstdc++'s ifstream throws from underflow when read() fails, which /proc does with ESRCH
// when the process exits between open and read.

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"

namespace b3os {

/// Bytes an unprivileged writer may still use on the filesystem of `path` (statvfs's
/// f_bavail), or nullopt when it cannot be asked.
std::optional<uint64_t> free_disk_bytes(const std::string& path);

/// A size given in GiB (a flag's), in bytes; and written for a message ("2 GiB", "0.001 GiB").
uint64_t gib_bytes(double gib);
std::string gib_text(double gib);

/// 503 capacity_unavailable (with ENOSPC) when writing `expected_bytes` to the filesystem of
/// `dir` would leave no more than `reserve_gib` free, the space kept for running sandboxes'
/// disks (--disk-reserve-gib; 0: none); `refused` says what was not done ("no snapshot was
/// taken").
std::optional<Error> disk_reserve_error(const std::string& dir, double reserve_gib, const std::string& refused,
                                        uint64_t expected_bytes = 0);

/// The first `max` bytes of `path`, or nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path, size_t max = 1 << 20);

}  // namespace b3os
