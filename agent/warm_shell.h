#pragma once
// A login shell started ahead for the next `/bin/bash -l -c CMD` (docs/e2b.md, "A login shell
// started ahead"). E2B's SDK runs every command that way, and under gVisor starting bash and
// reading its profile costs more than most commands do (~25 ms of a ~45 ms command here).
// After such a command ends, the agent starts the same shell again, with the same environment,
// directory, ids and stdin, stopped where the command would begin: its profile read, the shell
// waiting on fd 4. The next command that matches it in everything but the command is written to
// fd 3 (a memfd) and fd 4 is closed; the shell reads it and `eval`s it, so it runs in the very
// shell that read the profile, as with `bash -l -c`. What it prints while reading its profile
// stays in its pipes and reaches the command's output first, as it would have.
//
// A shell is used only while nothing it read at start has changed (the profile files are
// stamped: inode, size, mtime, ctime). One is started only for a kind of command that came
// before among the last few, so commands whose environments differ each time cost no shell
// started in vain; a waiting shell is left alone by commands of another kind (they start the
// usual way) until three in a row have passed it, then ended. At most one per sandbox; it is not a process of the table (not listed, not counted) and
// the sandbox counts as idle while it is the only thing alive.

#include <sys/types.h>

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "agent/spawn.h"
#include "common/unique_fd.h"

namespace b3os::agent {

class WarmShell {
 public:
  /// `spec` is `/bin/bash -l -c CMD` on pipes (no terminal, no fds of its own).
  static bool fits(const SpawnSpec& spec);

  /// The waiting shell, now running `spec`'s command, when one was started for a spec equal to
  /// `spec` in all but the command and nothing it read at start has changed; otherwise nullopt
  /// (a shell that can serve no more is ended, and reaped later like any child).
  std::optional<SpawnedChild> take(const SpawnSpec& spec);

  /// A command that fits ended: a shell for the next one like it is to be started, if one of
  /// the last few was of the same kind too and no shell waits (start_pending starts it).
  void command_ended(const SpawnSpec& spec);
  /// A shell is to be started. The agent starts it once its loop has had nothing to do for a
  /// while: the spawn holds the agent's one thread until the exec is done (~10 ms under gVisor),
  /// which must not delay the END of the command that just ended, or a request on its way.
  bool pending() const { return pending_.has_value(); }
  void start_pending();

  /// True when `pid` was the waiting shell (it ended before use): forgotten.
  bool on_child_exit(pid_t pid);

  /// The waiting shell's pid, or -1.
  pid_t pid() const { return shell_ ? shell_->child.pid : -1; }

  /// Ends the waiting shell, if any.
  void drop();

 private:
  struct Stamp {
    std::string path;
    bool exists = false;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  struct Shell {
    SpawnSpec key;  // argv without the command
    SpawnedChild child;
    UniqueFd script;  // memfd: the command goes here (fd 3 in the shell)
    UniqueFd go;      // write end of the shell's fd 4: closed once the command is written
    std::vector<Stamp> stamps;
  };

  static SpawnSpec key_of(const SpawnSpec& spec);
  static bool same_kind(const SpawnSpec& a, const SpawnSpec& b);
  static std::vector<Stamp> stamp_profile(const SpawnSpec& spec);
  void start(const SpawnSpec& key);

  std::optional<Shell> shell_;
  static constexpr size_t kRecent = 4;
  static constexpr int kMaxPassedOver = 3;
  std::deque<SpawnSpec> recent_;  // the kinds of the last commands that fit, oldest first
  int passed_over_ = 0;  // commands of another kind since the shell was started
  std::optional<SpawnSpec> pending_;    // the kind of shell to start at the next quiet turn
};

}  // namespace b3os::agent
