#pragma once
// What a user asks a template build for (docs/templates.md), as plain structs, and the
// validation that turns the JSON of `POST /v1/templates` into them. Pure logic: no I/O
// (unit-tested and fuzzed). Errors are 400 invalid_request naming the field.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/sandbox/spec.h"

namespace b3os::tpl {

/// A file the build places: inline content, with its mode and owner.
struct FileSpec {
  std::string path;     // absolute
  std::string content;  // bytes
  int mode = 0644;
  std::string owner;    // "user[:group]" inside; "" root
};

/// The check that says the `start` command is up.
struct ReadySpec {
  std::optional<int> port;             // something listens on this TCP port
  std::optional<std::string> command;  // a shell line that exits 0
  std::optional<std::string> file;     // this path exists
  int timeout_s = 60;
  bool any() const { return port || command || file; }
};

/// Where the build's root comes from.
struct SourceSpec {
  /// "base", "debian:bookworm", or a template of the project (name or tpl_ id).
  std::string from = "base";
  /// An image tarball instead: an upload (upl_...) or a path on the node the operator allows.
  std::optional<std::string> image_upload, image_path;
  bool image() const { return image_upload || image_path; }
};

struct TemplateSpec {
  std::string name;
  SourceSpec source;
  std::vector<std::string> packages;
  std::vector<FileSpec> files;
  std::optional<std::string> context_upload;  // a tar extracted (inside the build) into context_dest
  std::string context_dest = "/workspace";
  std::vector<std::string> run;
  std::map<std::string, std::string> env;
  std::string workdir;  // "" : /workspace
  std::string user;     // "" : root
  /// A shell line left running in every sandbox; `start_from_image`: the image's entrypoint and
  /// cmd instead.
  std::optional<std::string> start;
  bool start_from_image = false;
  ReadySpec ready;
  std::optional<int> vcpu, memory_mib, disk_gib;
  /// Sandboxes of it kept restored and frozen for non-forkable creates without a network.
  int warm_pool = 0;
  /// The build sandbox: its egress (public by default, or an allowlist), time and size limits.
  sandbox::EgressSpec build_egress{"public", {}};
  std::optional<int> build_timeout_s, build_disk_gib;

  /// Whether anything runs in a build sandbox (else the parent's root is used as it is).
  bool has_steps() const {
    return !packages.empty() || !files.empty() || context_upload || !run.empty() || !user.empty();
  }
};

/// Limits the node places on specs.
struct SpecLimits {
  int max_build_timeout_s = 1800;
  int max_build_disk_gib = 16;
  size_t max_files_bytes = 512 * 1024;
  int max_warm_pool = 4;
  sandbox::SpecLimits sandbox;
};

/// Validates a template spec. Unknown fields are refused.
Result<TemplateSpec> parse_template_spec(const nlohmann::json& body, const SpecLimits& limits);

/// The spec as it is hashed (everything that shapes the result, not the name), canonical:
/// keys sorted, defaults filled in.
nlohmann::json canonical(const TemplateSpec& s);

/// A template name: 1-64 of a-z 0-9 - _ ., starting with a letter or digit; not a built-in
/// name and not an id (tpl_, bld_).
bool valid_template_name(const std::string& name);

/// A Debian package name (with an optional =version), as apt takes it.
bool valid_package(const std::string& p);

}  // namespace b3os::tpl
