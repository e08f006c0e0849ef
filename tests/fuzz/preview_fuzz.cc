// libFuzzer target for what the preview listener reads from any client on the network before
// it checks a token (daemon/sandbox/ports.h): the Host header, the request target and the
// Cookie header. Whatever is accepted must be what the URL form says, and what is stripped
// must carry no token any more (the app never sees one).

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "daemon/sandbox/ports.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int port = 1 + data[0] * 257 % 65535;
  using namespace b3os::sandbox;

  // Host: {port}-{host_id}.{domain}[:listen port].
  if (auto t = parse_preview_host(in, "localhost")) {
    require(t->port >= 1 && t->port <= 65535);
    require(t->host_id.rfind("sbx-", 0) == 0 && t->sandbox_id.rfind("sbx_", 0) == 0);
    require(host_id_of(t->sandbox_id) == t->host_id);
    const std::string h = lower(in);
    require(h.rfind(std::to_string(t->port) + "-" + t->host_id + ".localhost", 0) == 0);
  } else {
    const auto code = t.error().code;
    require(code == b3os::ErrorCode::kNotFound || code == b3os::ErrorCode::kInvalidRequest);
  }

  // The target without its token: no b3os_token parameter is left, and stripping again
  // changes nothing.
  const auto st = strip_token_param(in);
  const auto again = strip_token_param(st.target);
  require(!again.token && again.target == st.target);

  // The cookies without tokens: none named like ours is left, and stripping again changes
  // nothing.
  const auto sc = strip_token_cookies(in, port);
  require(sc.tokens.size() <= kMaxTokenCookies);
  const auto sc2 = strip_token_cookies(sc.cookie, port);
  require(sc2.tokens.empty() && sc2.cookie == sc.cookie);
  return 0;
}
