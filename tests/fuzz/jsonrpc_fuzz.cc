// libFuzzer target for the MCP endpoint's pure parts (daemon/mcp): arbitrary bytes as a POST
// body (parse_message: never throws; what it accepts is one message of a known kind with an
// object of params, and the answers built for it serialize), as an Origin header
// (origin_allowed), as base64 (a decoded text encodes back to itself) and as file content
// (valid_utf8 agrees with nlohmann's strict UTF-8 check, which is what serializing a text
// result relies on).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/mcp/jsonrpc.h"
#include "daemon/mcp/server.h"
#include "daemon/mcp/tools.h"

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace b3os::mcp;
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  auto m = parse_message(in);
  if (m) {
    require(m->params.is_object());
    if (m->kind != Message::Kind::kResponse) require(!m->method.empty());
    if (m->kind == Message::Kind::kRequest || m->kind == Message::Kind::kResponse)
      require(m->id.is_string() || m->id.is_number_integer() || m->id.is_number_unsigned());
    if (m->kind == Message::Kind::kNotification) require(m->id.is_null());
    (void)make_result(m->id, m->params).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    require(m.error().code < 0);
    (void)make_error(m.error().id, m.error().code, m.error().message)
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

  (void)origin_allowed(in, {"https://app.example.com"});

  if (auto d = base64_decode(in)) require(base64_encode(*d) == in);

  bool strict_ok = true;
  try {
    (void)nlohmann::json(std::string(in)).dump();
  } catch (const nlohmann::json::exception&) {
    strict_ok = false;
  }
  require(valid_utf8(in) == strict_ok);
  return 0;
}
