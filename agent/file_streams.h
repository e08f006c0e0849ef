#pragma once
// file_write and file_read: file contents in DATA frames, with flow control both ways.

#include <memory>
#include <string>

#include "agent/stream.h"
#include "common/unique_fd.h"

namespace b3os::agent {

/// file_write: DATA goes to `path.b3os-tmp-<stream>`, renamed over `path` on EOF.
class FileWriteStream : public Stream {
 public:
  /// Validates the request and creates the temporary file (and missing parent directories).
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, const Json& req);
  ~FileWriteStream() override;

  void on_data(std::string_view data) override;
  void on_eof() override;
  void on_cancel() override;
  void abandon() override;

 private:
  FileWriteStream(Channel& channel, uint32_t id, std::string path, std::string tmp, UniqueFd fd);
  void discard_tmp();
  void fail_with(const Error& e);

  std::string path_;
  std::string tmp_;
  UniqueFd fd_;
  uint64_t bytes_ = 0;
  bool tmp_exists_ = true;
};

/// file_read: HEADER, then DATA chunks as credit allows, then EOF and END.
class FileReadStream : public Stream {
 public:
  /// Opens the file and sends HEADER {"size","mode"}.
  static Result<std::unique_ptr<Stream>> open(Channel& channel, uint32_t id, const Json& req);

  void on_cancel() override;
  void abandon() override;
  bool wants_pump() const override { return !finished_ && credit_ > 0; }
  void pump() override;

 private:
  FileReadStream(Channel& channel, uint32_t id, std::string path, UniqueFd fd);

  std::string path_;
  UniqueFd fd_;
  uint64_t bytes_ = 0;
  // A file that reports size 0 (under /proc or /sys) is read whole at open, since its size
  // is known only then; its bytes are sent from here.
  std::string ahead_;
  size_t ahead_sent_ = 0;
};

}  // namespace b3os::agent
