#include "daemon/image/manifest.h"

#include <nlohmann/json.hpp>

#include "common/json.h"

namespace b3os::image {

namespace {

using Json = nlohmann::json;

// The images we read nest a few levels (config.ExposedPorts.{port}); deeper JSON is refused
// before it is parsed, since copying it recurses.
constexpr size_t kMaxDepth = 64;

constexpr std::string_view kIndexTypes[] = {"application/vnd.oci.image.index.v1+json",
                                            "application/vnd.docker.distribution.manifest.list.v2+json"};

tl::unexpected<Error> bad(std::string message) { return fail(ErrorCode::kInvalidRequest, "image: " + std::move(message)); }

Result<Json> parse_json(std::string_view text, std::string_view what) {
  if (json_depth(text) > kMaxDepth) return bad(std::string(what) + " nests deeper than 64 levels");
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded()) return bad(std::string(what) + " is not JSON");
  return j;
}

// A member that must be a string when present; `out` is left alone when absent or null.
Result<void> get_string(const Json& obj, const char* key, std::string& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (!it->is_string()) return bad(std::string(what) + "'s " + key + " is not a string");
  out = it->get<std::string>();
  return {};
}

Result<void> get_strings(const Json& obj, const char* key, std::vector<std::string>& out, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return {};
  if (!it->is_array()) return bad(std::string(what) + "'s " + key + " is not a list of strings");
  for (const auto& v : *it) {
    if (!v.is_string()) return bad(std::string(what) + "'s " + key + " is not a list of strings");
    out.push_back(v.get<std::string>());
  }
  return {};
}

bool is_sha256_hex(std::string_view hex) {
  if (hex.size() != 64) return false;
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Result<void> check_digest(std::string_view digest, std::string_view what) {
  if (digest.starts_with("sha256:") && is_sha256_hex(digest.substr(7))) return {};
  return bad(std::string(what) + " has digest " + quote(digest) + ", not sha256:<64 lowercase hex> (the only kind read)");
}

Result<Descriptor> parse_descriptor(const Json& j, const std::string& what) {
  if (!j.is_object()) return bad(what + " is not a descriptor object");
  Descriptor d;
  if (auto r = get_string(j, "mediaType", d.media_type, what); !r) return fail(r.error());
  if (auto r = get_string(j, "digest", d.digest, what); !r) return fail(r.error());
  if (d.digest.empty()) return bad(what + " has no digest");
  if (auto r = check_digest(d.digest, what); !r) return fail(r.error());
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_unsigned()) return bad(what + " has no size (a non-negative integer)");
  d.size = size->get<uint64_t>();
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    std::string os, arch;
    if (auto r = get_string(*p, "os", os, what + ".platform"); !r) return fail(r.error());
    if (auto r = get_string(*p, "architecture", arch, what + ".platform"); !r) return fail(r.error());
    d.platform = os + "/" + arch;
  }
  return d;
}

bool is_index_type(std::string_view t) {
  for (auto k : kIndexTypes)
    if (t == k) return true;
  return false;
}

}  // namespace

std::string quote(std::string_view name) {
  constexpr size_t kMax = 160;
  std::string out = "\"";
  for (size_t i = 0; i < name.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMax) out += "...";
  return out + "\"";
}

Result<std::string> blob_member(std::string_view digest) {
  if (auto r = check_digest(digest, "a descriptor"); !r) return fail(r.error());
  return "blobs/sha256/" + std::string(digest.substr(7));
}

std::string_view blob_hex(std::string_view member) {
  constexpr std::string_view kPrefix = "blobs/sha256/";
  if (!member.starts_with(kPrefix)) return {};
  auto hex = member.substr(kPrefix.size());
  return is_sha256_hex(hex) ? hex : std::string_view{};
}

Result<DockerImage> parse_docker_manifest(std::string_view text) {
  auto j = parse_json(text, "manifest.json");
  if (!j) return fail(j.error());
  if (!j->is_array()) return bad("manifest.json is not a list of images");
  if (j->size() != 1)
    return bad("manifest.json lists " + std::to_string(j->size()) +
               " images; an archive must hold exactly one (docker save with a single image)");
  const Json& img = (*j)[0];
  if (!img.is_object()) return bad("manifest.json's image is not an object");
  DockerImage out;
  if (auto r = get_string(img, "Config", out.config, "manifest.json"); !r) return fail(r.error());
  if (out.config.empty()) return bad("manifest.json names no Config");
  auto layers = img.find("Layers");
  if (layers == img.end() || !layers->is_array()) return bad("manifest.json has no Layers list");
  if (auto r = get_strings(img, "Layers", out.layers, "manifest.json"); !r) return fail(r.error());
  return out;
}

