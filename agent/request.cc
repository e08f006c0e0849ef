#include "agent/request.h"

#include <cmath>

namespace b3os::agent {

namespace {
Error bad_field(const char* key, std::string_view want) {
  return Error{ErrorCode::kInvalidRequest,
               std::string("field \"") + key + "\" must be " + std::string(want), 0};
}
}  // namespace

Result<Json> parse_request(std::string_view payload) {
  Json j = Json::parse(payload.begin(), payload.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail(ErrorCode::kInvalidRequest, "request is not valid JSON");
  if (!j.is_object()) return fail(ErrorCode::kInvalidRequest, "request must be a JSON object");
  return j;
}

Result<std::string> get_string(const Json& req, const char* key, std::optional<std::string> def) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) {
    if (def) return *def;
    return fail(ErrorCode::kInvalidRequest, std::string("missing field \"") + key + "\"");
  }
  if (!it->is_string()) return fail(bad_field(key, "a string"));
  return it->get<std::string>();
}

Result<bool> get_bool(const Json& req, const char* key, bool def) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) return def;
  if (!it->is_boolean()) return fail(bad_field(key, "a boolean"));
  return it->get<bool>();
}

Result<uint64_t> get_u64(const Json& req, const char* key, uint64_t def) {
  const auto it = req.find(key);
  if (it == req.end() || it->is_null()) return def;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    if (v >= 0) return static_cast<uint64_t>(v);
  } else if (it->is_number_float()) {
    // JavaScript clients send integers as doubles now and then; accept whole values.
    const double d = it->get<double>();
    if (std::isfinite(d) && d >= 0 && d < 1.8e19 && d == std::floor(d)) {
      return static_cast<uint64_t>(d);
    }
  }
  return fail(bad_field(key, "a non-negative integer"));
}

Result<std::string> get_path(const Json& req) {
  auto path = get_string(req, "path");
  if (!path) return path;
  if (path->empty() || (*path)[0] != '/') {
    return fail(ErrorCode::kInvalidRequest, "path \"" + *path + "\" is not absolute");
  }
  if (path->find('\0') != std::string::npos) {
    return fail(ErrorCode::kInvalidRequest, "path contains a NUL byte");
  }
  return path;
}

std::string dump_json(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json error_json(const Error& e) {
  Json err = {{"code", std::string(error_code_name(e.code))}, {"message", e.message}};
  if (e.err_no != 0) err["errno"] = e.err_no;
  return Json{{"ok", false}, {"error", std::move(err)}};
}

}  // namespace b3os::agent
