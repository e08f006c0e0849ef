#include "common/request_id.h"

#include "common/ids.h"

namespace b3os {

namespace {
thread_local std::string t_request_id;

bool acceptable(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}
}  // namespace

const std::string& current_request_id() { return t_request_id; }

RequestIdScope::RequestIdScope(std::string id) : previous_(std::move(t_request_id)) { t_request_id = std::move(id); }

RequestIdScope::~RequestIdScope() { t_request_id = std::move(previous_); }

std::string request_id_for(std::string_view client_supplied) {
  if (acceptable(client_supplied)) return std::string(client_supplied);
  return "req_" + random_base32(20);
}

}  // namespace b3os
