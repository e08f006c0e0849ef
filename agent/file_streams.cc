#include "agent/file_streams.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "agent/fs_ops.h"

namespace b3os::agent {

namespace {

// The parent directory of an absolute path ("/a/b" -> "/a", "/a" -> "/").
std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

Error cancelled_error() { return Error{ErrorCode::kInvalidRequest, "cancelled", 0}; }

// Files under /proc and /sys say size 0 and hold whatever a read gives; such a file is read
// whole (up to kMaxSizeless) so the download declares its true length.
constexpr size_t kMaxSizeless = 4 << 20;

Result<std::string> read_sizeless(int fd, const std::string& path) {
  std::string out;
  char buf[64 << 10];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(fs_error("read", path, errno));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxSizeless)
      return fail(ErrorCode::kInvalidRequest, "read " + path + ": a file that reports no size (as under /proc) and holds more than " +
                                                  std::to_string(kMaxSizeless >> 20) + " MiB; copy it to a regular file first");
  }
}

}  // namespace

Result<std::unique_ptr<Stream>> FileWriteStream::open(Channel& channel, uint32_t id,
                                                      const Json& req) {
  auto path = get_path(req);
  if (!path) return fail(path.error());
  auto mode = get_u64(req, "mode", 0644);
  if (!mode) return fail(mode.error());
  if (*mode > 07777) return fail(ErrorCode::kInvalidRequest, "mode must be at most 07777");
  if (path->back() == '/') return fail(fs_error("file_write", *path, EISDIR, false));

  struct stat st;
  if (::stat(path->c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return fail(fs_error("open", *path, EISDIR, false));
  }
  if (auto r = make_dirs(parent_dir(*path)); !r) return fail(r.error());

  std::string tmp = *path + ".b3os-tmp-" + std::to_string(id);
  const mode_t m = static_cast<mode_t>(*mode);
  UniqueFd fd(::open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, m));
  if (!fd) return fail(fs_error("open", tmp, errno, false));
  // The umask would otherwise narrow the mode the caller asked for.
  if (::fchmod(fd.get(), m) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return fail(fs_error("chmod", tmp, err, false));
  }
  return std::unique_ptr<Stream>(
      new FileWriteStream(channel, id, std::move(*path), std::move(tmp), std::move(fd)));
}

FileWriteStream::FileWriteStream(Channel& channel, uint32_t id, std::string path, std::string tmp,
                                 UniqueFd fd)
    : Stream(channel, id), path_(std::move(path)), tmp_(std::move(tmp)), fd_(std::move(fd)) {}

FileWriteStream::~FileWriteStream() { discard_tmp(); }

void FileWriteStream::discard_tmp() {
  fd_.reset();
  if (tmp_exists_) {
    ::unlink(tmp_.c_str());
    tmp_exists_ = false;
  }
}

void FileWriteStream::fail_with(const Error& e) {
  discard_tmp();
  end_error(e);
}

void FileWriteStream::on_data(std::string_view data) {
  if (finished_) return;
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd_.get(), data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail_with(fs_error("write", path_, n < 0 ? errno : EIO, false));
      return;
    }
    off += static_cast<size_t>(n);
  }
  bytes_ += data.size();
  grant(data.size());
}

void FileWriteStream::on_eof() {
  if (finished_) return;
  if (::close(fd_.release()) != 0) {
    fail_with(fs_error("write", path_, errno, false));
    return;
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    fail_with(fs_error("rename", path_, errno, false));
    return;
  }
  tmp_exists_ = false;
  end(Json{{"ok", true}, {"bytes", bytes_}});
}

void FileWriteStream::on_cancel() {
  if (finished_) return;
  fail_with(cancelled_error());
}

void FileWriteStream::abandon() {
  discard_tmp();
  finished_ = true;
}

Result<std::unique_ptr<Stream>> FileReadStream::open(Channel& channel, uint32_t id,
                                                     const Json& req) {
  auto path = get_path(req);
  if (!path) return fail(path.error());
  // O_NONBLOCK so that opening a FIFO cannot hang the agent; it is refused below anyway.
  UniqueFd fd(::open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd) return fail(fs_error("open", *path, errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return fail(fs_error("stat", *path, errno));
  if (S_ISDIR(st.st_mode)) return fail(fs_error("read", *path, EISDIR));
  if (!S_ISREG(st.st_mode)) {
    return fail(ErrorCode::kInvalidRequest, "read " + *path + ": not a regular file");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  std::string ahead;
  if (size == 0) {
    auto whole = read_sizeless(fd.get(), *path);
    if (!whole) return fail(whole.error());
    ahead = std::move(*whole);
    size = ahead.size();
    fd.reset();
  }
  auto s = std::unique_ptr<FileReadStream>(new FileReadStream(channel, id, *path, std::move(fd)));
  s->ahead_ = std::move(ahead);
  s->send(protocol::FrameType::kHeader,
          dump_json(Json{{"size", size}, {"mode", static_cast<unsigned>(st.st_mode & 07777)}}));
  return std::unique_ptr<Stream>(std::move(s));
}

FileReadStream::FileReadStream(Channel& channel, uint32_t id, std::string path, UniqueFd fd)
    : Stream(channel, id), path_(std::move(path)), fd_(std::move(fd)) {}

void FileReadStream::pump() {
  if (finished_ || credit_ == 0) return;
  if (!fd_) {  // read at open: send what is left of it, then the end
    const size_t n = static_cast<size_t>(std::min<uint64_t>({protocol::kMaxData, credit_, ahead_.size() - ahead_sent_}));
    if (n > 0) {
      send(protocol::FrameType::kData, std::string_view(ahead_).substr(ahead_sent_, n));
      ahead_sent_ += n;
      credit_ -= n;
      bytes_ += n;
      return;
    }
    send(protocol::FrameType::kEof, {});
    end(Json{{"ok", true}, {"bytes", bytes_}});
    return;
  }
  static char buf[protocol::kMaxData];
  const size_t want = static_cast<size_t>(std::min<uint64_t>(sizeof(buf), credit_));
  const ssize_t n = ::read(fd_.get(), buf, want);
  if (n > 0) {
    send(protocol::FrameType::kData, std::string_view(buf, static_cast<size_t>(n)));
    credit_ -= static_cast<uint64_t>(n);
    bytes_ += static_cast<uint64_t>(n);
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n < 0) {
    const int err = errno;
    fd_.reset();
    end_error(fs_error("read", path_, err));
    return;
  }
  fd_.reset();
  send(protocol::FrameType::kEof, {});
  end(Json{{"ok", true}, {"bytes", bytes_}});
}

void FileReadStream::on_cancel() {
  if (finished_) return;
  fd_.reset();
  end_error(cancelled_error());
}

void FileReadStream::abandon() {
  fd_.reset();
  finished_ = true;
}

}  // namespace b3os::agent
