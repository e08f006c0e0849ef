#pragma once
// Starting and waiting for host processes (runsc, the shim). Every child gets exactly the fds
// it is given; nothing else of b3osd leaks into it.

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>
#include <optional>
#include <vector>

#include "common/result.h"

namespace b3os::sys {

/// How to start a child.
struct SpawnOptions {
  std::vector<std::string> argv;
  /// fds[i] becomes the child's fd i (-1: /dev/null). Everything else is closed.
  std::vector<int> fds;
  bool new_session = false;
};

/// Starts a child; returns its pid.
Result<pid_t> spawn(const SpawnOptions& opts);

/// What a finished command did.
struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal
  std::string output;  // stdout and stderr together (bounded)
};

/// Runs argv to completion with stdin at /dev/null, capturing its output. A command still
/// running after `timeout` is killed. A non-zero exit is not an error here: callers decide.
Result<CommandResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);
/// The same with `input` written to its stdin (then closed): `ip -batch -`, `nft -j -f -`.
Result<CommandResult> run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          std::string_view input);

/// run() with a non-zero exit as an error naming the command and carrying its output.
Result<void> run_checked(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                         std::string_view input = {});

/// Waits for a child started by spawn(); returns its exit code (128+signal when killed).
Result<int> wait_exit(pid_t pid);
/// Reaps a child started by spawn() if it has exited; true when it is gone.
bool try_reap(pid_t pid);
/// Reaps, through `pidfd` (a pidfd of `pid`), a child started by spawn() if it has exited;
/// nothing for a process that is not this one's child, whatever has its number by now.
void reap_pidfd(int pidfd, pid_t pid);

/// Makes b3osd the reaper of its orphaned descendants (runsc's sandbox and gofer processes
/// outlive the `runsc create` that started them) and starts a thread that reaps them as they
/// exit, so a deleted sandbox leaves no zombie and `runsc delete` need not wait for init.
/// SIGCHLD must be blocked in every thread (b3osd blocks it before starting any).
void start_orphan_reaper();

/// The wait status of an orphan the reaper took (the last 1,024 are kept), waiting up to
/// `wait` for it to be reaped; nullopt when it was not (yet), or was never our orphan.
std::optional<int> orphan_status(pid_t pid, std::chrono::milliseconds wait);

/// Joins argv for messages and logs.
std::string join_argv(const std::vector<std::string>& argv);

}  // namespace b3os::sys
