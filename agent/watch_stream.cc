#include "agent/watch_stream.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "agent/fs_ops.h"
#include "protocol/frame.h"

namespace b3os::agent {

namespace {

constexpr uint32_t kDirMask = IN_CREATE | IN_DELETE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO |
                              IN_DELETE_SELF | IN_MOVE_SELF | IN_EXCL_UNLINK | IN_DONT_FOLLOW | IN_ONLYDIR;
constexpr uint32_t kFileMask = IN_MODIFY | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW;

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

}  // namespace

Result<std::unique_ptr<Stream>> WatchStream::open(Channel& channel, uint32_t id, const Json& req) {
  auto path = get_path(req);
  if (!path) return fail(path.error());
  auto recursive = get_bool(req, "recursive", false);
  if (!recursive) return fail(recursive.error());
  std::string root = *path;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return fail(fs_error("watch", root, errno));
  const bool is_dir = S_ISDIR(st.st_mode);
  if (*recursive && !is_dir)
    return fail(ErrorCode::kInvalidRequest, "watch " + root + ": recursive=true needs a directory");
  UniqueFd fd(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!fd) return fail(errno_error(ErrorCode::kInternal, "inotify_init1", errno));
  auto s = std::unique_ptr<WatchStream>(new WatchStream(channel, id, root, *recursive, std::move(fd)));
  s->root_is_dir_ = is_dir;
  if (is_dir) {
    s->add_tree(root, false);
  } else {
    s->add_watch(root, false);
  }
  if (s->root_wd_ < 0) {
    const int err = errno;
    // inotify's own limits (fs.inotify.max_user_watches), not the disk's: say which.
    if (err == ENOSPC || err == ENOMEM)
      return fail(ErrorCode::kQuotaExceeded, "watch " + root + ": the sandbox's inotify watches are all in use");
    return fail(fs_error("watch", root, err));
  }
  s->send(protocol::FrameType::kHeader, dump_json(Json{{"ok", true},
                                                       {"path", root},
                                                       {"is_dir", is_dir},
                                                       {"recursive", *recursive},
                                                       {"watches", s->dirs_.size()},
                                                       {"truncated", s->limit_said_}}));
  return std::unique_ptr<Stream>(std::move(s));
}

bool WatchStream::add_watch(const std::string& path, bool is_dir) {
  if (dirs_.size() >= kMaxWatches) {
    if (!limit_said_) {
      limit_said_ = true;
      emit("limit", path, is_dir);
    }
    return false;
  }
  // The root may be a symlink the user named (a watch of /app where /app -> /srv/app): it is
  // followed; below it nothing is, so a link inside the tree cannot lead the watch out of it.
  uint32_t mask = is_dir ? kDirMask : kFileMask;
  if (root_wd_ < 0) mask &= ~uint32_t(IN_DONT_FOLLOW);
  const int wd = ::inotify_add_watch(fd_.get(), path.c_str(), mask);
  if (wd < 0) return false;  // gone already, or not a directory any more
  if (root_wd_ < 0) root_wd_ = wd;
  dirs_[wd] = path;  // a directory moved within the tree keeps its wd: the path is updated
  return true;
}

void WatchStream::add_tree(const std::string& top, bool announce) {
  std::vector<std::string> todo{top};
  while (!todo.empty()) {
    std::string dir = std::move(todo.back());
    todo.pop_back();
    if (!add_watch(dir, true) || !recursive_) continue;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool sub = e->d_type == DT_DIR;
      if (e->d_type == DT_UNKNOWN) {
        struct stat st;
        sub = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      const std::string child = join(dir, name);
      if (announce) emit("create", child, sub);
      if (sub) todo.push_back(child);
    }
    ::closedir(d);
  }
}

void WatchStream::emit(const char* type, const std::string& path, bool is_dir, const std::string* from) {
  Json j = {{"type", type}, {"path", path}, {"is_dir", is_dir}};
  if (from) j["from"] = *from;
  std::string line = dump_json(j);
  line += '\n';
  // A burst of writes to one file is one `modify` while it waits to be sent.
  if (!pending_.empty() && line == last_) return;
  pending_ += line;
  last_ = std::move(line);
}

std::string WatchStream::child_path(int wd, const char* name, uint32_t len) const {
  const auto it = dirs_.find(wd);
  if (it == dirs_.end()) return {};
  if (len == 0 || name[0] == '\0') return it->second;
  return join(it->second, name);
}

void WatchStream::flush_move() {
  if (move_cookie_ == 0) return;
  // Moved out of the watched tree: for a reader it is gone.
  emit("delete", move_from_, move_is_dir_);
  move_cookie_ = 0;
  move_from_.clear();
}

void WatchStream::poll_fds(std::vector<pollfd>& out) const {
  // A full buffer is not added to: the fd waits, and the kernel's queue overflows instead.
  if (finished_ || ending_ || pending_.size() >= kMaxPending) return;
  out.push_back(pollfd{fd_.get(), POLLIN, 0});
}

void WatchStream::on_fd_ready(int, short) {
  alignas(inotify_event) char buf[64 * 1024];
  for (int round = 0; round < 16 && pending_.size() < kMaxPending && !ending_; ++round) {
    const ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n <= 0) break;
    for (ssize_t off = 0; off < n;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if (ev->mask & IN_Q_OVERFLOW) {
        flush_move();
        emit("overflow", root_, true);
        continue;
      }
      const bool is_dir = (ev->mask & IN_ISDIR) != 0;
      const std::string path = child_path(ev->wd, ev->name, ev->len);
      if (ev->mask & IN_IGNORED) {
        dirs_.erase(ev->wd);
        continue;
      }
      if (path.empty()) continue;
      if (ev->mask & IN_MOVED_TO) {
        const bool renamed = move_cookie_ != 0 && move_cookie_ == ev->cookie;
        if (renamed) {
          emit("rename", path, is_dir, &move_from_);
          move_cookie_ = 0;
          move_from_.clear();
        } else {
          flush_move();
          emit("create", path, is_dir);
        }
        // Moved within the tree: its watches are the same ones, their paths renewed by the walk;
        // moved in from outside: what it holds is new to the reader.
        if (is_dir && recursive_) add_tree(path, !renamed);
        continue;
      }
      flush_move();
      if (ev->mask & IN_MOVED_FROM) {
        move_cookie_ = ev->cookie;
        move_from_ = path;
        move_is_dir_ = is_dir;
      } else if (ev->mask & IN_CREATE) {
        emit("create", path, is_dir);
        if (is_dir && recursive_) add_tree(path, true);
      } else if (ev->mask & IN_DELETE) {
        emit("delete", path, is_dir);
      } else if (ev->mask & IN_MODIFY) {
        emit("modify", path, is_dir);
      } else if (ev->mask & IN_ATTRIB) {
        emit("attrib", path, is_dir);
      } else if ((ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) && ev->wd == root_wd_) {
        emit("delete", root_, root_is_dir_);
        ending_ = true;
        break;
      }
    }
    // A rename's two halves come in one read; a half left over moved out of the tree.
    flush_move();
  }
}

bool WatchStream::wants_pump() const {
  if (finished_) return false;
  if (pending_.empty()) return ending_;
  // Whole lines only: the first must fit the credit.
  const size_t first = pending_.find('\n') + 1;
  return credit_ >= first;
}

void WatchStream::pump() {
  if (pending_.empty()) {
    if (ending_) end(Json{{"ok", true}, {"reason", "deleted"}});
    return;
  }
  const size_t room = static_cast<size_t>(std::min<uint64_t>(credit_, protocol::kMaxData));
  size_t cut = pending_.size() <= room ? pending_.size() : pending_.rfind('\n', room - 1) + 1;
  if (cut == 0 || cut > room) return;
  send(protocol::FrameType::kStdout, std::string_view(pending_).substr(0, cut));
  credit_ -= cut;
  pending_.erase(0, cut);
  if (pending_.empty()) last_.clear();
}

}  // namespace b3os::agent
