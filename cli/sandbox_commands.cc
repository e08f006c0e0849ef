// b3os watch, ports, url, egress (one route each), and `b3os completion bash|zsh`: a
// completion script made from the commands CLI11 holds, so it never lags behind them.

#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/events.h"
#include "cli/table.h"

namespace b3os::cli {

namespace {

struct MoreOptions {
  std::string id, path, mode;
  std::vector<std::string> allow;
  int port = 0;
  std::optional<int64_t> ttl_s;
  std::optional<int64_t> timeout_s;
  bool recursive = false, json = false;
};

// watch: one line per change ("create  /workspace/a/b.txt"), or the events as JSON lines.
int run_watch(const GlobalOptions& g, const MoreOptions& o) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  std::string path = sandbox_path(o.id, "/files/watch?path=" + url_encode(o.path) +
                                            "&recursive=" + (o.recursive ? "true" : "false"));
  if (o.timeout_s) path += "&timeout_ms=" + std::to_string(*o.timeout_s * 1000);
  SseParser sse;
  std::optional<Error> failed;
  auto on_body = [&](const HttpResponse& head, std::string_view chunk) {
    if (head.status / 100 != 2) return;
    sse.feed(chunk, [&](const std::string& event, const std::string& data, const std::string&) {
      Json j = Json::parse(data, nullptr, false);
      if (!j.is_object()) return;
      if (event == "error") {
        const Json e = j.value("error", Json::object());
        failed = Error{ErrorCode::kInternal, e.value("message", std::string("the watch failed"))};
        return;
      }
      if (o.json) {
        if (event != "start" && event != "end") std::cout << j.dump() << std::endl;
        return;
      }
      if (event == "start") {
        std::cerr << "watching " << j.value("path", o.path) << (j.value("recursive", false) ? " and below" : "")
                  << " (" << j.value("watches", 0) << " directories)\n";
      } else if (event == "end") {
        std::cerr << "watch ended: " << j.value("reason", std::string("?")) << "\n";
      } else if (event == "overflow") {
        std::cerr << "b3os: events were lost (the sandbox's queue overflowed)\n";
      } else if (event == "limit") {
        std::cerr << "b3os: too many directories; not all are watched\n";
      } else {
        std::string line = event;
        line.resize(std::max<size_t>(line.size(), 8), ' ');
        line += j.value("path", std::string());
        if (j.value("is_dir", false)) line += "/";
        if (j.contains("from")) line += " (from " + j.value("from", std::string()) + ")";
        std::cout << line << std::endl;
      }
    });
  };
  auto reply = client->exchange("GET", path, "", {{"Accept", "text/event-stream"}}, {}, nullptr, on_body);
  if (!reply) return report_error(reply.error());
  if (reply->status / 100 != 2) return report_error(api_error(*reply));
  if (failed) return report_error(*failed);
  return 0;
}

std::string ports_table(const Json& sandbox) {
  Table t({"PORT", "PUBLIC", "URL"});
  for (const auto& p : sandbox.value("ports", Json::array())) t.add_row({field(p, "port"), field(p, "public"), field(p, "url")});
  return t.render();
}

// The words completion offers after each command path ("" is the top level): its
// subcommands and its options' long and short names.
void collect(const CLI::App& app, const std::string& path, std::map<std::string, std::string>& words,
             std::map<std::string, std::string>& positional) {
  std::string w;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    w += sub->get_name() + " ";
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), words, positional);
  }
  for (const CLI::Option* opt : app.get_options()) {
    if (!opt->nonpositional()) {
      positional[path] += opt->get_name() + " ";
      continue;
    }
    for (const auto& l : opt->get_lnames()) w += "--" + l + " ";
    for (const auto& s : opt->get_snames()) w += "-" + s + " ";
  }
  if (!w.empty()) w.pop_back();
  words[path] = w;
}

}  // namespace

Result<std::string> completion_script(const CLI::App& app, const std::string& shell) {
  if (shell != "bash" && shell != "zsh")
    return fail(ErrorCode::kInvalidRequest, "completion: the shell must be bash or zsh, not \"" + shell + "\"");
  std::map<std::string, std::string> words, positional;
  collect(app, "", words, positional);
  std::ostringstream out;
  out << "# b3os completion for " << shell << "; made by `b3os completion " << shell << "`.\n";
  if (shell == "zsh") {
    out << "# zsh runs the bash completion through bashcompinit.\n"
           "autoload -U +X compinit && compinit\n"
           "autoload -U +X bashcompinit && bashcompinit\n";
  }
  out << "declare -gA _b3os_words=(\n";
  for (const auto& [path, w] : words) out << "  [\"" << (path.empty() ? "." : path) << "\"]=\"" << w << "\"\n";
  out << ")\n";
  out << R"(_b3os() {
  local cur=${COMP_WORDS[COMP_CWORD]} path="" w i
  # The command path so far: each word that names a subcommand of the path before it.
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] && continue
    case " ${_b3os_words[${path:-.}]} " in
      *" $w "*) path=${path:+$path }$w ;;
    esac
  done
  COMPREPLY=($(compgen -W "${_b3os_words[${path:-.}]}" -- "$cur"))
  # Where a command takes a file (upload, download, templates build), offer files too.
  case "$path" in
    upload | download | "templates build") COMPREPLY+=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _b3os b3os
)";
  return out.str();
}

