#include "cli/commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/events.h"
#include "cli/shell.h"
#include "cli/table.h"

namespace b3os::cli {

namespace {

// The largest page GET /v1/sandboxes serves.
constexpr int64_t kMaxPageSize = 100;
// Fields `b3os get` shows first; the rest follow in the server's order.
constexpr const char* kDetailLead[] = {"id",         "status",     "stop_reason", "stop_message",
                                       "template",   "created_at", "started_at",  "expires_at",
                                       "stopped_at", "vcpu",       "memory_mib",  "disk_gib"};

// Reads all of standard input (binary-safe).
Result<std::string> read_all_stdin() {
  std::string out;
  char buf[64 << 10];
  for (;;) {
    ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_error(ErrorCode::kInvalidRequest, "read stdin", errno));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// Writes text to a stream unchanged (it may hold NULs) and flushes it.
void write_verbatim(std::FILE* f, const std::string& text) {
  if (!text.empty()) std::fwrite(text.data(), 1, text.size(), f);
  std::fflush(f);
}

int run_create(const GlobalOptions& g, const CreateOptions& o) {
  auto body = build_create_body(o);
  if (!body) {
    report_error(body.error());
    return kExitUsage;  // options that do not go together, or a malformed K=V or --port
  }
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "POST", "/v1/sandboxes", &*body);
  if (!reply) return report_error(reply.error());
  if (o.json || !reply->contains("id")) {
    print_json(*reply);
  } else {
    std::cout << format_cell((*reply)["id"]) << "\n";
  }
  return 0;
}

int run_list(const GlobalOptions& g, const ListOptions& o) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  Json all = Json::array();
  Json last;
  std::optional<std::string> cursor;
  for (;;) {
    auto path = build_list_path(o, cursor);
    if (!path) return report_error(path.error());
    auto reply = call_api(*client, "GET", *path);
    if (!reply) return report_error(reply.error());
    if (reply->contains("data") && (*reply)["data"].is_array()) {
      for (auto& item : (*reply)["data"]) all.push_back(std::move(item));
    }
    last = std::move(*reply);
    const Json next = last.value("next_cursor", Json());
    if (!o.all || !next.is_string() || next.get<std::string>().empty()) break;
    cursor = next.get<std::string>();
  }
  if (o.json) {
    if (o.all) last["next_cursor"] = nullptr;
    last["data"] = std::move(all);
    print_json(last);
    return 0;
  }
  std::cout << render_sandbox_table(all);
  const Json next = last.value("next_cursor", Json());
  if (!o.all && next.is_string() && !next.get<std::string>().empty()) {
    std::cerr << "(more sandboxes: use --all)\n";
  }
  return 0;
}

int run_get(const GlobalOptions& g, const std::string& id, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "GET", sandbox_path(id));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << render_sandbox_details(*reply);
  }
  return 0;
}

int run_delete(const GlobalOptions& g, const std::string& id, bool json) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, "DELETE", sandbox_path(id));
  if (!reply) return report_error(reply.error());
  if (json) {
    print_json(*reply);
  } else {
    std::cout << (reply->contains("id") ? format_cell((*reply)["id"]) : id) << "\n";
  }
  return 0;
}

// The output as it comes (server-sent events, docs/api.md "Streamed exec"): each chunk written
// and flushed at once; the command's exit code becomes ours.
int run_exec_streamed(HttpClient& client, const ExecOptions& o, Json body) {
  body["stream"] = true;
  SseParser sse;
  std::optional<int> status;
  std::optional<Error> failure;
  auto on_body = [&](const HttpResponse& head, std::string_view chunk) {
    if (head.status / 100 != 2) return;  // an error answer: its body is in the reply
    sse.feed(chunk, [&](const std::string& event, const std::string& data, const std::string&) {
      Json j = Json::parse(data, nullptr, false);
      if (!j.is_object()) return;
      if (write_output_event(event, j)) return;
      if (event == "exit") {
        if (j.value("timed_out", false)) std::cerr << "b3os: the command timed out\n";
        status = exec_exit_status(j);
      } else if (event == "error") {
        const Json e = j.value("error", Json::object());
        failure = Error{error_code_from_name(e.value("code", "internal")), e.value("message", "the exec failed"), 0};
      }
    });
  };
  auto reply = client.exchange("POST", sandbox_path(o.id, "/exec"), body.dump(),
                               {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}}, {}, nullptr, on_body);
  if (!reply) return report_error(reply.error());
  if (reply->status / 100 != 2) return report_error(api_error(*reply));
  if (failure) return report_error(*failure);
  if (!status) return report_error(Error{ErrorCode::kInternal, "the stream ended without the command's exit", 0});
  return *status;
}

