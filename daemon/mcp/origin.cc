#include "daemon/mcp/server.h"

#include <algorithm>
#include <cctype>

// The Origin check of /mcp, apart from the server so that the fuzz target compiles only it.

namespace b3os::mcp {

namespace {

bool equals_ci(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

bool origin_allowed(std::string_view origin, const std::vector<std::string>& allowed) {
  if (origin.empty()) return true;  // not a browser
  for (auto& a : allowed)
    if (equals_ci(origin, a)) return true;
  // A page served from this machine's loopback: http(s)://localhost, 127.0.0.1 or [::1], any port.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.size() <= scheme.size() || !equals_ci(origin.substr(0, scheme.size()), scheme)) continue;
    std::string_view host = origin.substr(scheme.size());
    if (host.empty()) return false;
    std::string_view name;
    if (host.front() == '[') {
      const size_t close = host.find(']');
      if (close == std::string_view::npos) return false;
      name = host.substr(0, close + 1);
      host.remove_prefix(close + 1);
    } else {
      const size_t colon = host.find(':');
      name = host.substr(0, colon);
      host.remove_prefix(colon == std::string_view::npos ? host.size() : colon);
    }
    if (!host.empty()) {  // ":port", digits only
      if (host.front() != ':' || host.size() < 2 || host.size() > 6) return false;
      for (char c : host.substr(1))
        if (c < '0' || c > '9') return false;
    }
    return equals_ci(name, "localhost") || name == "127.0.0.1" || name == "[::1]";
  }
  return false;
}

}  // namespace b3os::mcp
