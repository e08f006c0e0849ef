#pragma once
// Work inside a network namespace: a thread enters it, runs the function and ends, so no
// thread of b3osd stays in a sandbox's namespace. Sockets the function opens, and the
// /proc/sys/net it writes, are that namespace's.

#include <functional>
#include <string>

#include "common/result.h"

namespace b3os::sys {

Result<void> in_netns(const std::string& path, const std::function<Result<void>()>& fn);

}  // namespace b3os::sys
