// libFuzzer target for E2B's wire (daemon/e2b): arbitrary bytes as a Connect streaming request
// body (parse_stream_request: never throws; what it accepts is one envelope holding an object,
// and an envelope made of that object reads back the same), as base64 (unbase64 of a decoded
// text's encoding gives it back), and as a multipart body cut in pieces of the first byte's
// size (the reader never reads past its pull, never loops, and the bytes it gives out are a
// subsequence of the body).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "daemon/e2b/multipart.h"
#include "daemon/e2b/wire.h"
#include "daemon/sys/codec.h"

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace b3os::e2b;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (auto m = parse_stream_request(in, 1 << 16)) {
    require(m->is_object());
    const std::string again = envelope(0, m->dump());
    auto back = parse_stream_request(again, 1 << 20);
    require(back && *back == *m);
  }
  (void)parse_unary_request(in);

  if (auto bytes = unbase64(in)) require(*unbase64(b3os::sys::base64_encode(*bytes)) == *bytes);

  if (size > 0) {
    const size_t step = static_cast<size_t>(data[0]) + 1;
    const std::string body(in.substr(1));
    auto pos = std::make_shared<size_t>(0);
    MultipartReader r("b0undary", [&body, step, pos](char* buf, size_t cap) -> b3os::Result<size_t> {
      const size_t n = std::min({step, cap, body.size() - *pos});
      std::copy_n(body.data() + *pos, n, buf);
      *pos += n;
      return n;
    });
    size_t given = 0;
    for (int parts = 0; parts < 1000; ++parts) {
      auto part = r.next();
      if (!part || !*part) break;
      char buf[97];
      for (;;) {
        auto n = r.read(buf, sizeof buf);
        if (!n || *n == 0) break;
        require(*n <= sizeof buf);
        given += *n;
        require(given <= body.size());
      }
    }
  }
  return 0;
}
