// `b3os templates ...`: each command's run_* and their registration with CLI11.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/context_archive.h"
#include "cli/table.h"
#include "cli/templates.h"
#include "common/unique_fd.h"

namespace b3os::cli {

namespace {

// How often `--follow` asks for the build's status after its log ended early (a dropped
// connection): the log ends with the build, so this is the exception.
constexpr auto kStatusPoll = std::chrono::seconds(1);

// Passes a log to a stream as it arrives.
class StreamSink : public ByteSink {
 public:
  explicit StreamSink(std::FILE* f) : f_(f) {}
  Result<void> open() override { return {}; }
  Result<void> write(const char* data, size_t size) override {
    if (std::fwrite(data, 1, size, f_) != size) return fail(errno_error(ErrorCode::kInternal, "writing the log", errno));
    std::fflush(f_);
    return {};
  }

 private:
  std::FILE* f_;
};

Result<std::string> read_spec_file(const std::string& path) {
  UniqueFd owned;
  int fd = STDIN_FILENO;
  if (path != "-") {
    owned.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned) return fail(errno_error(ErrorCode::kInvalidRequest, "open " + path, errno));
    fd = owned.get();
  }
  std::string out;
  char buf[64 << 10];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_error(ErrorCode::kInvalidRequest, "read " + path, errno));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// POSTs a tarball to /v1/templates/uploads (streamed from disk); the upload's id.
Result<std::string> upload_tarball(HttpClient& client, const std::string& local, const std::string& what) {
  auto resp = client.upload("/v1/templates/uploads", local, "POST", "application/x-tar");
  if (!resp) return fail(resp.error().wrap(what));
  auto reply = json_reply(*resp);
  if (!reply) return fail(reply.error().wrap(what));
  const Json id = reply->value("id", Json());
  if (!id.is_string()) return fail(ErrorCode::kInternal, what + ": the answer has no upload id");
  std::cerr << what << ": uploaded " << format_size(reply->value("size_bytes", Json())) << " as "
            << id.get<std::string>() << "\n";
  return id.get<std::string>();
}

// The context: a directory is packed first (the temporary tarball is removed on return), a file
// is taken to be a tarball and sent as it is.
Result<std::string> upload_context(HttpClient& client, const std::string& context) {
  struct stat st{};
  if (::stat(context.c_str(), &st) != 0) return fail(errno_error(ErrorCode::kInvalidRequest, "--context " + context, errno));
  if (!S_ISDIR(st.st_mode)) return upload_tarball(client, context, "--context " + context);
  auto packed = pack_directory(context);
  if (!packed) return fail(packed.error().wrap("--context"));
  if (packed->skipped > 0) {
    std::cerr << "--context " << context << ": left out " << packed->skipped << " sockets, FIFOs or devices\n";
  }
  return upload_tarball(client, packed->file.path(), "--context " + context);
}

// Follows a build's log into `out` until the build ends; then its final state. Exit status:
// 0 ready, 1 failed (its step, exit code and output tail on stderr).
int follow_build(HttpClient& client, const std::string& tpl, const std::string& build_id, std::FILE* out) {
  StreamSink sink(out);
  auto resp = client.download(build_logs_path(tpl, build_id, true), sink);
  if (!resp) return report_error(resp.error());
  if (resp->status < 200 || resp->status >= 300) return report_error(api_error(*resp));
  for (;;) {
    auto build = call_api(client, "GET", template_path(tpl, "/builds/" + url_encode(build_id)));
    if (!build) return report_error(build.error());
    const std::string status = build->value("status", std::string());
    if (status == "ready") return 0;
    if (status == "failed") {
      std::cerr << "error: " << render_build_failure(*build);
      return kExitFailure;
    }
    std::this_thread::sleep_for(kStatusPoll);
  }
}

int run_build(const GlobalOptions& g, const TemplateBuildOptions& o) {
  if (auto ok = check_build_options(o); !ok) {
    report_error(ok.error());
    return kExitUsage;
  }
  Json spec = Json::object();
  if (const std::string file = spec_file_of(o); !file.empty()) {
    auto text = read_spec_file(file);
    if (!text) return report_error(text.error());
    auto parsed = parse_spec_text(*text, file == "-" ? "stdin" : file);
    if (!parsed) return report_error(parsed.error());
    spec = std::move(*parsed);
  }
  // The spec is checked with stand-in ids before anything is uploaded.
  BuildUploads uploads;
  if (!o.from_image.empty()) uploads.image = "upl_";
  if (!o.context.empty()) uploads.context = "upl_";
  if (auto ok = build_template_spec(spec, o, uploads); !ok) return report_error(ok.error());

  auto client = make_client(g);
  if (!client) return report_error(client.error());
  if (!o.from_image.empty()) {
    auto id = upload_tarball(*client, o.from_image, "--from-image " + o.from_image);
    if (!id) return report_error(id.error());
    uploads.image = *id;
  }
  if (!o.context.empty()) {
    auto id = upload_context(*client, o.context);
    if (!id) return report_error(id.error());
    uploads.context = *id;
  }
  auto body = build_template_spec(std::move(spec), o, uploads);
  if (!body) return report_error(body.error());
  auto reply = call_api(*client, "POST", "/v1/templates", &*body);
  if (!reply) return report_error(reply.error());
  if (o.json) {
    print_json(*reply);
  } else {
    std::cout << render_build_started(*reply) << std::flush;
  }
  if (!o.follow) return 0;
  const Json b = reply->value("build", Json());
  if (!reply->value("id", Json()).is_string() || !b.is_object() || !b.value("id", Json()).is_string()) {
    return report_error(Error{ErrorCode::kInternal, "the answer names no build to follow", 0});
  }
  // With --json, stdout holds the answer alone; the log goes to stderr.
  return follow_build(*client, (*reply)["id"].get<std::string>(), b["id"].get<std::string>(), o.json ? stderr : stdout);
}

int run_list(const GlobalOptions& g, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "GET", "/v1/templates");
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << render_template_table(reply->value("data", Json::array()));
  }
  return 0;
}

