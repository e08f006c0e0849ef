#include "cli/templates.h"

#include <cstdio>

#include "cli/commands.h"
#include "cli/table.h"

namespace b3os::cli {

namespace {

// "ready, 512 MiB", "building", "none", "off" (a built-in template's pool is off).
std::string checkpoint_cell(const Json& tpl) {
  const Json ck = tpl.is_object() ? tpl.value("checkpoint", Json()) : Json();
  if (!ck.is_object()) return "-";
  std::string out = field(ck, "status");
  const Json mem = ck.value("memory_mib", Json());
  if (mem.is_number_integer() && mem.get<int64_t>() > 0) out += ", " + std::to_string(mem.get<int64_t>()) + " MiB";
  return out;
}

// The template's status, and the newest build's when it differs: "ready (v3 building)".
std::string status_cell(const Json& tpl) {
  std::string out = field(tpl, "status");
  const Json b = tpl.value("build", Json());
  if (b.is_object() && b.value("status", Json()).is_string() && b["status"].get<std::string>() != out) {
    out += " (v" + field(b, "version") + " " + b["status"].get<std::string>() + ")";
  }
  return out;
}

// "bld_... (version 3, failed)"
std::string build_summary(const Json& b) {
  if (!b.is_object()) return format_cell(b);
  std::string out = field(b, "id") + " (version " + field(b, "version") + ", " + field(b, "status");
  if (b.value("reused_from", Json()).is_string()) out += ", reused from " + b["reused_from"].get<std::string>();
  return out + ")";
}

}  // namespace

Result<void> check_build_options(const TemplateBuildOptions& o) {
  if (!o.spec_file.empty() && !o.spec_flag.empty() && o.spec_file != o.spec_flag) {
    return fail(ErrorCode::kInvalidRequest, "templates build: two specs given (" + o.spec_file + " and --spec " +
                                                o.spec_flag + "); give one");
  }
  if (spec_file_of(o).empty() && o.from_image.empty()) {
    return fail(ErrorCode::kInvalidRequest, "templates build: give a spec FILE.json or --from-image IMAGE.tar");
  }
  if (o.start && o.from_image.empty()) {
    return fail(ErrorCode::kInvalidRequest,
                "templates build: --start runs the image's entrypoint and needs --from-image (a spec's own "
                "start command goes in its \"start\")");
  }
  if (o.context == "-" || o.from_image == "-") {
    return fail(ErrorCode::kInvalidRequest, "templates build: an upload is read from a file, not stdin");
  }
  return {};
}

std::string spec_file_of(const TemplateBuildOptions& o) { return o.spec_file.empty() ? o.spec_flag : o.spec_file; }

Result<Json> parse_spec_text(std::string_view text, const std::string& what) {
  Json spec;
  try {
    spec = Json::parse(text);  // throwing, for the parser's words on where the mistake is
  } catch (const nlohmann::json::exception& e) {
    return fail(ErrorCode::kInvalidRequest, what + ": not JSON: " + e.what());
  }
  if (!spec.is_object()) return fail(ErrorCode::kInvalidRequest, what + ": a template spec is a JSON object");
  return spec;
}

Result<Json> build_template_spec(Json spec, const TemplateBuildOptions& o, const BuildUploads& uploads) {
  if (!spec.is_object()) return fail(ErrorCode::kInvalidRequest, "a template spec is a JSON object");
  if (!o.name.empty()) spec["name"] = o.name;
  if (!spec.contains("name") || !spec["name"].is_string() || spec["name"].get<std::string>().empty()) {
    return fail(ErrorCode::kInvalidRequest, "templates build: the template needs a name (--name NAME, or \"name\" in the spec)");
  }
  if (uploads.image) {
    for (const char* k : {"from", "image"}) {
      if (spec.contains(k)) {
        return fail(ErrorCode::kInvalidRequest, std::string("templates build: --from-image and the spec's \"") + k +
                                                    "\" both say what the template starts from; keep one");
      }
    }
    spec["image"] = Json{{"upload", *uploads.image}};
  }
  if (o.start) spec["start"] = true;
  if (uploads.context) {
    Json ctx = spec.value("context", Json::object());
    if (!ctx.is_object()) return fail(ErrorCode::kInvalidRequest, "templates build: the spec's \"context\" is not an object");
    ctx["upload"] = *uploads.context;
    spec["context"] = std::move(ctx);
  }
  return spec;
}

std::string template_path(std::string_view name_or_id, std::string_view suffix) {
  return "/v1/templates/" + url_encode(name_or_id) + std::string(suffix);
}

std::string build_logs_path(std::string_view name_or_id, std::string_view build_id, bool follow) {
  std::string path = template_path(name_or_id, "/builds/" + url_encode(build_id) + "/logs");
  return follow ? path + "?follow=true" : path;
}

std::string template_delete_path(std::string_view name_or_id, bool force) {
  return template_path(name_or_id) + (force ? "?force=true" : "");
}

int build_exit_status(const Json& build) {
  return build.is_object() && build.value("status", Json()) == "ready" ? 0 : kExitFailure;
}

std::string format_size(const Json& bytes) {
  if (!bytes.is_number()) return format_cell(bytes);
  double v = bytes.get<double>();
  if (v < 1024) return std::to_string(static_cast<int64_t>(v)) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  v /= 1024;
  while (v >= 1024 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, kUnits[unit]);
  return buf;
}

std::string render_template_table(const Json& templates) {
  Table t({"NAME", "ID", "STATUS", "VERSION", "CHECKPOINT", "SIZE"});
  for (const auto& e : templates) {
    t.add_row({field(e, "name"), field(e, "id"), status_cell(e), field(e, "version"), checkpoint_cell(e),
               format_size(e.value("size_bytes", Json()))});
  }
  return t.render();
}

std::string render_template_details(const Json& tpl) {
  if (!tpl.is_object()) return render_key_values(flatten_object(tpl));
  Json out = Json::object();
  for (const char* key : {"id", "name", "description", "status", "version", "public", "ready_build_id"}) {
    if (tpl.contains(key)) out[key] = tpl[key];
  }
  const Json b = tpl.value("build", Json());
  if (b.is_object()) {
    out["build"] = build_summary(b);
    const Json err = b.value("error", Json());
    if (err.is_object()) out["build.error"] = field(err, "message");
  }
  if (tpl.contains("source")) out["source"] = tpl["source"];
  if (tpl.contains("size_bytes")) out["size"] = format_size(tpl["size_bytes"]);
  if (tpl.contains("checkpoint")) out["checkpoint"] = checkpoint_cell(tpl);
  Json defaults = tpl.value("defaults", Json::object());
  if (defaults.is_object()) {
    Json kept = Json::object();
    for (const auto& [k, v] : defaults.items()) {
      if (!v.is_null() && !(v.is_object() && v.empty())) kept[k] = v;
    }
    if (!kept.empty()) out["defaults"] = std::move(kept);
  }
  for (const auto& [key, value] : tpl.items()) {
    if (!out.contains(key) && key != "build" && key != "size_bytes" && key != "defaults") out[key] = value;
  }
  return render_key_values(flatten_object(out, {"object", "timing"}));
}

std::string render_build_table(const Json& builds) {
  Table t({"VERSION", "ID", "STATUS", "CREATED", "FINISHED", "NOTE"});
  for (const auto& b : builds) {
    std::string note = "-";
    const Json err = b.value("error", Json());
    if (err.is_object()) {
      note = field(err, "step") + " failed";
      if (err.value("exit_code", Json()).is_number()) note += " (exit " + field(err, "exit_code") + ")";
    } else if (b.value("reused_from", Json()).is_string()) {
      note = "reused " + b["reused_from"].get<std::string>();
    }
    t.add_row({field(b, "version"), field(b, "id"), field(b, "status"), format_time(b.value("created_at", Json())),
               format_time(b.value("finished_at", Json())), note});
  }
  return t.render();
}

std::string render_build_started(const Json& reply) {
  const Json b = reply.is_object() ? reply.value("build", Json()) : Json();
  std::vector<std::pair<std::string, std::string>> rows = {
      {"template", field(reply, "id")},
      {"name", field(reply, "name")},
      {"version", field(b, "version")},
      {"build", field(b, "id") + " (" + field(b, "status") +
                    (b.is_object() && b.value("reused_from", Json()).is_string()
                         ? ", reused from " + b["reused_from"].get<std::string>()
                         : std::string()) +
                    ")"}};
  return render_key_values(rows);
}

std::string render_build_failure(const Json& build) {
  const Json err = build.is_object() ? build.value("error", Json()) : Json();
  std::string out = "build " + field(build, "id") + " " + field(build, "status");
  if (!err.is_object()) return out + "\n";
  if (err.value("step", Json()).is_string()) out += " at step " + err["step"].get<std::string>();
  if (err.value("exit_code", Json()).is_number()) out += " (exit code " + field(err, "exit_code") + ")";
  const std::string message = err.value("message", Json()).is_string() ? err["message"].get<std::string>() : "";
  const std::string tail = err.value("output_tail", Json()).is_string() ? err["output_tail"].get<std::string>() : "";
  // A step's message is "STEP exited with N: " and its output: the tail alone says it once.
  if (tail.empty() || message.find(tail) == std::string::npos) out += ": " + message;
  if (!tail.empty()) out += (out.back() == '\n' ? "" : "\n") + std::string("output tail:\n") + tail;
  if (out.back() != '\n') out += '\n';
  return out;
}

}  // namespace b3os::cli
