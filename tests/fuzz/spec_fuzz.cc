// libFuzzer target for JSON validation of create, exec and template bodies, and path resolution.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "daemon/sandbox/spec.h"
#include "daemon/template/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace b3os::sandbox;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_discarded()) {
    if (auto c = parse_create(j, SpecLimits{})) {
      if (c->vcpu < 1 || c->vcpu > 8 || c->timeout_s < 1 || c->metadata.size() > 16) std::abort();
      (void)check_supported(*c);
    }
    if (auto e = parse_exec(j)) {
      if (e->argv.empty() || e->timeout_ms < 1 || e->cwd.empty() || e->cwd[0] != '/') std::abort();
      // A user is a name of at most 32 characters or UID[:GID]: nothing the agent could misread.
      if (e->user.find_first_of(std::string_view("\n\0/ ", 4)) != std::string::npos ||
          (!e->user.empty() && e->user[0] == '-'))
        std::abort();
    }
    if (j.is_object() && j.contains("metadata")) (void)parse_metadata(j["metadata"], "metadata");
    // A template spec: what it lets through stays within the rules the build relies on.
    if (auto t = b3os::tpl::parse_template_spec(j, b3os::tpl::SpecLimits{})) {
      if (!b3os::tpl::valid_template_name(t->name)) std::abort();
      for (auto& p : t->packages)
        if (!b3os::tpl::valid_package(p) || p[0] == '-') std::abort();
      for (auto& f : t->files)
        if (f.path.empty() || f.path[0] != '/' || f.path.find("/../") != std::string::npos) std::abort();
      if (t->ready.any() && !t->start && !t->start_from_image) std::abort();
      (void)b3os::tpl::canonical(*t).dump();
    }
  }
  if (auto p = resolve_path(std::string(in))) {
    if (p->empty() || (*p)[0] != '/' || p->find("/../") != std::string::npos) std::abort();
  }
  return 0;
}
