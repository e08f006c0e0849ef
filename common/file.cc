#include "common/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace b3os {

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
