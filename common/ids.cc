#include "common/ids.h"

#include <sys/random.h>

#include <chrono>
#include <stdexcept>

namespace b3os {

namespace {
constexpr char kCrockford[] = "0123456789abcdefghjkmnpqrstvwxyz";
}

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed");  // only on a broken kernel
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

std::string random_base32(size_t n) {
  std::string raw = random_bytes(n);
  std::string out(n, '0');
  for (size_t i = 0; i < n; ++i) out[i] = kCrockford[static_cast<unsigned char>(raw[i]) & 31];
  return out;
}

std::string new_id_at(std::string_view prefix, uint64_t unix_ms) {
  std::string out(prefix);
  out += '_';
  char t[10];
  for (int i = 9; i >= 0; --i) {
    t[i] = kCrockford[unix_ms & 31];
    unix_ms >>= 5;
  }
  out.append(t, 10);
  out += random_base32(16);
  return out;
}

std::string new_id(std::string_view prefix) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count();
  return new_id_at(prefix, static_cast<uint64_t>(ms));
}

std::string to_hex(std::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(data.size() * 2);
  for (unsigned char c : data) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

bool valid_id(std::string_view s, std::string_view prefix) {
  if (s.size() != prefix.size() + 27 || s.substr(0, prefix.size()) != prefix || s[prefix.size()] != '_')
    return false;
  for (char c : s.substr(prefix.size() + 1)) {
    bool ok = false;
    for (const char* p = kCrockford; *p; ++p) ok |= (*p == c);
    if (!ok) return false;
  }
  return true;
}

}  // namespace b3os