int run_exec(const GlobalOptions& g, const ExecOptions& o) {
  std::optional<std::string> stdin_text;
  if (o.read_stdin) {
    auto text = read_all_stdin();
    if (!text) return report_error(text.error());
    stdin_text = std::move(*text);
  }
  auto body = build_exec_body(o, stdin_text);
  if (!body) return report_error(body.error());
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  if (!o.json) return run_exec_streamed(*client, o, *body);
  auto reply = call_api(*client, "POST", sandbox_path(o.id, "/exec"), &*body);
  if (!reply) return report_error(reply.error());
  if (o.json) {
    print_json(*reply);
    return 0;
  }
  auto text = [&](const char* key) {
    const Json v = reply->value(key, Json());
    return v.is_string() ? v.get<std::string>() : std::string();
  };
  write_verbatim(stdout, text("stdout"));
  write_verbatim(stderr, text("stderr"));
  if (reply->value("stdout_truncated", false)) std::cerr << "b3os: stdout was truncated by b3osd\n";
  if (reply->value("stderr_truncated", false)) std::cerr << "b3os: stderr was truncated by b3osd\n";
  if (reply->value("timed_out", false)) std::cerr << "b3os: the command timed out\n";
  return exec_exit_status(*reply);
}

}  // namespace

std::string field(const Json& o, const char* k) {
  if (!o.is_object() || !o.contains(k) || o[k].is_null()) return "-";
  return format_cell(o[k]);
}

int simple(const GlobalOptions& g, std::string_view method, const std::string& path, const Json* body, bool json,
           const std::function<void(const Json&)>& human) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  auto reply = call_api(*client, method, path, body);
  if (!reply) return report_error(reply.error());
  if (json) print_json(*reply);
  else human(*reply);
  return 0;
}

Result<Json> build_create_body(const CreateOptions& o) {
  Json body = Json::object();
  if (o.template_name) body["template"] = *o.template_name;
  if (o.timeout_s) body["timeout_s"] = *o.timeout_s;
  if (o.vcpu) body["vcpu"] = *o.vcpu;
  if (o.memory_mib) body["memory_mib"] = *o.memory_mib;
  auto env = parse_kv_object(o.env, "--env");
  if (!env) return fail(env.error());
  auto secrets = parse_kv_object(o.secrets, "--secret");
  if (!secrets) return fail(secrets.error());
  auto metadata = parse_kv_object(o.metadata, "--metadata");
  if (!metadata) return fail(metadata.error());
  if (!env->empty()) body["env"] = std::move(*env);
  if (!secrets->empty()) body["secrets"] = std::move(*secrets);
  if (!metadata->empty()) body["metadata"] = std::move(*metadata);
  if (o.snapshot) {
    if (o.template_name) return fail(ErrorCode::kInvalidRequest, "--from-snapshot and --template do not go together");
    body["snapshot"] = *o.snapshot;
  }
  if (o.disk_gib) body["disk_gib"] = *o.disk_gib;
  if (o.forkable) body["forkable"] = true;
  if (!o.allow.empty() && o.egress.value_or("allowlist") != "allowlist")
    return fail(ErrorCode::kInvalidRequest, "--allow needs --egress allowlist (or no --egress)");
  if (o.egress || !o.allow.empty()) {
    body["egress"] = {{"mode", o.egress.value_or("allowlist")}};
    if (!o.allow.empty()) body["egress"]["allow"] = o.allow;
  }
  if (!o.ports.empty()) {
    Json ports = Json::array();
    for (const auto& p : o.ports) {
      const auto colon = p.find(':');
      const std::string num = p.substr(0, colon);
      const std::string kind = colon == std::string::npos ? "" : p.substr(colon + 1);
      char* end = nullptr;
      const long n = std::strtol(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || n < 1 || n > 65535 || (kind != "" && kind != "public" && kind != "private"))
        return fail(ErrorCode::kInvalidRequest, "--port " + p + ": must be PORT, PORT:public or PORT:private (1-65535)");
      ports.push_back({{"port", n}, {"public", kind == "public"}});
    }
    body["ports"] = std::move(ports);
  }
  return body;
}

