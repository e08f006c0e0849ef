#include "daemon/mcp/tools.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdint>

#include "daemon/sandbox/requests.h"

namespace b3os::mcp {

using nlohmann::json;
using sandbox::Principal;
using sandbox::Timing;

// ---- schemas ----

namespace {

json obj(json properties, std::vector<std::string> required = {}, bool closed = true) {
  json s = {{"type", "object"}, {"properties", std::move(properties)}};
  if (!required.empty()) s["required"] = required;
  if (closed) s["additionalProperties"] = false;
  return s;
}
json str(const std::string& description) { return {{"type", "string"}, {"description", description}}; }
json integer(const std::string& description, int64_t min, int64_t max) {
  return {{"type", "integer"}, {"minimum", min}, {"maximum", max}, {"description", description}};
}
json boolean(const std::string& description) { return {{"type", "boolean"}, {"description", description}}; }
json string_map(const std::string& description) {
  return {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}, {"description", description}};
}

const json kSandboxId = str("The sandbox's id, sbx_... (from sandbox_create or sandbox_list).");

/// The sandbox object as the REST API returns it (docs/api.md); open to fields added later.
json sandbox_schema() {
  return obj({{"id", {{"type", "string"}}},
              {"object", {{"type", "string"}}},
              {"status", {{"type", "string"}, {"enum", {"starting", "running", "paused", "stopped", "failed"}}}},
              {"host_id", {{"type", "string"}}},
              {"template", {{"type", {"object", "null"}}}},
              {"vcpu", {{"type", "integer"}}},
              {"memory_mib", {{"type", "integer"}}},
              {"disk_gib", {{"type", "integer"}}},
              {"egress", {{"type", "object"}}},
              {"ports", {{"type", "array"}}},
              {"metadata", {{"type", "object"}}},
              {"forkable", {{"type", "boolean"}}}},
             {"id", "status"}, false);
}
json list_schema(json item) {
  return obj({{"object", {{"type", "string"}}},
              {"data", {{"type", "array"}, {"items", std::move(item)}}},
              {"next_cursor", {{"type", {"string", "null"}}}}},
             {"data"}, false);
}
json snapshot_schema() {
  return obj({{"id", {{"type", "string"}}}, {"object", {{"type", "string"}}}, {"sandbox_id", {{"type", "string"}}},
              {"size_bytes", {{"type", "integer"}}}, {"created_at", {{"type", "string"}}}},
             {"id"}, false);
}

// ---- helpers ----

Result<std::string> required_string(const json& args, const std::string& name) {
  auto it = args.find(name);
  if (it == args.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
    return fail(ErrorCode::kInvalidRequest, name + ": is required (a non-empty string)");
  return it->get<std::string>();
}

/// The arguments minus `drop`, for the REST parsers (which refuse fields they do not know).
json without(const json& args, std::initializer_list<const char*> drop) {
  json out = args;
  for (auto* k : drop) out.erase(k);
  return out;
}

ToolResult object_result(json structured, const std::string& text) { return ToolResult{std::move(structured), text, false}; }

// The sandbox and the process a process tool names (sandbox_id, process_id: proc_N or a pid).
Result<std::pair<std::string, std::string>> process_args(const json& args) {
  auto id = required_string(args, "sandbox_id");
  if (!id) return fail(id.error());
  auto proc = required_string(args, "process_id");
  if (!proc) return fail(proc.error());
  if (!sandbox::valid_process_key(*proc)) return fail(ErrorCode::kProcessNotFound, "no process \"" + *proc + "\"");
  return std::pair{std::move(*id), std::move(*proc)};
}

std::string sandbox_line(const json& s) {
  std::string line = s.value("id", "?") + " " + s.value("status", "?");
  if (s.contains("template") && s["template"].is_object()) line += " template=" + s["template"].value("name", "?");
  if (s.contains("egress") && s["egress"].is_object()) line += " egress=" + s["egress"].value("mode", "?");
  return line;
}

std::string clip(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  return s.substr(0, n) + "\n... (" + std::to_string(s.size() - n) + " more bytes in structuredContent)";
}

Result<sandbox::Params> params_from(const json& args, std::initializer_list<const char*> names) {
  sandbox::Params p;
  for (auto* n : names) {
    auto it = args.find(n);
    if (it == args.end() || it->is_null()) continue;
    if (it->is_string()) p.emplace_back(n, it->get<std::string>());
    else if (it->is_number_integer()) p.emplace_back(n, std::to_string(it->get<int64_t>()));
    else return fail(ErrorCode::kInvalidRequest, std::string(n) + ": must be a string or an integer");
  }
  return p;
}

Result<void> only(const json& args, std::initializer_list<const char*> names) {
  for (auto it = args.begin(); it != args.end(); ++it) {
    const std::string& k = it.key();
    if (std::none_of(names.begin(), names.end(), [&k](const char* n) { return k == n; }))
      return fail(ErrorCode::kInvalidRequest, k + ": unknown argument");
  }
  return {};
}

}  // namespace

json Tool::listing() const {
  return json{{"name", name},
              {"title", title},
              {"description", description},
              {"inputSchema", input_schema},
              {"outputSchema", output_schema},
              {"annotations", {{"title", title}}}};
}

const std::vector<std::string>& Tools::toolsets() {
  static const std::vector<std::string> kSets = {"sandboxes", "snapshots", "templates"};
  return kSets;
}

const Tool* Tools::find(std::string_view name) const {
  for (auto& t : tools_)
    if (t.name == name) return &t;
  return nullptr;
}

Tools::Tools(sandbox::SandboxService& sb, ToolsConfig cfg, tpl::TemplateService* templates)
    : sandboxes_(sb), cfg_(cfg) {
  auto& S = sandboxes_;
  const auto limits = cfg_.limits;
  const size_t max_file = cfg_.max_file_bytes;

  // ---- sandboxes ----
  tools_.push_back(Tool{
      "sandbox_create", "Create a sandbox",
      "Start a new isolated Linux sandbox (gVisor) and return it. It runs until deleted or until timeout_s "
      "passes with no activity. Files live under /workspace. Network: egress deny (the default) has no "
      "network at all; public reaches the internet (never private ranges); allowlist reaches only the names "
      "and CIDRs listed. This tool cannot make a sandbox forkable or give it a model grant: a sandbox that "
      "needs those is created by a person with the REST API.",
      "sandboxes",
      obj({{"template", str("Template name; default \"base\" (Debian with python3, curl, procps).")},
           {"timeout_s", integer("Seconds of inactivity before the sandbox stops (or pauses, see on_idle).", 1,
                                 limits.max_timeout_s)},
           {"on_idle", {{"type", "string"}, {"enum", {"stop", "pause"}}, {"description", "What the timeout does."}}},
           {"vcpu", integer("Virtual CPUs.", 1, limits.max_vcpu)},
           {"memory_mib", integer("Memory in MiB.", 128, limits.max_memory_mib)},
           {"disk_gib", integer("Disk in GiB.", 1, limits.max_disk_gib)},
           {"env", string_map("Environment variables set in every command.")},
           {"metadata", string_map("Up to 16 labels (key: value) to find the sandbox again.")},
           {"egress", obj({{"mode", {{"type", "string"}, {"enum", {"deny", "public", "allowlist"}}}},
                           {"allow", {{"type", "array"}, {"items", {{"type", "string"}}},
                                      {"description", "allowlist entries: api.github.com, *.pypi.org, 203.0.113.0/24, name:port"}}}},
                          {"mode"})},
           {"ports", {{"type", "array"},
                      {"items", obj({{"port", integer("Port inside the sandbox.", 1, 65535)},
                                     {"public", boolean("A long-lived preview URL in the sandbox object.")}},
                                    {"port"})},
                      {"description", "Ports reachable from outside through preview URLs."}}}}),
      sandbox_schema(),
      [&S, limits](const json& args, CallContext& ctx) -> Result<ToolResult> {
        for (const char* k : {"forkable", "api", "snapshot", "secrets"})
          if (args.contains(k))
            return fail(ErrorCode::kInvalidRequest,
                        std::string(k) + ": not available through MCP (an agent cannot give itself forks of its own, "
                                         "model spend, a snapshot's grants or secrets); create such a sandbox with the REST API");
        auto spec = sandbox::parse_create(args, limits);
        if (!spec) return fail(spec.error());
        Timing& t = ctx.timing;
        auto r = S.create(ctx.principal, *spec, t);
        if (!r) return fail(r.error());
        return object_result(*r, "created " + sandbox_line(*r));
      }});

  tools_.push_back(Tool{
      "sandbox_list", "List sandboxes",
      "List this project's sandboxes, newest first, one page at a time (pass next_cursor back as cursor).",
      "sandboxes",
      obj({{"status", {{"type", "string"}, {"enum", {"running", "paused", "stopped", "failed"}}}},
           {"limit", integer("Page size.", 1, 100)},
           {"cursor", str("next_cursor of the previous page.")}}),
      list_schema(sandbox_schema()),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"status", "limit", "cursor"}); !o) return fail(o.error());
        auto params = params_from(args, {"status", "limit", "cursor"});
        if (!params) return fail(params.error());
        auto q = sandbox::parse_list_sandboxes(*params);
        if (!q) return fail(q.error());
        auto r = S.list(ctx.principal, *q);
        if (!r) return fail(r.error());
        std::string text;
        for (auto& s : (*r)["data"]) text += sandbox_line(s) + "\n";
        if (text.empty()) text = "no sandboxes\n";
        if (!(*r)["next_cursor"].is_null()) text += "more: cursor " + (*r)["next_cursor"].get<std::string>() + "\n";
        return object_result(*r, text);
      }});

  const auto by_id = [&](std::string name, std::string title, std::string description, json out,
                         std::function<Result<json>(const Principal&, const std::string&, Timing&)> call,
                         std::function<std::string(const json&)> render) {
    tools_.push_back(Tool{std::move(name), std::move(title), std::move(description), "sandboxes",
                          obj({{"sandbox_id", kSandboxId}}, {"sandbox_id"}), std::move(out),
                          [call, render](const json& args, CallContext& ctx) -> Result<ToolResult> {
                            if (auto o = only(args, {"sandbox_id"}); !o) return fail(o.error());
                            auto id = required_string(args, "sandbox_id");
                            if (!id) return fail(id.error());
                            auto r = call(ctx.principal, *id, ctx.timing);
                            if (!r) return fail(r.error());
                            return object_result(*r, render(*r));
                          }});
  };
  by_id("sandbox_get", "Get a sandbox", "Return one sandbox: its status, resources, egress, ports and usage.",
        sandbox_schema(), [&S](const Principal& p, const std::string& id, Timing&) { return S.get(p, id); }, sandbox_line);
  by_id("sandbox_delete", "Delete a sandbox",
        "Stop a sandbox and remove it with its files and processes. It cannot be undone.", sandbox_schema(),
        [&S](const Principal& p, const std::string& id, Timing& t) { return S.remove(p, id, t); },
        [](const json& s) { return "deleted " + sandbox_line(s); });
  by_id("sandbox_pause", "Pause a sandbox",
        "Freeze a running sandbox (its processes stop; memory and files stay). sandbox_resume continues it.",
        sandbox_schema(),
        [&S](const Principal& p, const std::string& id, Timing& t) { return S.pause(p, id, t); },
        sandbox_line);
  by_id("sandbox_resume", "Resume a sandbox", "Continue a paused sandbox where it stopped.", sandbox_schema(),
        [&S](const Principal& p, const std::string& id, Timing& t) { return S.resume(p, id, t); },
        sandbox_line);
  by_id("sandbox_snapshot", "Snapshot a sandbox",
        "Save a running sandbox's memory, files and processes to disk; it keeps running. A person restores a "
        "snapshot with the REST API.",
        snapshot_schema(),
        [&S](const Principal& p, const std::string& id, Timing& t) { return S.snapshot(p, id, t); },
        [](const json& s) { return "snapshot " + s.value("id", "?") + " of " + s.value("sandbox_id", "?"); });

  tools_.push_back(Tool{
      "sandbox_exec", "Run a command in a sandbox",
      "Run a command inside a sandbox and wait for it: a string runs with /bin/sh -c (pipes, &&, redirects), "
      "an array runs that program with those arguments. Returns exit_code, stdout and stderr (each cut at 1 MiB). "
      "A command that runs past timeout_ms is killed and the result says timed_out. To leave a server running, "
      "start it in the background (nohup ... &).",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId},
           {"cmd", {{"description", "A shell command line, or an argv array."},
                    {"anyOf", {{{"type", "string"}}, {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}}}}}},
           {"env", string_map("More environment variables for this command.")},
           {"cwd", str("Working directory; default /workspace.")},
           {"timeout_ms", integer("Kill the command after this many milliseconds; default 60000.", 1, 86400000)},
           {"stdin", str("Bytes to send to the command's standard input.")},
           {"user", str("Run as this user instead of root: a name in the sandbox's /etc/passwd, UID or UID:GID.")}},
          {"sandbox_id", "cmd"}),
      obj({{"exit_code", {{"type", "integer"}}},
           {"stdout", {{"type", "string"}}},
           {"stderr", {{"type", "string"}}},
           {"timed_out", {{"type", "boolean"}}},
           {"duration_ms", {{"type", "number"}}},
           {"stdout_truncated", {{"type", "boolean"}}},
           {"stderr_truncated", {{"type", "boolean"}}}},
          {"exit_code", "stdout", "stderr", "timed_out"}, false),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto spec = sandbox::parse_exec(without(args, {"sandbox_id"}));
        if (!spec) return fail(spec.error());
        Timing& t = ctx.timing;
        const auto start = std::chrono::steady_clock::now();
        auto last = start;
        // Progress notifications carry the output as it comes (at most every 0.5 s, the new
        // output since the last one, clipped), and "running" when there is none.
        std::string fresh;
        auto report = [&](bool force) {
          const auto now = std::chrono::steady_clock::now();
          if (!ctx.progress || (!force && now - last < std::chrono::milliseconds(500))) return;
          if (fresh.empty() && now - last < std::chrono::seconds(1)) return;
          last = now;
          ctx.progress(std::chrono::duration<double>(now - start).count(), fresh.empty() ? "running" : clip(fresh, 2000));
          fresh.clear();
        };
        sandbox::Exec::OutputSink on_output = [&](bool, std::string_view bytes) {
          if (fresh.size() < 8192) fresh.append(bytes.substr(0, 8192 - fresh.size()));
          report(false);
          return true;
        };
        auto r = S.exec(ctx.principal, *id, *spec, t, [&] {
          report(false);
          return ctx.cancelled && ctx.cancelled();
        }, on_output);
        if (!r) return fail(r.error());
        json out = {{"exit_code", r->exit_code},
                    {"stdout", r->stdout_data},
                    {"stderr", r->stderr_data},
                    {"timed_out", r->timed_out},
                    {"duration_ms", std::round(r->duration_ms * 1000.0) / 1000.0},
                    {"stdout_truncated", r->stdout_truncated},
                    {"stderr_truncated", r->stderr_truncated}};
        std::string text = r->timed_out ? "timed out after " + std::to_string(spec->timeout_ms) + " ms (killed)\n"
                                        : "exit " + std::to_string(r->exit_code) + "\n";
        if (!r->stdout_data.empty()) text += "--- stdout\n" + clip(r->stdout_data, 4000) + "\n";
        if (!r->stderr_data.empty()) text += "--- stderr\n" + clip(r->stderr_data, 4000) + "\n";
        return ToolResult{std::move(out), text, r->timed_out};
      }});

  // ---- background processes (docs/api.md, "Background processes") ----
  const json process_out = obj({{"id", {{"type", "string"}}}, {"pid", {{"type", "integer"}}}, {"status", {{"type", "string"}}}},
                               {"id", "pid", "status"}, false);
  tools_.push_back(Tool{
      "process_start", "Start a background process",
      "Start a command in a sandbox and return at once (a dev server, a watcher, a REPL): it runs until it exits or "
      "is signalled, and its output is kept (the last output_bytes, default 1 MiB) for process_output. Returns its "
      "id (proc_N) and pid. stdin: true keeps its standard input open for process_stdin.",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId},
           {"cmd", {{"description", "A shell command line, or an argv array."},
                    {"anyOf", {{{"type", "string"}}, {{"type", "array"}, {"items", {{"type", "string"}}}, {"minItems", 1}}}}}},
           {"env", string_map("More environment variables for this process.")},
           {"cwd", str("Working directory; default /workspace.")},
           {"user", str("Run as this user instead of root.")},
           {"stdin", boolean("Keep its standard input open for process_stdin.")},
           {"tag", str("A label of yours, shown in process lists.")},
           {"output_bytes", integer("Output kept (a ring); 4096 to 67108864.", 4096, 67108864)}},
          {"sandbox_id", "cmd"}),
      process_out,
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto spec = sandbox::parse_process(without(args, {"sandbox_id"}), 1u << 20);
        if (!spec) return fail(spec.error());
        auto r = S.exec().start_process(ctx.principal, *id, *spec, ctx.timing);
        if (!r) return fail(r.error());
        return object_result(*r, "started " + r->value("id", "?") + " (pid " + std::to_string(r->value("pid", -1)) + ")");
      }});
  tools_.push_back(Tool{
      "process_output", "Read a background process's output",
      "The output of a background process from an offset (0: all it kept). Returns the text since then, `next` "
      "(the offset to ask from next time, so nothing is missed), whether it still runs, and its exit code once it "
      "exited. One read returns at most the node's --max-exec-output (1 MiB); `more` is true when there is more to read from `next`. wait_ms waits up to that long for it to exit first (a way to wait for a build or a test run).",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId},
           {"process_id", str("The process id (proc_N) or pid.")},
           {"since", integer("The offset to read from (the `next` of the last read).", 0, INT64_MAX)},
           {"wait_ms", integer("Wait up to this long for the process to exit before reading.", 0, 3600000)}},
          {"sandbox_id", "process_id"}),
      obj({{"output", {{"type", "string"}}}, {"next", {{"type", "integer"}}}, {"running", {{"type", "boolean"}}},
           {"more", {{"type", "boolean"}}}},
          {"output", "next", "running"}, false),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto r = only(args, {"sandbox_id", "process_id", "since", "wait_ms"}); !r) return fail(r.error());
        auto ids = process_args(args);
        if (!ids) return fail(ids.error());
        const std::string &id = ids->first, &proc = ids->second;
        const uint64_t since = args.contains("since") && args["since"].is_number_unsigned() ? args["since"].get<uint64_t>() : 0;
        const int64_t wait_ms = args.contains("wait_ms") && args["wait_ms"].is_number_integer() ? args["wait_ms"].get<int64_t>() : 0;
        auto cancelled = [&] { return ctx.cancelled && ctx.cancelled(); };
        if (wait_ms > 0) {
          auto w = S.exec().wait_process(ctx.principal, id, proc, wait_ms, cancelled);
          if (!w) return fail(w.error());
        }
        std::string text;
        uint64_t dropped = 0;
        sandbox::Exec::OutputReader reader;
        reader.begin = [&](const json& h) { dropped = h.value("dropped", uint64_t{0}); return true; };
        reader.data = [&](uint64_t, bool, std::string_view bytes) { text.append(bytes); return true; };
        reader.gap = [&](uint64_t from, uint64_t to) { dropped += to - from; return true; };
        // Bounded as the REST answer is (--max-exec-output): the rest is read from `next`.
        const size_t cap = S.config().max_exec_output;
        reader.full = [&] { return text.size() >= cap; };
        auto r = S.exec().process_output(ctx.principal, id, proc, since, false, 60'000, reader, cancelled);
        if (!r) return fail(r.error());
        json out = *r;
        if (r->value("more", false)) {
          // Cut at the bound: whether it still runs is asked, not inferred.
          auto now = S.exec().get_process(ctx.principal, id, proc);
          out["running"] = !now || now->value("status", "") == "running";
          if (now && now->contains("exit_code") && !(*now)["exit_code"].is_null()) out["exit_code"] = (*now)["exit_code"];
        }
        out["output"] = text;  // as text: invalid UTF-8 is replaced in the JSON
        out["dropped"] = dropped;
        std::string summary = (r->value("running", false) ? std::string("running") : "exited " + std::to_string(r->value("exit_code", -1))) +
                              ", next " + std::to_string(r->value("next", uint64_t{0})) +
                              (dropped ? ", " + std::to_string(dropped) + " bytes dropped before" : "") + "\n" + clip(text, 8000);
        return object_result(std::move(out), summary);
      }});
  tools_.push_back(Tool{
      "process_stdin", "Write to a background process's stdin",
      "Write text to the standard input of a background process started with stdin: true; eof: true closes it "
      "after (a program that reads to the end then finishes).",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId}, {"process_id", str("The process id (proc_N) or pid.")},
           {"data", str("Text to write (a newline is not added).")}, {"eof", boolean("Close its stdin after.")}},
          {"sandbox_id", "process_id"}),
      obj({{"written", {{"type", "integer"}}}}, {"written"}, false),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        auto ids = process_args(args);
        if (!ids) return fail(ids.error());
        const std::string &id = ids->first, &proc = ids->second;
        auto req = sandbox::parse_stdin(without(args, {"sandbox_id", "process_id"}));
        if (!req) return fail(req.error());
        auto r = S.exec().write_process_stdin(ctx.principal, id, proc, req->data, req->eof);
        if (!r) return fail(r.error());
        return object_result(*r, "wrote " + std::to_string(r->value("written", 0)) + " bytes");
      }});
  tools_.push_back(Tool{
      "process_signal", "Signal a background process",
      "Send a signal to a background process and what it started (its process group): TERM (default), KILL, INT, "
      "HUP, ... or a number 1-64.",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId}, {"process_id", str("The process id (proc_N) or pid.")},
           {"signal", {{"description", "A name such as TERM or a number."}, {"anyOf", {{{"type", "string"}}, {{"type", "integer"}}}}}}},
          {"sandbox_id", "process_id"}),
      obj({{"delivered", {{"type", "boolean"}}}}, {"delivered"}, false),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        auto ids = process_args(args);
        if (!ids) return fail(ids.error());
        const std::string &id = ids->first, &proc = ids->second;
        auto req = sandbox::parse_signal(without(args, {"sandbox_id", "process_id"}));
        if (!req) return fail(req.error());
        auto r = S.exec().signal_process(ctx.principal, id, proc, req->signal, req->group);
        if (!r) return fail(r.error());
        return object_result(*r, r->value("delivered", false) ? "delivered" : "not delivered (it had exited)");
      }});

  tools_.push_back(Tool{
      "sandbox_write_file", "Write a file in a sandbox",
      "Create or replace a file inside a sandbox (parent directories are made). Relative paths are under "
      "/workspace. Text goes as it is (encoding utf8, the default); binary content as base64 (encoding base64). "
      "At most " + std::to_string(max_file >> 20) + " MiB; larger files go through the REST API.",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId},
           {"path", str("Where to write, e.g. /workspace/main.py or main.py.")},
           {"content", str("The file's content.")},
           {"encoding", {{"type", "string"}, {"enum", {"utf8", "base64"}}, {"description", "How content is written; default utf8."}}}},
          {"sandbox_id", "path", "content"}),
      obj({{"path", {{"type", "string"}}}, {"size", {{"type", "integer"}}}}, {"path", "size"}, false),
      [&S, max_file](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"sandbox_id", "path", "content", "encoding"}); !o) return fail(o.error());
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto params = params_from(args, {"path"});
        if (!params) return fail(params.error());
        auto req = sandbox::parse_file_request(*params, false);
        if (!req) return fail(req.error());
        if (!args.contains("content") || !args["content"].is_string())
          return fail(ErrorCode::kInvalidRequest, "content: is required (a string)");
        const std::string encoding = args.value("encoding", "utf8");
        std::string bytes;
        if (encoding == "utf8") {
          bytes = args["content"].get<std::string>();
        } else if (encoding == "base64") {
          auto d = base64_decode(args["content"].get_ref<const std::string&>());
          if (!d) return fail(ErrorCode::kInvalidRequest, "content: not valid base64 (RFC 4648, with padding)");
          bytes = std::move(*d);
        } else {
          return fail(ErrorCode::kInvalidRequest, "encoding: must be utf8 or base64");
        }
        if (bytes.size() > max_file)
          return fail(ErrorCode::kPayloadTooLarge, "content: " + std::to_string(bytes.size()) + " bytes, more than the " +
                                                       std::to_string(max_file) + " MCP allows; use the REST API");
        size_t pos = 0;
        sandbox::ChunkSource source = [&](char* buf, size_t cap) -> Result<size_t> {
          const size_t n = std::min(cap, bytes.size() - pos);
          std::memcpy(buf, bytes.data() + pos, n);
          pos += n;
          return n;
        };
        Timing& t = ctx.timing;
        auto r = S.write_file(ctx.principal, *id, req->path, source, t);
        if (!r) return fail(r.error());
        return object_result(*r, "wrote " + std::to_string(bytes.size()) + " bytes to " + r->value("path", req->path));
      }});

  tools_.push_back(Tool{
      "sandbox_read_file", "Read a file from a sandbox",
      "Return a file's content. Text (valid UTF-8) comes as it is, with encoding utf8; anything else as base64, "
      "with encoding base64. At most " + std::to_string(max_file >> 20) + " MiB.",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId}, {"path", str("The file, e.g. /workspace/out.txt or out.txt.")}},
          {"sandbox_id", "path"}),
      obj({{"path", {{"type", "string"}}},
           {"size", {{"type", "integer"}}},
           {"encoding", {{"type", "string"}, {"enum", {"utf8", "base64"}}}},
           {"content", {{"type", "string"}}}},
          {"path", "size", "encoding", "content"}, false),
      [&S, max_file](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"sandbox_id", "path"}); !o) return fail(o.error());
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto params = params_from(args, {"path"});
        if (!params) return fail(params.error());
        auto req = sandbox::parse_file_request(*params, false);
        if (!req) return fail(req.error());
        std::string bytes;
        sandbox::FileSink sink;
        sink.begin = [&](uint64_t size) -> Result<void> {
          if (size > max_file)
            return fail(ErrorCode::kPayloadTooLarge, req->path + " is " + std::to_string(size) + " bytes, more than the " +
                                                         std::to_string(max_file) + " MCP returns; use the REST API");
          bytes.reserve(size);
          return {};
        };
        sink.data = [&](std::string_view chunk) -> Result<void> {
          if (bytes.size() + chunk.size() > max_file) return fail(ErrorCode::kPayloadTooLarge, req->path + " grew past the MCP limit");
          bytes.append(chunk);
          return {};
        };
        Timing& t = ctx.timing;
        if (auto r = S.read_file(ctx.principal, *id, req->path, sink, t); !r) return fail(r.error());
        const bool text = valid_utf8(bytes);
        json out = {{"path", req->path}, {"size", bytes.size()}, {"encoding", text ? "utf8" : "base64"},
                    {"content", text ? bytes : base64_encode(bytes)}};
        std::string rendering = text ? clip(bytes, 16000) : "(" + std::to_string(bytes.size()) + " bytes, not UTF-8: base64 in structuredContent)";
        return object_result(std::move(out), rendering);
      }});

  tools_.push_back(Tool{
      "sandbox_list_files", "List a directory in a sandbox",
      "List the entries of a directory inside a sandbox (names, types, sizes), 1,000 at most per call in name "
      "order; when more follow, next_cursor is set: call again with it as cursor.", "sandboxes",
      obj({{"sandbox_id", kSandboxId}, {"path", str("The directory; default /workspace.")},
           {"cursor", str("The next_cursor of the call before, for the next page.")}},
          {"sandbox_id"}),
      obj({{"path", {{"type", "string"}}}, {"data", {{"type", "array"}, {"items", {{"type", "object"}}}}},
           {"next_cursor", {{"type", {"string", "null"}}}}},
          {"data"}, false),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"sandbox_id", "path", "cursor"}); !o) return fail(o.error());
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto params = params_from(args, {"path", "cursor"});
        if (!params) return fail(params.error());
        if (std::none_of(params->begin(), params->end(), [](auto& kv) { return kv.first == "path"; }))
          params->emplace_back("path", "/workspace");
        auto req = sandbox::parse_file_request(*params, false);
        if (!req) return fail(req.error());
        auto page = sandbox::parse_list_page(*params);
        if (!page) return fail(page.error());
        Timing& t = ctx.timing;
        auto r = S.list_dir(ctx.principal, *id, req->path, t, page->after, page->limit);
        if (!r) return fail(r.error());
        std::string text;
        for (auto& e : (*r)["data"]) text += e.value("name", "?") + (e.value("type", "") == "dir" ? "/" : "") + "\n";
        if (text.empty()) text = "(empty)\n";
        if ((*r)["next_cursor"].is_string())
          text += "(more entries follow: call again with cursor " + (*r)["next_cursor"].get<std::string>() + ")\n";
        return object_result(*r, text);
      }});

  tools_.push_back(Tool{
      "sandbox_fork", "Fork a sandbox",
      "Copy a running sandbox into count new sandboxes (1-16), each with the source's memory, files and running "
      "processes at this instant; each copy then goes its own way. The source must have been created forkable "
      "(with the REST API). Forks keep the source's egress and model grant (one shared spend cap).",
      "sandboxes",
      obj({{"sandbox_id", kSandboxId},
           {"count", integer("How many copies; default 1.", 1, sandbox::kMaxForkCount)},
           {"metadata", string_map("Labels for the copies (replaces the source's).")}},
          {"sandbox_id"}),
      list_schema(sandbox_schema()),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        auto id = required_string(args, "sandbox_id");
        if (!id) return fail(id.error());
        auto req = sandbox::parse_fork(without(args, {"sandbox_id"}));
        if (!req) return fail(req.error());
        Timing& t = ctx.timing;
        auto r = S.fork(ctx.principal, *id, req->count, req->metadata, t);
        if (!r) return fail(r.error());
        std::string text = "forked " + *id + " into:\n";
        for (auto& s : (*r)["data"]) text += sandbox_line(s) + "\n";
        return object_result(*r, text);
      }});

  // ---- snapshots ----
  tools_.push_back(Tool{
      "snapshot_list", "List snapshots", "List this project's snapshots, newest first.", "snapshots",
      obj({{"limit", integer("Page size.", 1, 100)}, {"cursor", str("next_cursor of the previous page.")}}),
      list_schema(snapshot_schema()),
      [&S](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"limit", "cursor"}); !o) return fail(o.error());
        auto params = params_from(args, {"limit", "cursor"});
        if (!params) return fail(params.error());
        auto req = sandbox::parse_list_snapshots(*params);
        if (!req) return fail(req.error());
        auto r = S.list_snapshots(ctx.principal, req->cursor, req->limit);
        if (!r) return fail(r.error());
        std::string text;
        for (auto& s : (*r)["data"]) text += s.value("id", "?") + " of " + s.value("sandbox_id", "?") + "\n";
        return object_result(*r, text.empty() ? "no snapshots\n" : text);
      }});
  for (bool del : {false, true}) {
    tools_.push_back(Tool{
        del ? "snapshot_delete" : "snapshot_get", del ? "Delete a snapshot" : "Get a snapshot",
        del ? "Remove a snapshot's image from disk. It cannot be undone." : "Return one snapshot.", "snapshots",
        obj({{"snapshot_id", str("The snapshot's id, snp_...")}}, {"snapshot_id"}), snapshot_schema(),
        [&S, del](const json& args, CallContext& ctx) -> Result<ToolResult> {
          if (auto o = only(args, {"snapshot_id"}); !o) return fail(o.error());
          auto id = required_string(args, "snapshot_id");
          if (!id) return fail(id.error());
          auto r = del ? S.delete_snapshot(ctx.principal, *id) : S.get_snapshot(ctx.principal, *id);
          if (!r) return fail(r.error());
          return object_result(*r, (del ? "deleted " : "") + r->value("id", "?") + " of " + r->value("sandbox_id", "?"));
        }});
  }

  // ---- templates ----
  tools_.push_back(Tool{
      "template_list", "List templates", "List the templates sandboxes can start from on this node.", "templates",
      obj(json::object()), list_schema(obj({{"name", {{"type", "string"}}}, {"status", {{"type", "string"}}}}, {"name"}, false)),
      [&S, templates](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (!args.empty()) return fail(ErrorCode::kInvalidRequest, "template_list takes no arguments");
        json r = S.templates();
        if (templates) {
          auto l = templates->list(ctx.principal);
          if (!l) return fail(l.error());
          r = *l;
        }
        std::string text;
        for (auto& t : r["data"]) text += t.value("name", "?") + " " + t.value("status", "?") + "\n";
        return object_result(r, text);
      }});
  // Building stays a REST and CLI act (a build takes minutes and uploads bytes); an agent can
  // see what there is and how a build went.
  if (!templates) return;
  tools_.push_back(Tool{
      "template_get", "Get a template",
      "Return one template by name or id: its status, newest ready version, defaults (env, workdir, start "
      "command) and its newest build.",
      "templates", obj({{"template", str("The template's name or id (tpl_...)")}}, {"template"}),
      obj({{"id", {{"type", "string"}}}, {"name", {{"type", "string"}}}, {"status", {{"type", "string"}}}}, {"id", "name"}, false),
      [templates](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"template"}); !o) return fail(o.error());
        auto name = required_string(args, "template");
        if (!name) return fail(name.error());
        auto r = templates->get(ctx.principal, *name);
        if (!r) return fail(r.error());
        return object_result(*r, r->value("name", "?") + " " + r->value("status", "?"));
      }});
  tools_.push_back(Tool{
      "template_build_status", "Get a template build",
      "Return a build of a template (its newest when build_id is not given): status (queued, building, ready, "
      "failed), its steps with exit codes, and on failure the step, exit code and the end of its output.",
      "templates",
      obj({{"template", str("The template's name or id (tpl_...)")}, {"build_id", str("A build's id, bld_... (default: the newest)")}},
          {"template"}),
      obj({{"id", {{"type", "string"}}}, {"status", {{"type", "string"}}}}, {"id", "status"}, false),
      [templates](const json& args, CallContext& ctx) -> Result<ToolResult> {
        if (auto o = only(args, {"template", "build_id"}); !o) return fail(o.error());
        auto name = required_string(args, "template");
        if (!name) return fail(name.error());
        Result<json> r = fail(ErrorCode::kInternal, "");
        if (args.contains("build_id")) {
          auto b = required_string(args, "build_id");
          if (!b) return fail(b.error());
          r = templates->build(ctx.principal, *name, *b);
        } else {
          auto all = templates->builds(ctx.principal, *name);
          if (!all) return fail(all.error());
          r = (*all)["data"].at(0);
        }
        if (!r) return fail(r.error());
        std::string text = r->value("id", "?") + " " + r->value("status", "?");
        if (r->contains("error") && (*r)["error"].is_object()) text += ": " + (*r)["error"].value("message", "");
        return object_result(*r, text);
      }});
}

}  // namespace b3os::mcp
