// libFuzzer target for request-target parsing (paths, percent escapes, query strings).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "daemon/api/target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto t = b3os::api::parse_target(in);
  if (t) {
    // Decoded segments never contain a separator or a NUL, and the path is rebuilt from them.
    std::string rebuilt;
    for (auto& s : t->segments) {
      if (s.empty() || s.find('\0') != std::string::npos) std::abort();
      rebuilt += "/" + s;
    }
    if ((rebuilt.empty() ? std::string("/") : rebuilt) != t->path) std::abort();
  }
  return 0;
}