void add_completion_command(CLI::App& app, Action& action) {
  auto shell = std::make_shared<std::string>();
  auto* c = app.add_subcommand("completion", "Print a shell completion script: completion bash|zsh");
  c->add_option("shell", *shell, "bash or zsh")->required()->check(CLI::IsMember({"bash", "zsh"}));
  c->footer(
      "Examples:\n"
      "  b3os completion bash > /etc/bash_completion.d/b3os\n"
      "  source <(b3os completion zsh)      # in ~/.zshrc");
  c->callback([&app, &action, shell] {
    action = [&app, shell] {
      auto s = completion_script(app, *shell);
      if (!s) return report_error(s.error());
      std::cout << *s;
      return 0;
    };
  });
}

void add_more_sandbox_commands(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<MoreOptions>();

  auto* w = app.add_subcommand("watch", "Follow file changes in a sandbox: watch ID PATH [-r]");
  w->add_option("id", o->id, "Sandbox id")->required();
  w->add_option("path", o->path, "A directory or file (relative: under /workspace)")->required();
  w->add_flag("-r,--recursive", o->recursive, "Watch the directories below it too");
  w->add_option("--timeout", o->timeout_s, "End after this many seconds (default 3600)");
  w->add_flag("--json", o->json, "Print each event as a JSON line");
  w->footer(
      "Prints one line per change: create, modify, delete, rename (with its old path) or attrib.\n"
      "Ends when the path is removed or the timeout passes; Ctrl-C stops it.\n"
      "Examples:\n"
      "  b3os watch sbx_... /workspace -r\n"
      "  b3os watch sbx_... src --json | jq -r 'select(.type == \"modify\") | .path'");
  w->callback([&g, &action, o] { action = [&g, o] { return run_watch(g, *o); }; });

  auto* p = app.add_subcommand("ports", "A sandbox's ports and their preview URLs: ports ID");
  p->add_option("id", o->id, "Sandbox id")->required();
  p->add_flag("--json", o->json, "Print the ports as JSON");
  p->footer("Ports are set at create: b3os create --port 8000:public --port 9000");
  p->callback([&g, &action, o] {
    action = [&g, o] {
      // The sandbox's own answer carries its ports: one GET, the part of it asked for printed.
      return simple(g, "GET", sandbox_path(o->id, ""), nullptr, false, [o](const Json& r) {
        if (o->json) print_json(r.value("ports", Json::array()));
        else std::cout << ports_table(r);
      });
    };
  });

  auto* u = app.add_subcommand("url", "Mint a preview URL for a private port: url ID PORT [--ttl S]");
  u->add_option("id", o->id, "Sandbox id")->required();
  u->add_option("port", o->port, "The port (any 1-65535: what listens there is served)")->required();
  u->add_option("--ttl", o->ttl_s, "Seconds the URL works (default 3600, at most 604800)");
  u->add_flag("--json", o->json, "Print the reply as JSON");
  u->footer("Example:\n  curl \"$(b3os url sbx_... 9000 --ttl 600)\"");
  u->callback([&g, &action, o] {
    action = [&g, o] {
      Json body = Json::object();
      if (o->ttl_s) body["ttl_s"] = *o->ttl_s;
      return simple(g, "POST", sandbox_path(o->id, "/ports/" + std::to_string(o->port) + "/url"), &body, o->json,
                    [](const Json& r) { std::cout << field(r, "url") << "\n"; });
    };
  });

  auto* e = app.add_subcommand("egress", "A sandbox's network: egress get ID | egress set ID --mode M [--allow X]...");
  e->require_subcommand(1);
  auto* eg = e->add_subcommand("get", "Print a sandbox's egress");
  eg->add_option("id", o->id, "Sandbox id")->required();
  eg->add_flag("--json", o->json, "Print it as JSON");
  eg->callback([&g, &action, o] {
    action = [&g, o] {
      return simple(g, "GET", sandbox_path(o->id, ""), nullptr, false, [o](const Json& r) {
        const Json eg = r.value("egress", Json::object());
        if (o->json) return print_json(eg);
        std::cout << "mode: " << eg.value("mode", std::string("-")) << "\n";
        for (const auto& a : eg.value("allow", Json::array())) std::cout << "allow: " << format_cell(a) << "\n";
      });
    };
  });
  auto* es = e->add_subcommand("set", "Change a running sandbox's egress (public or allowlist)");
  es->add_option("id", o->id, "Sandbox id")->required();
  es->add_option("--mode", o->mode, "public or allowlist")->required()->check(CLI::IsMember({"public", "allowlist"}));
  es->add_option("--allow", o->allow, "Allowlist entry: host, *.domain or CIDR (repeatable; none: cut off)")
      ->allow_extra_args(false);
  es->add_flag("--json", o->json, "Print the sandbox as JSON");
  es->footer(
      "A sandbox created with --egress deny has no network and cannot be changed.\n"
      "Examples:\n"
      "  b3os egress set sbx_... --mode allowlist --allow pypi.org --allow files.pythonhosted.org\n"
      "  b3os egress set sbx_... --mode allowlist            # cut it off\n"
      "  b3os egress set sbx_... --mode public");
  es->callback([&g, &action, o] {
    action = [&g, o] {
      Json eg = {{"mode", o->mode}};
      if (o->mode == "allowlist") eg["allow"] = o->allow;
      else if (!o->allow.empty()) {
        report_error(Error{ErrorCode::kInvalidRequest, "--allow needs --mode allowlist"});
        return kExitUsage;
      }
      Json body = {{"egress", eg}};
      return simple(g, "PATCH", sandbox_path(o->id, ""), &body, o->json, [](const Json& r) {
        const Json eg = r.value("egress", Json::object());
        std::cout << field(r, "id") << " egress " << eg.value("mode", std::string("-"));
        for (const auto& a : eg.value("allow", Json::array())) std::cout << " " << format_cell(a);
        std::cout << "\n";
      });
    };
  });
}

}  // namespace b3os::cli
