#pragma once
// Reading small files (/proc, /sys, pid files) with plain read(2): never an exception.
// libstdc++'s ifstream throws from underflow when read() fails, which /proc does with ESRCH
// when the process exits between open and read.

#include <optional>
#include <string>

namespace b3os {

/// The first `max` bytes of `path`, or nullopt when it cannot be opened or read.
std::optional<std::string> read_small_file(const std::string& path, size_t max = 1 << 20);

}  // namespace b3os