int run_get(const GlobalOptions& g, const std::string& name, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "GET", template_path(name));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << render_template_details(*reply);
  }
  return 0;
}

int run_builds(const GlobalOptions& g, const std::string& name, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "GET", template_path(name, "/builds"));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << render_build_table(reply->value("data", Json::array()));
  }
  return 0;
}

int run_logs(const GlobalOptions& g, const std::string& name, std::string build_id, bool follow) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  if (build_id.empty()) {
    auto tpl = call_api(*client, "GET", template_path(name));
    if (!tpl) return report_error(tpl.error());
    const Json b = tpl->value("build", Json());
    if (!b.is_object() || !b.value("id", Json()).is_string()) {
      return report_error(Error{ErrorCode::kInvalidRequest, "template " + name + " has no builds (a built-in template)", 0});
    }
    build_id = b["id"].get<std::string>();
  }
  if (follow) return follow_build(*client, name, build_id, stdout);
  StreamSink sink(stdout);
  auto resp = client->download(build_logs_path(name, build_id, false), sink);
  if (!resp) return report_error(resp.error());
  if (resp->status < 200 || resp->status >= 300) return report_error(api_error(*resp));
  return 0;
}

int run_cancel(const GlobalOptions& g, const std::string& name, const std::string& build_id, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "POST", template_path(name, "/builds/" + build_id + "/cancel"));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    // A queued build is failed at once; a running one is stopping.
    std::cout << build_id << " " << (reply->value("cancelling", false) ? "cancelling" : reply->value("status", "?")) << "\n";
  }
  return 0;
}

int run_rm(const GlobalOptions& g, const std::string& name, bool force, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "DELETE", template_delete_path(name, force));
  if (!reply) {
    // The API's advice is its query parameter; say the flag.
    Error e = reply.error();
    if (e.code == ErrorCode::kConflict && e.message.find("force=true") != std::string::npos) e.message += " (b3os: templates rm --force)";
    return report_error(e);
  }
  if (json) {
    print_json(*reply);
  } else {
    std::cout << (reply->contains("id") ? format_cell((*reply)["id"]) : name) << "\n";
  }
  return 0;
}

// The arguments of the commands that take a template.
struct TemplateArgs {
  std::string name;
  std::string build_id;
  bool follow = false;
  bool force = false;
  bool json = false;
};

}  // namespace

