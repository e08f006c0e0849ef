#include "daemon/image/image.h"

#include "daemon/image/archive.h"
#include "daemon/image/layer.h"
#include "daemon/image/manifest.h"

namespace b3os::image {

namespace {

// Indexes inside indexes: docker and buildkit write one level (platforms, attestations).
constexpr int kMaxIndexDepth = 4;

tl::unexpected<Error> bad(std::string message) { return fail(ErrorCode::kInvalidRequest, "image: " + std::move(message)); }

/// Which members hold the layers, lowest first, and what the config says.
struct Plan {
  std::string format;
  std::vector<std::string> layers;
  ImageConfig config;
};

Result<std::string> read_metadata(ImageArchive& a, std::string_view name, std::string_view what, const Limits& limits) {
  auto member = a.resolve(name, what);
  if (!member) return fail(member.error());
  return a.read(*member, limits.max_metadata_bytes, what);
}

Result<Plan> plan_docker(ImageArchive& a, const Limits& limits) {
  auto text = read_metadata(a, "manifest.json", "manifest.json", limits);
  if (!text) return fail(text.error());
  auto image = parse_docker_manifest(*text);
  if (!image) return fail(image.error());
  const std::string cfg_what = "the config " + quote(image->config);
  auto member = a.resolve(image->config, "manifest.json");
  if (!member) return fail(member.error());
  auto cfg = a.read(*member, limits.max_metadata_bytes, cfg_what);
  if (!cfg) return fail(cfg.error());
  Plan plan;
  plan.format = "docker-save";
  auto config = parse_image_config(*cfg, cfg_what);
  if (!config) return fail(config.error());
  plan.config = std::move(*config);
  for (const auto& layer : image->layers) {
    auto m = a.resolve(layer, "manifest.json");
    if (!m) return fail(m.error());
    plan.layers.push_back(std::move(*m));
  }
  return plan;
}

// A blob named by a descriptor: present, and of the size the descriptor says.
Result<std::string> blob(ImageArchive& a, const Descriptor& d, std::string_view what) {
  auto name = blob_member(d.digest);
  if (!name) return fail(name.error());
  auto member = a.resolve(*name, what);
  if (!member) return fail(member.error());
  if (a.size(*member) != d.size)
    return bad("the blob " + quote(*name) + " is " + std::to_string(a.size(*member)) + " bytes; " + std::string(what) +
               " says " + std::to_string(d.size));
  return member;
}

Result<Plan> plan_oci(ImageArchive& a, const Limits& limits) {
  auto text = read_metadata(a, "index.json", "index.json", limits);
  if (!text) return fail(text.error());
  auto node = parse_oci(*text, "index.json");
  if (!node) return fail(node.error());
  std::string what = "index.json";
  for (int depth = 0; node->next; ++depth) {
    if (depth == kMaxIndexDepth) return bad("index.json nests indexes more than 4 deep");
    auto member = blob(a, *node->next, what);
    if (!member) return fail(member.error());
    what = "the manifest " + quote(*member);
    auto body = a.read(*member, limits.max_metadata_bytes, what);
    if (!body) return fail(body.error());
    node = parse_oci(*body, what);
    if (!node) return fail(node.error());
  }
  Plan plan;
  plan.format = "oci-layout";
  auto cfg_member = blob(a, node->manifest.config, what);
  if (!cfg_member) return fail(cfg_member.error());
  const std::string cfg_what = "the config " + quote(*cfg_member);
  auto cfg = a.read(*cfg_member, limits.max_metadata_bytes, cfg_what);
  if (!cfg) return fail(cfg.error());
  auto config = parse_image_config(*cfg, cfg_what);
  if (!config) return fail(config.error());
  plan.config = std::move(*config);
  for (const auto& d : node->manifest.layers) {
    auto m = blob(a, d, what);
    if (!m) return fail(m.error());
    plan.layers.push_back(std::move(*m));
  }
  return plan;
}

/// The image's plan (format, config, layers in order), its diff_ids matching its layers.
Result<Plan> plan_of(ImageArchive& a, const Limits& limits) {
  Result<Plan> plan = a.contains("manifest.json") ? plan_docker(a, limits)
                      : a.contains("index.json")  ? plan_oci(a, limits)
                                                  : bad("the archive is not an image: it has neither manifest.json "
                                                        "(docker save) nor index.json (an OCI image layout)");
  if (!plan) return plan;
  if (!plan->config.diff_ids.empty() && plan->config.diff_ids.size() != plan->layers.size())
    return bad("the config lists " + std::to_string(plan->config.diff_ids.size()) + " rootfs.diff_ids for " +
               std::to_string(plan->layers.size()) + " layers");
  return plan;
}

}  // namespace

Result<Config> inspect(const std::string& archive, const Limits& limits) {
  auto a = ImageArchive::open(archive, limits);
  if (!a) return fail(a.error());
  auto plan = plan_of(*a, limits);
  if (!plan) return fail(plan.error());
  Config out = std::move(plan->config.defaults);
  out.format = plan->format;
  out.layers = static_cast<int>(plan->layers.size());
  return out;
}

Result<Config> import(const std::string& archive, const std::string& rootfs, const Limits& limits,
                      const std::function<void(std::string_view)>& log) {
  auto a = ImageArchive::open(archive, limits);
  if (!a) return fail(a.error());
  auto plan = plan_of(*a, limits);
  if (!plan) return fail(plan.error());
  const auto& diff_ids = plan->config.diff_ids;
  const size_t n = plan->layers.size();
  if (log) log("image: " + plan->format + " archive, " + std::to_string(n) + " layers");

  auto writer = LayerWriter::open(rootfs, limits);
  if (!writer) return fail(writer.error());
  auto streamed = a->stream(plan->layers, [&](size_t i, MemberReader& m) -> Result<void> {
    const std::string name = "layer " + std::to_string(i + 1) + " of " + std::to_string(n) + " (" + m.name() + ")";
    const BlockSource source = [&m] { return m.next(); };
    // docker 25+ saves layers uncompressed as blobs: their diff_id is their name, which
    // MemberReader checks already; hashing the same bytes twice would cost a third of the time.
    const bool want_diff = !diff_ids.empty() && diff_ids[i] != "sha256:" + std::string(blob_hex(m.name()));
    auto applied = writer->apply(source, m.size(), name, want_diff);
    if (!applied) return fail(applied.error());
    // The blob's own digest first: a changed blob is said to be changed, not to differ from
    // the config.
    if (auto ok = m.finish(); !ok) return ok;
    if (want_diff && "sha256:" + applied->diff_id != diff_ids[i])
      return bad(name + " is sha256:" + applied->diff_id + " uncompressed; the config's rootfs.diff_ids says " +
                 diff_ids[i]);
    if (log)
      log("image: " + name + ": " + std::to_string(applied->entries) + " entries, " + std::to_string(applied->bytes) +
          " bytes");
    return {};
  });
  if (!streamed) return fail(streamed.error());

  Config out = std::move(plan->config.defaults);
  out.format = plan->format;
  out.layers = static_cast<int>(n);
  out.bytes = writer->total_bytes();
  out.entries = writer->total_entries();
  return out;
}

}  // namespace b3os::image
