#pragma once
// `b3os templates ...`: build templates from a spec or an image tarball, follow their builds,
// list, show and delete them (docs/templates.md). The pure pieces (option checks, the spec sent,
// paths, what is printed) are here for the unit tests; templates.cc runs them.

#include <optional>
#include <string>
#include <string_view>

#include "cli/args.h"
#include "cli/commands.h"
#include "common/result.h"

namespace CLI {
class App;
}

namespace b3os::cli {

/// The options of `b3os templates build`.
struct TemplateBuildOptions {
  std::string spec_file;   // the positional FILE.json ("-": stdin), or ""
  std::string spec_flag;   // --spec FILE.json, the same given as a flag
  std::string from_image;  // --from-image IMAGE.tar: uploaded, then the spec's image.upload
  std::string name;        // --name: the spec's name (wins over the file's)
  std::string context;     // --context DIR or TAR: uploaded, then the spec's context.upload
  bool start = false;      // --start: "start": true (the image's entrypoint and cmd)
  bool follow = false;     // --follow: stream the log and exit with the build's outcome
  bool json = false;
};

/// The ids of what `templates build` uploaded before it sends the spec.
struct BuildUploads {
  std::optional<std::string> image;
  std::optional<std::string> context;
};

/// Checks the combination of build options before anything is read or uploaded.
Result<void> check_build_options(const TemplateBuildOptions& o);

/// The spec file the options name ("" if none): the positional one or --spec.
std::string spec_file_of(const TemplateBuildOptions& o);

/// Parses a spec file's text; it must hold one JSON object. `what` names the file in errors.
Result<Json> parse_spec_text(std::string_view text, const std::string& what);

/// The body of POST /v1/templates: `spec` (the file's, or {}) with the flags laid over it:
/// --name, image.upload, context.upload (the file's context.dest kept) and --start.
Result<Json> build_template_spec(Json spec, const TemplateBuildOptions& o, const BuildUploads& uploads);

/// "/v1/templates/NAME" + suffix, the name or id encoded.
std::string template_path(std::string_view name_or_id, std::string_view suffix = "");
/// The log of one build; with `follow` the answer stays open until the build ends.
std::string build_logs_path(std::string_view name_or_id, std::string_view build_id, bool follow);
/// DELETE's path, with ?force=true when asked.
std::string template_delete_path(std::string_view name_or_id, bool force);

/// How `build --follow` and `logs -f` end: 0 when the build is ready, kExitFailure otherwise.
int build_exit_status(const Json& build);

/// A size in bytes for people: "512 B", "9.5 KiB", "151 MiB"; null is "-".
std::string format_size(const Json& bytes);

/// Table of templates: NAME, ID, STATUS, VERSION, CHECKPOINT, SIZE, in the server's order
/// (built-in templates first).
std::string render_template_table(const Json& templates);
/// "key: value" lines of one template: the newest build summarized, its defaults flattened.
std::string render_template_details(const Json& tpl);
/// Table of a template's builds: VERSION, ID, STATUS, CREATED, FINISHED, NOTE (reuse or error).
std::string render_build_table(const Json& builds);
/// What `templates build` prints from POST's answer: template id, name, version, build id.
std::string render_build_started(const Json& reply);
/// Why a build failed: its step, exit code and message, then the output's tail.
std::string render_build_failure(const Json& build);

/// Registers `templates` (alone: list) and its build, list, get, builds, logs and rm.
void add_template_commands(CLI::App& app, const GlobalOptions& g, Action& action);

}  // namespace b3os::cli