Result<OciNode> parse_oci(std::string_view text, std::string_view what_view) {
  const std::string what(what_view);
  auto j = parse_json(text, what);
  if (!j) return fail(j.error());
  if (!j->is_object()) return bad(what + " is not a JSON object");
  if (auto v = j->find("schemaVersion"); v != j->end() && *v != 2)
    return bad(what + " has schemaVersion " + v->dump() + ", not 2");
  OciNode node;
  if (auto m = j->find("manifests"); m != j->end()) {
    if (!m->is_array()) return bad(what + "'s manifests is not a list");
    if (m->empty()) return bad(what + " lists no manifests");
    std::vector<Descriptor> all;
    for (size_t i = 0; i < m->size(); ++i) {
      auto d = parse_descriptor((*m)[i], what + " manifests[" + std::to_string(i) + "]");
      if (!d) return fail(d.error());
      all.push_back(std::move(*d));
    }
    if (all.size() == 1) {
      node.next = std::move(all[0]);
      return node;
    }
    // Several: the one for this node's platform, when the entries say which is which.
    std::vector<Descriptor> amd64;
    for (auto& d : all)
      if (d.platform == "linux/amd64") amd64.push_back(d);
    if (amd64.size() != 1)
      return bad(what + " lists " + std::to_string(all.size()) + " manifests and " + std::to_string(amd64.size()) +
                 " of them for linux/amd64; it must name one image (save a single image, or one platform)");
    node.next = std::move(amd64[0]);
    return node;
  }
  auto layers = j->find("layers");
  auto config = j->find("config");
  if (layers == j->end() || config == j->end()) return bad(what + " is neither an OCI index nor an image manifest");
  if (auto mt = j->find("mediaType"); mt != j->end() && mt->is_string() && is_index_type(mt->get<std::string>()))
    return bad(what + " says it is an index but has no manifests");
  auto c = parse_descriptor(*config, what + " config");
  if (!c) return fail(c.error());
  node.manifest.config = std::move(*c);
  if (!layers->is_array()) return bad(what + "'s layers is not a list");
  for (size_t i = 0; i < layers->size(); ++i) {
    const std::string name = what + " layers[" + std::to_string(i) + "]";
    auto d = parse_descriptor((*layers)[i], name);
    if (!d) return fail(d.error());
    // Encrypted layers need keys we do not have; anything else but a tar is not a filesystem
    // layer (compression is found from the bytes, not the name).
    if (d->media_type.find("+encrypted") != std::string::npos ||
        (!d->media_type.empty() && d->media_type.find("tar") == std::string::npos))
      return bad(name + " has media type " + quote(d->media_type) + ", which is not a tar layer this importer reads");
    node.manifest.layers.push_back(std::move(*d));
  }
  return node;
}

Result<ImageConfig> parse_image_config(std::string_view text, std::string_view what_view) {
  const std::string what(what_view);
  auto j = parse_json(text, what);
  if (!j) return fail(j.error());
  if (!j->is_object()) return bad(what + " is not a JSON object");
  ImageConfig out;
  if (auto c = j->find("config"); c != j->end() && !c->is_null()) {
    if (!c->is_object()) return bad(what + "'s config is not an object");
    Config& d = out.defaults;
    const std::string w = what + " config";
    for (auto r : {get_strings(*c, "Entrypoint", d.entrypoint, w), get_strings(*c, "Cmd", d.cmd, w),
                   get_strings(*c, "Env", d.env, w), get_string(*c, "WorkingDir", d.workdir, w),
                   get_string(*c, "User", d.user, w)})
      if (!r) return fail(r.error());
    if (auto p = c->find("ExposedPorts"); p != c->end() && !p->is_null()) {
      if (!p->is_object()) return bad(w + "'s ExposedPorts is not an object");
      for (auto it = p->begin(); it != p->end(); ++it) d.exposed_ports.push_back(it.key());
    }
  }
  if (auto rootfs = j->find("rootfs"); rootfs != j->end() && rootfs->is_object()) {
    if (auto r = get_strings(*rootfs, "diff_ids", out.diff_ids, what + " rootfs"); !r) return fail(r.error());
    for (const auto& id : out.diff_ids)
      if (auto r = check_digest(id, what + " rootfs.diff_ids"); !r) return fail(r.error());
  }
  return out;
}

}  // namespace b3os::image
