#pragma once
// Handing file descriptors between processes with SCM_RIGHTS. b3os-shim holds the daemon's
// end of each agent channel (and its log pipe) and gives them to a (re)started b3osd.

#include <sys/socket.h>

#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os {

/// Connects to the unix socket at `socket_path` and receives the fds its owner sends (the
/// one-byte message "F" with one to four SCM_RIGHTS fds), in the order sent. Gives up after 2
/// seconds.
Result<std::vector<UniqueFd>> receive_fds(const std::string& socket_path);

/// Every fd a received message carried (SCM_RIGHTS), owned: those the caller does not keep are
/// closed when the vector goes.
std::vector<UniqueFd> received_fds(msghdr& msg);

/// Sends `count` fds (one to four) over the connected unix socket `sock` as the one-byte
/// message "F". Allocates nothing (b3os-shim calls it in its loop).
Result<void> send_fds(int sock, const int* fds, size_t count);

}  // namespace b3os
