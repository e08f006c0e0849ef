#include "agent/log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace b3os::agent {

void log_line(const char* fmt, ...) {
  // One write per line so lines from a busy agent never interleave mid-line in the log.
  char buf[1024];
  static constexpr char kPrefix[] = "b3os-agent: ";
  size_t n = sizeof(kPrefix) - 1;
  std::memcpy(buf, kPrefix, n);
  va_list ap;
  va_start(ap, fmt);
  const int m = std::vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
  va_end(ap);
  if (m > 0) n += std::min<size_t>(static_cast<size_t>(m), sizeof(buf) - n - 2);
  buf[n++] = '\n';
  ssize_t r;
  do {
    r = ::write(2, buf, n);
  } while (r < 0 && errno == EINTR);
}

}  // namespace b3os::agent
