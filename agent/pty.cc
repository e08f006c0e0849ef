#include "agent/pty.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace b3os::agent {

Result<void> set_pty_size(int fd, uint64_t rows, uint64_t cols) {
  if (rows < 1 || rows > 1000 || cols < 1 || cols > 1000)
    return fail(ErrorCode::kInvalidRequest, "rows and cols must be 1 to 1000");
  winsize ws{};
  ws.ws_row = static_cast<unsigned short>(rows);
  ws.ws_col = static_cast<unsigned short>(cols);
  if (::ioctl(fd, TIOCSWINSZ, &ws) != 0) return fail(errno_error(ErrorCode::kInternal, "TIOCSWINSZ", errno));
  return {};
}

Result<Pty> open_pty(uint64_t rows, uint64_t cols, std::optional<uid_t> owner) {
  Pty p;
  p.master = UniqueFd(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.master) return fail(errno_error(ErrorCode::kInternal, "posix_openpt", errno));
  if (::grantpt(p.master.get()) != 0) return fail(errno_error(ErrorCode::kInternal, "grantpt", errno));
  if (::unlockpt(p.master.get()) != 0) return fail(errno_error(ErrorCode::kInternal, "unlockpt", errno));
  char name[128];
  if (::ptsname_r(p.master.get(), name, sizeof name) != 0) return fail(errno_error(ErrorCode::kInternal, "ptsname", errno));
  p.slave = UniqueFd(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!p.slave) return fail(errno_error(ErrorCode::kInternal, std::string("open ") + name, errno));
  if (auto r = set_pty_size(p.master.get(), rows, cols); !r) return fail(r.error());
  if (owner) (void)::fchown(p.slave.get(), *owner, static_cast<gid_t>(-1));
  return p;
}

}  // namespace b3os::agent
