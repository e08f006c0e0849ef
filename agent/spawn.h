#pragma once
// Starting an exec's process: fork, a new session, pipes for stdio, and a PATH search done
// here rather than by libc so that the PATH comes from the request's environment.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace b3os::agent {

/// The ids a command takes on before it starts: setgroups(groups), setgid(gid), setuid(uid).
struct SpawnIds {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

/// What to run: argv, the complete environment ("K=V"), the working directory, and whom as.
struct SpawnSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;
  bool pipe_stdin = false;
  int tty = -1;  // a pty's slave: the child's stdin, stdout, stderr and controlling terminal
  std::vector<int> pass_fds;  // given to the child as fds 3, 4, ... (every other fd is closed)
  std::optional<SpawnIds> ids;  // absent: the agent's own (root)
};

/// A started process and the agent's ends of its pipes (nonblocking).
struct SpawnedChild {
  pid_t pid = -1;
  UniqueFd stdin_fd;  // invalid when the child's stdin is /dev/null (or a tty)
  UniqueFd stdout_fd;  // invalid with a tty
  UniqueFd stderr_fd;  // invalid with a tty
};

/// The paths execve tries for `argv0` under `path_var`, in order (argv0 itself if it has '/').
std::vector<std::string> exec_candidates(const std::string& argv0, const std::string& path_var);

/// Forks the process in its own session and process group, with `ids` if given, in `cwd`. A
/// cwd the process cannot enter is invalid_request "cwd <cwd>: <reason>" and ids it cannot take
/// an error naming the call (the child is reaped either way). A program that cannot be
/// executed makes the child print "b3os: exec <argv0>: <reason>" on stderr and exit 127.
Result<SpawnedChild> spawn_child(const SpawnSpec& spec);

/// SIGKILLs the process group of `pid` (the process itself if it has no group yet).
void kill_group(pid_t pid);
/// Sends `sig` to every process of the session `sid` (a terminal's shell and all its jobs,
/// which interactive shells put in groups of their own). Returns how many it reached.
int signal_session(pid_t sid, int sig);

}  // namespace b3os::agent
