#pragma once
// A pseudo-terminal for a child: its master for the agent, its slave for the child. Shared by
// the terminals (pty_stream.h) and the background processes that run on one (processes.h).

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::agent {

struct Pty {
  UniqueFd master;  // O_CLOEXEC; made nonblocking once the child holds the slave
  UniqueFd slave;   // O_CLOEXEC: the spawn dups it to the child's 0, 1, 2
};

/// A new pty of `rows` x `cols` (each 1 to 1000); the slave is `owner`'s when given (a user's
/// terminal is theirs, as login(1) makes it).
Result<Pty> open_pty(uint64_t rows, uint64_t cols, std::optional<uid_t> owner);
/// Sets the window size (the child gets SIGWINCH).
Result<void> set_pty_size(int master, uint64_t rows, uint64_t cols);

}  // namespace b3os::agent
