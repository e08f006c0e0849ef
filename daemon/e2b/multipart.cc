#include "daemon/e2b/multipart.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace b3os::e2b {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// The value of parameter `name` in "type; a=1; b=\"x y\"" (unquoted), or nullopt.
std::optional<std::string> param(std::string_view header, std::string_view name) {
  size_t i = header.find(';');
  while (i != std::string_view::npos && i < header.size()) {
    ++i;
    while (i < header.size() && (header[i] == ' ' || header[i] == '\t')) ++i;
    const size_t eq = header.find('=', i);
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string key = lower(trim(header.substr(i, eq - i)));
    size_t j = eq + 1;
    std::string value;
    if (j < header.size() && header[j] == '"') {
      ++j;
      while (j < header.size() && header[j] != '"') {
        if (header[j] == '\\' && j + 1 < header.size()) ++j;
        value.push_back(header[j++]);
      }
      if (j >= header.size()) return std::nullopt;  // an unclosed quote
      ++j;
    } else {
      const size_t end = std::min(header.find(';', j), header.size());
      value = std::string(trim(header.substr(j, end - j)));
      j = end;
    }
    if (key == name) return value;
    i = header.find(';', j);
  }
  return std::nullopt;
}

/// What browsers and undici escape in a form's filename: %22 ("), %0D, %0A.
std::string unescape_filename(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const std::string hex = lower(std::string_view(s).substr(i + 1, 2));
      if (hex == "22" || hex == "0d" || hex == "0a") {
        out.push_back(hex == "22" ? '"' : hex == "0d" ? '\r' : '\n');
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

Result<std::string> multipart_boundary(std::string_view ct) {
  const size_t semi = std::min(ct.find(';'), ct.size());
  if (lower(trim(ct.substr(0, semi))) != "multipart/form-data")
    return fail(ErrorCode::kUnsupportedMediaType, "expected multipart/form-data or application/octet-stream");
  auto b = param(ct, "boundary");
  if (!b || b->empty() || b->size() > 70)
    return fail(ErrorCode::kInvalidRequest, "Content-Type: multipart/form-data needs a boundary of 1 to 70 characters");
  return *b;
}

MultipartReader::MultipartReader(std::string boundary, Pull pull)
    : delim_("\r\n--" + boundary), pull_(std::move(pull)), buf_("\r\n") {}  // the first delimiter has no CRLF of its own

Result<bool> MultipartReader::fill() {
  if (eof_) return false;
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  char tmp[64 * 1024];
  auto n = pull_(tmp, sizeof tmp);
  if (!n) return fail(n.error());
  if (*n == 0) {
    eof_ = true;
    return false;
  }
  buf_.append(tmp, *n);
  return true;
}

Result<size_t> MultipartReader::read(char* out, size_t cap) {
  if (!in_part_ || cap == 0) return size_t{0};
  for (;;) {
    const std::string_view avail(buf_.data() + pos_, buf_.size() - pos_);
    const size_t at = avail.find(delim_);
    if (at == 0) {
      pos_ += delim_.size();
      in_part_ = false;
      return size_t{0};
    }
    // Everything before a delimiter, or all but a tail that may begin one.
    size_t safe = at != std::string_view::npos ? at : avail.size() >= delim_.size() ? avail.size() - (delim_.size() - 1) : 0;
    if (safe > 0) {
      const size_t n = std::min(safe, cap);
      std::memcpy(out, avail.data(), n);
      pos_ += n;
      return n;
    }
    auto more = fill();
    if (!more) return fail(more.error());
    if (!*more) return fail(ErrorCode::kInvalidRequest, "the multipart body ended inside a part (no closing boundary)");
  }
}

Result<std::optional<MultipartReader::Part>> MultipartReader::next() {
  using Out = std::optional<Part>;
  if (done_) return Out();
  if (in_part_) {
    char sink[16 * 1024];
    for (;;) {
      auto n = read(sink, sizeof sink);
      if (!n) return fail(n.error());
      if (*n == 0) break;
    }
  }
  if (!started_) {
    // A preamble before the first delimiter is skipped.
    for (;;) {
      const std::string_view avail(buf_.data() + pos_, buf_.size() - pos_);
      const size_t at = avail.find(delim_);
      if (at != std::string_view::npos) {
        pos_ += at + delim_.size();
        break;
      }
      if (avail.size() >= delim_.size()) pos_ += avail.size() - (delim_.size() - 1);
      auto more = fill();
      if (!more) return fail(more.error());
      if (!*more) return fail(ErrorCode::kInvalidRequest, "the multipart body holds no part (its boundary is not in it)");
    }
    started_ = true;
  }
  // After a delimiter: "--" closes the body; else the part's headers, ended by an empty line.
  for (;;) {
    const std::string_view avail(buf_.data() + pos_, buf_.size() - pos_);
    if (avail.size() >= 2 && avail.substr(0, 2) == "--") {
      done_ = true;
      return Out();
    }
    size_t lead = 0;  // transport padding after the boundary
    while (lead < avail.size() && (avail[lead] == ' ' || avail[lead] == '\t')) ++lead;
    if (avail.size() >= lead + 2 && avail.substr(lead, 2) != "\r\n")
      return fail(ErrorCode::kInvalidRequest, "a multipart boundary line is not ended by CRLF");
    const size_t end = avail.size() >= lead + 2 ? avail.find("\r\n\r\n", lead) : std::string_view::npos;
    if (end != std::string_view::npos) {
      const std::string_view block = end > lead ? avail.substr(lead + 2, end - lead - 2) : std::string_view();
      Part part;
      size_t i = 0;
      while (i <= block.size()) {
        const size_t nl = std::min(block.find("\r\n", i), block.size());
        const std::string_view line = block.substr(i, nl - i);
        i = nl + 2;
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        if (lower(trim(line.substr(0, colon))) != "content-disposition") continue;
        const std::string_view value = line.substr(colon + 1);
        if (auto n = param(value, "name")) part.name = *n;
        if (auto f = param(value, "filename")) part.filename = unescape_filename(*f);
      }
      pos_ += end + 4;
      in_part_ = true;
      return Out(std::move(part));
    }
    if (avail.size() > kMaxHeaderBytes)
      return fail(ErrorCode::kInvalidRequest, "a multipart part's headers are over " + std::to_string(kMaxHeaderBytes) + " bytes");
    auto more = fill();
    if (!more) return fail(more.error());
    if (!*more) return fail(ErrorCode::kInvalidRequest, "the multipart body ended in a part's headers");
  }
}

}  // namespace b3os::e2b
