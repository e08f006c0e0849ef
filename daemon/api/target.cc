#include "daemon/api/target.h"

namespace b3os::api {

std::optional<std::string> Target::param(const std::string& name) const {
  auto it = query.find(name);
  if (it == query.end()) return std::nullopt;
  return it->second;
}

Result<Target> parse_target(std::string_view target) {
  if (target.empty() || target[0] != '/') return fail(ErrorCode::kInvalidUrl, "request target must start with /");
  Target t;
  size_t q = target.find('?');
  std::string_view raw_path = target.substr(0, q);
  size_t hash = raw_path.find('#');
  if (hash != std::string_view::npos) raw_path = raw_path.substr(0, hash);
  size_t i = 1;
  while (i <= raw_path.size()) {
    size_t j = raw_path.find('/', i);
    if (j == std::string_view::npos) j = raw_path.size();
    if (j > i) {
      auto seg = percent_decode(raw_path.substr(i, j - i), false);
      if (!seg) return fail(seg.error());
      t.segments.push_back(std::move(*seg));
    }
    i = j + 1;
  }
  for (auto& s : t.segments) t.path += "/" + s;
  if (t.path.empty()) t.path = "/";
  if (q != std::string_view::npos) {
    std::string_view qs = target.substr(q + 1);
    size_t h = qs.find('#');
    if (h != std::string_view::npos) qs = qs.substr(0, h);
    size_t a = 0;
    while (a <= qs.size()) {
      size_t b = qs.find('&', a);
      if (b == std::string_view::npos) b = qs.size();
      std::string_view pair = qs.substr(a, b - a);
      if (!pair.empty()) {
        size_t eq = pair.find('=');
        auto k = percent_decode(pair.substr(0, eq), true);
        if (!k) return fail(k.error());
        std::string v;
        if (eq != std::string_view::npos) {
          auto dv = percent_decode(pair.substr(eq + 1), true);
          if (!dv) return fail(dv.error());
          v = std::move(*dv);
        }
        t.query.emplace(std::move(*k), std::move(v));
      }
      a = b + 1;
    }
  }
  return t;
}

}  // namespace b3os::api
