// libFuzzer target for HTTP request parsing as b3osd does it: Beast's header parser with our
// limits, then the request target and the headers the API reads.

#include <cstddef>
#include <cstdint>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "daemon/api/target.h"

namespace bh = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bh::request_parser<bh::string_body> parser;
  parser.header_limit(64 * 1024);
  parser.body_limit(1 << 20);
  parser.eager(true);
  boost::beast::error_code ec;
  size_t used = parser.put(boost::asio::buffer(data, size), ec);
  (void)used;
  if (parser.is_header_done()) {
    const auto& req = parser.get();
    auto t = b3os::api::parse_target(std::string_view(req.target().data(), req.target().size()));
    (void)t;
    (void)req[bh::field::authorization];
    (void)req[bh::field::content_type];
    (void)req["Idempotency-Key"];
    (void)parser.content_length();
  }
  return 0;
}
