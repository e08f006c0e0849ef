#include "common/file.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

namespace b3os {

std::optional<uint64_t> free_disk_bytes(const std::string& path) {
  struct statvfs v {};
  if (::statvfs(path.c_str(), &v) != 0) return std::nullopt;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

uint64_t gib_bytes(double gib) { return gib <= 0 ? 0 : static_cast<uint64_t>(gib * double(1ull << 30)); }

std::string gib_text(double gib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GiB", gib);
  return buf;
}

std::optional<Error> disk_reserve_error(const std::string& dir, double reserve_gib, const std::string& refused,
                                        uint64_t expected_bytes) {
  if (reserve_gib <= 0) return std::nullopt;
  const auto free_bytes = free_disk_bytes(dir);
  if (!free_bytes || *free_bytes > gib_bytes(reserve_gib) + expected_bytes) return std::nullopt;
  return Error{ErrorCode::kCapacityUnavailable,
               "the node's data disk is nearly full: " + std::to_string(*free_bytes >> 20) + " MiB free in " + dir +
                   (expected_bytes ? " for up to " + std::to_string(expected_bytes >> 20) + " MiB" : std::string()) +
                   ", and it keeps " + gib_text(reserve_gib) + " for running sandboxes (--disk-reserve-gib); " +
                   refused,
               ENOSPC};
}

std::optional<std::string> read_small_file(const std::string& path, size_t max) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() >= max) {
      out.resize(max);
      break;
    }
  }
  ::close(fd);
  return out;
}

}  // namespace b3os
