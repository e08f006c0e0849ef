#include "daemon/sys/netns.h"

#include <fcntl.h>
#include <sched.h>

#include <cerrno>
#include <thread>

#include "common/unique_fd.h"

namespace b3os::sys {

Result<void> in_netns(const std::string& path, const std::function<Result<void>()>& fn) {
  Result<void> out;
  std::thread t([&] {
    UniqueFd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns) {
      out = fail(errno_error(ErrorCode::kInternal, "open " + path, errno));
      return;
    }
    if (::setns(ns.get(), CLONE_NEWNET) != 0) {
      out = fail(errno_error(ErrorCode::kInternal, "entering " + path, errno));
      return;
    }
    out = fn();
  });
  t.join();
  return out;
}

}  // namespace b3os::sys
