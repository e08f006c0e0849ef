// libFuzzer target for the image importer's metadata: docker-save's manifest.json, OCI indexes
// and manifests, image configs, and the normalization of layer entry paths.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "daemon/image/layer.h"
#include "daemon/image/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace b3os::image;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (auto m = parse_docker_manifest(in)) {
    if (m->config.empty()) std::abort();
  } else if (!m.error().message.starts_with("image: ")) {
    std::abort();
  }
  if (auto n = parse_oci(in, "index.json")) {
    // A digest that came through is one blob_member accepts: no way to name another member.
    if (n->next && !blob_member(n->next->digest)) std::abort();
    for (const auto& l : n->manifest.layers)
      if (!blob_member(l.digest)) std::abort();
  }
  if (auto c = parse_image_config(in, "the config")) {
    for (const auto& id : c->diff_ids)
      if (!blob_member(id)) std::abort();
  }
  if (auto p = entry_path(in)) {
    if (p->starts_with('/') || p->ends_with('/') || p->find("//") != std::string::npos) std::abort();
    if (*p == ".." || p->starts_with("../") || p->find("/../") != std::string::npos || p->ends_with("/..")) std::abort();
  }
  (void)quote(in);
  return 0;
}
