#pragma once
// A streaming reader of multipart/form-data (RFC 7578) bodies: what E2B's SDK sends to
// POST /files, one part per file. Parts are read as they come, in bounded memory, so a file
// of gigabytes goes to the sandbox without being held whole.
//
// Written here: Beast has no multipart parser, and no Debian C++ library offers a streaming
// one that fits a pull-based body (the MIME libraries build whole messages in memory).

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::e2b {

/// The boundary of a Content-Type "multipart/form-data; boundary=..." (quoted or not); 400
/// when it is not multipart/form-data or has no usable boundary (1-70 characters).
Result<std::string> multipart_boundary(std::string_view content_type);

class MultipartReader {
 public:
  /// `pull` reads the next bytes of the body into buf (0 at its end), as Exchange::read_chunk.
  using Pull = std::function<Result<size_t>(char* buf, size_t cap)>;
  MultipartReader(std::string boundary, Pull pull);

  struct Part {
    std::string name;      // the form field
    std::string filename;  // from Content-Disposition (percent-escapes of quotes and newlines decoded)
  };
  /// The next part (the rest of the current one is skipped), or nullopt after the last.
  Result<std::optional<Part>> next();
  /// The current part's next bytes; 0 at its end.
  Result<size_t> read(char* buf, size_t cap);

  static constexpr size_t kMaxHeaderBytes = 16 * 1024;

 private:
  /// Reads more of the body into buf_; false at its end.
  Result<bool> fill();
  std::string delim_;  // "\r\n--" + boundary
  Pull pull_;
  std::string buf_;  // bytes read and not yet given out (from pos_)
  size_t pos_ = 0;
  bool eof_ = false;
  bool in_part_ = false;  // between a part's headers and its delimiter
  bool done_ = false;     // the closing delimiter was read
  bool started_ = false;  // the first delimiter was found
};

}  // namespace b3os::e2b
