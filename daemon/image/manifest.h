#pragma once
// What an image archive says about itself: docker-save's manifest.json, OCI indexes and image
// manifests, and the image config. Pure parsing, no I/O (unit-tested and fuzzed:
// tests/fuzz/image_fuzz.cc). Every error is kInvalidRequest with a message "image: ...".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "daemon/image/image.h"

namespace b3os::image {

/// A reference to a blob in an OCI index or manifest.
struct Descriptor {
  std::string media_type;
  std::string digest;    // "sha256:<64 lowercase hex>" (checked)
  uint64_t size = 0;
  std::string platform;  // "linux/amd64" when the descriptor gives one, else empty
};

/// The one image of a docker-save manifest.json: archive member paths as written there.
struct DockerImage {
  std::string config;
  std::vector<std::string> layers;
};

/// An OCI image manifest: the config blob and the layer blobs, lowest first.
struct OciManifest {
  Descriptor config;
  std::vector<Descriptor> layers;
};

/// An OCI index or image manifest, as read from index.json or a manifest blob: an index gives
/// the descriptor to follow (the one manifest it names, or linux/amd64 among several), an image
/// manifest gives its config and layers.
struct OciNode {
  std::optional<Descriptor> next;
  OciManifest manifest;
};

/// The image config: a container's defaults, and the layers' uncompressed digests
/// (rootfs.diff_ids, "sha256:<hex>"; empty when the config has none).
struct ImageConfig {
  Config defaults;
  std::vector<std::string> diff_ids;
};

/// Parses docker-save's manifest.json; it must list exactly one image.
Result<DockerImage> parse_docker_manifest(std::string_view json);
/// Parses an OCI index or image manifest; `what` names it in messages ("index.json").
Result<OciNode> parse_oci(std::string_view json, std::string_view what);
/// Parses an image config; `what` names it in messages.
Result<ImageConfig> parse_image_config(std::string_view json, std::string_view what);
/// The archive member of a blob, "blobs/sha256/<hex>"; refuses any digest but sha256:<64 hex>.
Result<std::string> blob_member(std::string_view digest);
/// The hex of a member named as a sha256 blob ("blobs/sha256/<64 hex>"), else empty.
std::string_view blob_hex(std::string_view member);

/// A name for messages: at most 160 bytes, control bytes and quotes escaped, in quotes.
std::string quote(std::string_view name);

}  // namespace b3os::image