Result<std::string> build_list_path(const ListOptions& o, const std::optional<std::string>& cursor) {
  auto metadata = parse_kv_pairs(o.metadata, "--metadata");
  if (!metadata) return fail(metadata.error());
  Query q;
  if (o.status) q.add("status", *o.status);
  for (const auto& [k, v] : *metadata) q.add_metadata(k, v);
  if (o.limit) {
    q.add("limit", std::to_string(*o.limit));
  } else if (o.all) {
    q.add("limit", std::to_string(kMaxPageSize));
  }
  if (cursor) q.add("cursor", *cursor);
  return "/v1/sandboxes" + q.str();
}

Result<Json> build_exec_body(const ExecOptions& o, const std::optional<std::string>& stdin_text) {
  if (o.cmd.empty()) return fail(ErrorCode::kInvalidRequest, "exec: no command given after --");
  Json body = Json::object();
  if (o.cmd.size() == 1) {
    body["cmd"] = o.cmd.front();
  } else {
    body["cmd"] = o.cmd;
  }
  auto env = parse_kv_object(o.env, "--env");
  if (!env) return fail(env.error());
  if (!env->empty()) body["env"] = std::move(*env);
  if (o.cwd) body["cwd"] = *o.cwd;
  if (o.user) body["user"] = *o.user;
  if (o.timeout_ms) body["timeout_ms"] = *o.timeout_ms;
  if (stdin_text) body["stdin"] = *stdin_text;
  return body;
}

int exec_exit_status(const Json& reply) {
  if (reply.value("timed_out", false)) return kExitTimedOut;
  const Json code = reply.value("exit_code", Json());
  if (!code.is_number_integer()) return kExitFailure;
  auto c = code.get<int64_t>();
  if (c < 0) c = 128 - c;
  return c > 255 ? 255 : static_cast<int>(c);
}

std::string render_sandbox_table(const Json& sandboxes) {
  Table t({"ID", "STATUS", "TEMPLATE", "CREATED", "EXPIRES"});
  for (const auto& s : sandboxes) {
    std::string tpl = "-";
    if (s.contains("template")) {
      const auto& v = s["template"];
      tpl = v.is_object() ? field(v, "name") : format_cell(v);
    }
    t.add_row({field(s, "id"), field(s, "status"), tpl,
               format_time(s.value("created_at", Json())), format_time(s.value("expires_at", Json()))});
  }
  return t.render();
}

std::string render_sandbox_details(const Json& sandbox) {
  if (!sandbox.is_object()) return render_key_values(flatten_object(sandbox));
  Json ordered = Json::object();
  for (const char* key : kDetailLead) {
    if (sandbox.contains(key)) ordered[key] = sandbox[key];
  }
  for (const auto& [key, value] : sandbox.items()) {
    if (!ordered.contains(key)) ordered[key] = value;
  }
  return render_key_values(flatten_object(ordered, {"object", "timing"}));
}

std::string render_file_table(const Json& entries) {
  Table t({"NAME", "TYPE", "SIZE", "MODE", "MODIFIED"});
  for (const auto& e : entries) {
    t.add_row({field(e, "name"), field(e, "type"), field(e, "size"),
               format_mode(e.value("mode", Json())), format_time(e.value("modified_at", Json()))});
  }
  return t.render();
}

