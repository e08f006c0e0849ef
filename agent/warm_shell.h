#pragma once
// Login shells started ahead for the next `/bin/bash -l -c CMD` (docs/e2b.md, "Login shells
// started ahead"). E2B's SDK runs every command that way, and under gVisor starting bash and
// reading its profile costs more than most commands do (~25 ms of a ~45 ms command here).
// After such a command ends, the agent starts the same shell again, with the same environment,
// directory, ids and stdin, stopped where the command would begin: its profile read, the shell
// waiting on fd 4. The next command that matches it in everything but the command is written to
// fd 3 (a memfd) and fd 4 is closed; the shell reads it and `eval`s it, so it runs in the very
// shell that read the profile, as with `bash -l -c`. What it prints while reading its profile
// stays in its pipes and reaches the command's output first, as it would have.
//
// Shells are started for commands back to back too. A shell takes ~40 ms of a core to start,
// more than a short command with its round trip (~20 ms), so one started after each command is
// not ready for a client that sends the next at once: when a command finds none
// waiting where one was due, or takes one started less than 100 ms before, one shell more is
// kept waiting from then on (up to kMaxShells, back to one when they are all ended), all
// started at quiet turns. A shell that ends before use is not started again until a command of
// its kind ends. A copy of a waiting shell made by fork would cost as much under gVisor (~50 ms a
// double fork, measured) and differ from `bash -l -c` ($$, traps, what the profile prints).
//
// A shell is used only while nothing it read at start has changed (the profile files are
// stamped: inode, size, mtime, ctime; the directory it runs in by inode: one removed and made
// again is another; an /etc/profile.d of more than 256 entries is not stamped, and no shell is
// started). SECONDS counts from the command, and the command paths the profile's commands left
// hashed are forgotten (a shell started for the command keeps them; forgetting is the safe
// side: a command installed since is found, and `hash` lists nothing). Shells are
// started only for a kind of command that came before among the last few, so commands whose
// environments differ each time cost no shell started in vain; the waiting shells are left
// alone by commands of another kind (they start the usual way) until three in a row have
// passed them, then ended. All are of one kind; none is a process of the table (not listed,
// not counted) and the sandbox counts as idle while they are the only things alive.

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "agent/spawn.h"
#include "common/unique_fd.h"

namespace b3os::agent {

class WarmShell {
 public:
  /// The most shells kept waiting.
  static constexpr size_t kMaxShells = 8;

  /// `spec` is `/bin/bash -l -c CMD` on pipes (no terminal, no fds of its own).
  static bool fits(const SpawnSpec& spec);

  /// A waiting shell (the oldest), now running `spec`'s command, when they were started for a
  /// spec equal to `spec` in all but the command and nothing it read at start has changed;
  /// otherwise nullopt (shells that can serve no more are ended, and reaped later like any child).
  std::optional<SpawnedChild> take(const SpawnSpec& spec);

  /// A command that fits ended: shells for the next ones like it are to be started, if one of
  /// the last few was of the same kind too, and none waits or those waiting are of its kind.
  void command_ended(const SpawnSpec& spec);
  /// A shell is to be started (start_pending starts one). The agent starts it once its loop
  /// has had nothing to do for a while (quiet): the spawn holds the agent's one thread until
  /// the exec is done (~10 ms under gVisor), which must not delay the END of the command that
  /// just ended, or a request on its way.
  bool pending() const { return pending_.has_value() && shells_.size() < target_; }
  void start_pending();
  /// How long the agent must have had nothing to do before it starts one: 20 ms for the first
  /// (it should be ready for the next command of an agent that leaves ~100 ms or more between
  /// commands), 100 ms for more (they are for the next burst: started between the commands of
  /// a burst, they take the CPU those commands need and come too late for them).
  std::chrono::milliseconds quiet() const {
    return std::chrono::milliseconds(shells_.empty() ? 20 : 100);
  }

  /// True when `pid` was a waiting shell (it ended before use): forgotten.
  bool on_child_exit(pid_t pid);

  /// The waiting shells' pids.
  std::vector<pid_t> waiting() const;

  /// Ends the waiting shells, if any.
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
    dev_t cwd_dev = 0;
    ino_t cwd_ino = 0;
    std::chrono::steady_clock::time_point started;
  };

  static SpawnSpec key_of(const SpawnSpec& spec);
  /// The directory a shell of `key` runs in, by device and inode.
  static bool stat_cwd(const SpawnSpec& key, struct stat& st);
  static bool same_kind(const SpawnSpec& a, const SpawnSpec& b);
  /// nullopt when /etc/profile.d has more entries than are stamped.
  static std::optional<std::vector<Stamp>> stamp_profile(const SpawnSpec& spec);
  bool start(const SpawnSpec& key);
  bool kept(const Shell& sh, const std::optional<std::vector<Stamp>>& stamps) const;

  std::deque<Shell> shells_;  // oldest first; all of one kind
  static constexpr size_t kRecent = 4;
  static constexpr int kMaxPassedOver = 3;
  std::deque<SpawnSpec> recent_;  // the kinds of the last commands that fit, oldest first
  int passed_over_ = 0;  // commands of another kind in a row
  std::optional<SpawnSpec> pending_;    // the kind of shells to start at quiet turns
  size_t target_ = 1;    // shells to keep waiting
};

}  // namespace b3os::agent
