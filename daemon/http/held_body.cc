#include "daemon/http/held_body.h"

#include <algorithm>
#include <cstring>

namespace b3os::http {

namespace {
tl::unexpected<Error> past(uint64_t limit) {
  // As BeastExchange says it (server.cc), so a handler's 413 reads the same on either port.
  return fail(ErrorCode::kPayloadTooLarge,
              "the request body is larger than this operation's limit of " + std::to_string(limit) + " bytes");
}
}  // namespace

Result<std::string> HeldBodyExchange::read_body(size_t limit) {
  if (body_.size() > limit) return past(limit);
  read_ = body_.size();
  return body_;
}

Result<size_t> HeldBodyExchange::read_chunk(char* buf, size_t cap, uint64_t limit) {
  if (body_.size() > limit) return past(limit);
  const size_t n = std::min(cap, body_.size() - read_);
  if (n > 0) std::memcpy(buf, body_.data() + read_, n);
  read_ += n;
  return n;
}

Result<void> HeldBodyExchange::proxy(Upstream& up, const ProxyOptions& opts) {
  if (opts.body) return inner_.proxy(up, opts);
  ProxyOptions o = opts;
  o.body = body_.substr(std::min(read_, body_.size()));
  return inner_.proxy(up, o);
}

}  // namespace b3os::http
