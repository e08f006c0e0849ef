#pragma once
// watch {"path","recursive"}: file system events under a path, from inotify inside the sandbox
// (docs/api.md, "Watching files"). HEADER {"ok","path","is_dir","watches","truncated"} first;
// then STDOUT frames of whole JSON lines, one event each:
//   {"type":"create"|"modify"|"delete"|"attrib"|"rename"|"overflow"|"limit","path","is_dir","from"}
// sent as the daemon's credit allows; END {"ok":true,"reason":"deleted"} once the watched path
// itself is removed or moved away. A CANCEL ends it without END.
//
// Bounds: at most kMaxPending bytes of events wait for credit; past that the inotify fd is not
// read, the kernel's queue fills and says so (IN_Q_OVERFLOW, sent on as an `overflow` event),
// so a reader that stops costs the sandbox a bounded buffer. At most kMaxWatches directories
// are watched per stream (a `limit` event says when a tree was cut short).

#include <memory>
#include <string>
#include <unordered_map>

#include "agent/stream.h"
#include "common/unique_fd.h"

namespace b3os::agent {

class WatchStream : public Stream {
 public:
  static constexpr size_t kMaxPending = 1u << 20;
  static constexpr size_t kMaxWatches = 8192;

  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, const Json& req);

  void poll_fds(std::vector<pollfd>& out) const override;
  void on_fd_ready(int fd, short revents) override;
  bool wants_pump() const override;
  void pump() override;
  void on_cancel() override { finished_ = true; }
  bool is_watch() const override { return true; }

 private:
  WatchStream(Channel& channel, uint32_t id, std::string root, bool recursive, UniqueFd fd)
      : Stream(channel, id), root_(std::move(root)), recursive_(recursive), fd_(std::move(fd)) {}
  /// Watches `dir` and (recursive) every directory below it; with `announce`, what is found
  /// below it is sent as `create` events (it appeared before its watch did).
  void add_tree(const std::string& dir, bool announce);
  bool add_watch(const std::string& path, bool is_dir);
  void emit(const char* type, const std::string& path, bool is_dir, const std::string* from = nullptr);
  void flush_move();
  std::string child_path(int wd, const char* name, uint32_t len) const;

  std::string root_;
  bool recursive_;
  UniqueFd fd_;
  int root_wd_ = -1;
  bool root_is_dir_ = false;
  std::unordered_map<int, std::string> dirs_;  // watch descriptor -> its path
  bool limit_said_ = false;
  std::string pending_;   // JSON lines not yet sent
  std::string last_;      // the last line queued (a repeat of it is dropped while it waits)
  bool ending_ = false;   // the root is gone: END once pending_ is sent
  // A rename's first half, kept until its second half (same cookie) comes or does not.
  uint32_t move_cookie_ = 0;
  std::string move_from_;
  bool move_is_dir_ = false;
};

}  // namespace b3os::agent