void print_json(const Json& doc) {
  std::cout << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

int report_error(const Error& e) {
  std::cerr << "error: " << e.message << "\n";
  return kExitFailure;
}

Result<HttpClient> make_client(const GlobalOptions& g) {
  auto url = parse_api_url(g.api_url);
  if (!url) return fail(url.error());
  return HttpClient(std::move(*url), g.api_key);
}

Result<Json> call_api(HttpClient& client, std::string_view method, const std::string& path,
                      const Json* body) {
  auto resp = client.request(method, path, body);
  if (!resp) return fail(resp.error());
  auto doc = json_reply(*resp);
  if (!doc && resp->status == 401 && !client.has_api_key()) {
    doc.error().message += " (no API key: set B3OS_API_KEY or --api-key; `b3os keys create` makes one)";
  }
  return doc;
}

void add_sandbox_commands(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto create = std::make_shared<CreateOptions>();
  auto* c = app.add_subcommand("create", "Create and start a sandbox; prints its id");
  c->add_option("--template", create->template_name, "Template name or id (default: base)");
  c->add_option("--from-snapshot", create->snapshot, "Start from a snapshot (snp_...) instead of a template");
  c->add_option("--disk", create->disk_gib, "Disk in GiB (default 1)");
  c->add_flag("--forkable", create->forkable, "Allow forks of it (POST .../fork)");
  c->add_option("--egress", create->egress, "Network: deny (default), public or allowlist")
      ->check(CLI::IsMember({"deny", "public", "allowlist"}));
  c->add_option("--allow", create->allow, "Allowlist entry: a host name, *.domain or a CIDR (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--port", create->ports, "Expose a port: PORT (private: mint URLs with `b3os url`) or PORT:public (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--timeout", create->timeout_s, "Idle timeout in seconds (default 300)");
  c->add_option("--vcpu", create->vcpu, "Virtual CPUs (default 1)");
  c->add_option("--memory", create->memory_mib, "Memory in MiB (default 512)");
  c->add_option("--env", create->env, "Environment variable K=V (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--secret", create->secrets, "Secret K=V, set in every exec (repeatable)")
      ->allow_extra_args(false);
  c->add_option("--metadata", create->metadata, "Metadata K=V (repeatable)")
      ->allow_extra_args(false);
  c->add_flag("--json", create->json, "Print the sandbox object as JSON");
  c->callback([&g, &action, create] { action = [&g, create] { return run_create(g, *create); }; });

  auto list = std::make_shared<ListOptions>();
  auto* l = app.add_subcommand("list", "List sandboxes, newest first");
  l->add_option("--status", list->status, "Only this status (running, paused, stopped, failed)");
  l->add_option("--metadata", list->metadata, "Only sandboxes with metadata K=V (repeatable)")
      ->allow_extra_args(false);
  l->add_option("--limit", list->limit, "Page size, 1-100 (default 20)");
  l->add_flag("--all", list->all, "Follow next_cursor through every page");
  l->add_flag("--json", list->json, "Print the list as JSON");
  l->callback([&g, &action, list] { action = [&g, list] { return run_list(g, *list); }; });

  struct IdJson {
    std::string id;
    bool json = false;
  };
  auto get = std::make_shared<IdJson>();
  auto* gc = app.add_subcommand("get", "Show one sandbox");
  gc->add_option("id", get->id, "Sandbox id")->required();
  gc->add_flag("--json", get->json, "Print the sandbox object as JSON");
  gc->callback([&g, &action, get] { action = [&g, get] { return run_get(g, get->id, get->json); }; });

  auto del = std::make_shared<IdJson>();
  auto* rm = app.add_subcommand("rm", "Stop and remove a sandbox (the record stays)");
  rm->alias("delete");
  rm->add_option("id", del->id, "Sandbox id")->required();
  rm->add_flag("--json", del->json, "Print the sandbox object as JSON");
  rm->callback([&g, &action, del] { action = [&g, del] { return run_delete(g, del->id, del->json); }; });

  auto exec = std::make_shared<ExecOptions>();
  auto* e = app.add_subcommand("exec", "Run a command in a sandbox: exec ID [options] -- CMD [ARGS...]");
  e->footer(
      "One word after -- runs under /bin/sh -c; several run as argv. Exits with the command's exit\n"
      "code, 124 if it timed out; with --json it prints the reply and exits 0.");
  e->add_option("id", exec->id, "Sandbox id")->required();
  e->add_option("cmd", exec->cmd, "Command and arguments")->required();
  e->add_option("--timeout-ms", exec->timeout_ms, "Kill the command after this many ms");
  e->add_option("--cwd", exec->cwd, "Working directory (default /workspace)");
  e->add_option("--user", exec->user, "Run as this user (a name, UID or UID:GID; default root)");
  e->add_option("--env", exec->env, "Environment variable K=V (repeatable)")
      ->allow_extra_args(false);
  e->add_flag("--stdin", exec->read_stdin, "Send all of standard input to the command");
  e->add_flag("--json", exec->json, "Print the whole reply as JSON");
  e->callback([&g, &action, exec] { action = [&g, exec] { return run_exec(g, *exec); }; });

  auto sh = std::make_shared<ShellOptions>();
  auto* shc = app.add_subcommand("shell", "An interactive terminal in a sandbox: shell ID [--cmd CMD]");
  shc->footer(
      "Opens a terminal (a login shell unless --cmd) sized like yours, in raw mode; resizes follow\n"
      "your window. Exits with the shell's exit code.\n"
      "Example: b3os shell sbx_01... --user alice");
  shc->add_option("id", sh->id, "Sandbox id")->required();
  shc->add_option("--cmd", sh->cmd, "Run this (under /bin/sh -c) instead of a login shell");
  shc->add_option("--cwd", sh->cwd, "Working directory");
  shc->add_option("--user", sh->user, "Run as this user (a name, UID or UID:GID)");
  shc->callback([&g, &action, sh] {
    action = [&g, sh] {
      auto url = parse_api_url(g.api_url);
      if (!url) return report_error(url.error());
      return run_shell(*url, g.api_key, *sh);
    };
  });
}

}  // namespace b3os::cli