void add_template_commands(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto* tp = app.add_subcommand("templates", "Build, list, show and delete templates (alone: list them)");
  tp->footer("See docs/templates.md for the spec. API errors exit 1, usage errors 2.\n");
  auto list_json = std::make_shared<bool>(false);
  tp->add_flag("--json", *list_json, "Print the list as JSON (without a command)");
  tp->callback([&g, &action, tp, list_json] {
    if (tp->get_subcommands().empty()) action = [&g, list_json] { return run_list(g, *list_json); };
  });

  auto build = std::make_shared<TemplateBuildOptions>();
  auto* b = tp->add_subcommand("build", "Build a template (or a new version of it) from a spec or an image tarball");
  b->footer(
      "  b3os templates build web.json [--context DIR|TAR] [-f]\n"
      "  b3os templates build --from-image app.tar --name app [--start] [--spec extra.json] [-f]\n"
      "Prints the template id, name, version and build id. With --follow, streams the build's log\n"
      "and exits 0 when the build is ready, 1 when it failed (its step, exit code and output tail).\n");
  b->add_option("spec", build->spec_file, "The spec, FILE.json (- for stdin)");
  b->add_option("--spec", build->spec_flag, "The spec, as a flag (with --from-image: fields added to it)");
  b->add_option("--from-image", build->from_image, "A `docker save` tarball or an OCI layout tar: uploaded, then the spec's image");
  b->add_option("--name", build->name, "The template's name (wins over the spec's)");
  b->add_option("--context", build->context, "A directory (packed here) or a .tar: uploaded, then the spec's context");
  b->add_flag("--start", build->start, "With --from-image: run the image's entrypoint and cmd in every sandbox");
  b->add_flag("-f,--follow", build->follow, "Stream the build's log; exit 0 when ready, 1 when it failed");
  b->add_flag("--json", build->json, "Print the template object as JSON (a followed log goes to stderr)");
  b->callback([&g, &action, build] { action = [&g, build] { return run_build(g, *build); }; });

  auto list = std::make_shared<TemplateArgs>();
  auto* l = tp->add_subcommand("list", "List templates: built-in first, then node-wide and the project's own");
  l->add_flag("--json", list->json, "Print the list as JSON");
  l->callback([&g, &action, list] { action = [&g, list] { return run_list(g, list->json); }; });

  auto get = std::make_shared<TemplateArgs>();
  auto* gc = tp->add_subcommand("get", "Show one template");
  gc->add_option("template", get->name, "Template name or id")->required();
  gc->add_flag("--json", get->json, "Print the template object as JSON");
  gc->callback([&g, &action, get] { action = [&g, get] { return run_get(g, get->name, get->json); }; });

  auto builds = std::make_shared<TemplateArgs>();
  auto* bs = tp->add_subcommand("builds", "List a template's builds (its versions), newest first");
  bs->add_option("template", builds->name, "Template name or id")->required();
  bs->add_flag("--json", builds->json, "Print the list as JSON");
  bs->callback([&g, &action, builds] { action = [&g, builds] { return run_builds(g, builds->name, builds->json); }; });

  auto logs = std::make_shared<TemplateArgs>();
  auto* lg = tp->add_subcommand("logs", "Print a build's log (default: the newest build's)");
  lg->footer("With -f, exits 0 when the build is ready and 1 when it failed.\n");
  lg->add_option("template", logs->name, "Template name or id")->required();
  lg->add_option("build", logs->build_id, "Build id (bld_...)");
  lg->add_flag("-f,--follow", logs->follow, "Keep printing until the build ends");
  lg->callback([&g, &action, logs] {
    action = [&g, logs] { return run_logs(g, logs->name, logs->build_id, logs->follow); };
  });

  auto cancel = std::make_shared<TemplateArgs>();
  auto* cn = tp->add_subcommand("cancel", "Stop a queued or running build of the project's");
  cn->add_option("template", cancel->name, "Template name or id")->required();
  cn->add_option("build", cancel->build_id, "Build id (bld_...)")->required();
  cn->add_flag("--json", cancel->json, "Print the build as JSON");
  cn->callback([&g, &action, cancel] {
    action = [&g, cancel] { return run_cancel(g, cancel->name, cancel->build_id, cancel->json); };
  });

  auto rm = std::make_shared<TemplateArgs>();
  auto* r = tp->add_subcommand("rm", "Delete a template (every version); prints its id");
  r->alias("delete");
  r->add_option("template", rm->name, "Template name or id")->required();
  r->add_flag("--force", rm->force, "Delete it even while sandboxes run it (they keep running)");
  r->add_flag("--json", rm->json, "Print the answer as JSON");
  r->callback([&g, &action, rm] { action = [&g, rm] { return run_rm(g, rm->name, rm->force, rm->json); }; });
}

}  // namespace b3os::cli
