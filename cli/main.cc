// b3os: the command-line client of b3osd. API commands talk HTTP to B3OS_API_URL; `keys`
// works on the local store directly.

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/templates.h"

namespace {

// Examples at the end of each command's --help (commands that have their own keep them).
void add_examples(CLI::App& app) {
  static const std::pair<const char*, const char*> kExamples[] = {
      {"create", "b3os create\n  b3os create --template web --memory 1024 --forkable --port 8000:public\n"
                 "  b3os create --egress allowlist --allow pypi.org --allow '*.pythonhosted.org'\n"
                 "  b3os create --from-snapshot snp_...    (--json prints the whole sandbox)"},
      {"list", "b3os list --status running\n  b3os list --metadata team=infra --all --json | jq -r '.data[].id'"},
      {"get", "b3os get sbx_...\n  b3os get sbx_... --json | jq .egress"},
      {"rm", "b3os rm sbx_..."},
      {"exec", "b3os exec sbx_... -- python3 -c 'print(6*7)'\n  b3os exec sbx_... 'cd /workspace && make test'\n"
               "  echo data | b3os exec sbx_... --stdin -- wc -c\n"
               "Exits with the command's exit code (124: timed out; 1: b3os could not run it)."},
      {"upload", "b3os upload sbx_... data.csv /workspace/data.csv"},
      {"download", "b3os download sbx_... /workspace/out.json out.json"},
      {"ls", "b3os ls sbx_... /workspace"},
      {"rmfile", "b3os rmfile sbx_... /workspace/build --recursive"},
      {"ps", "b3os ps sbx_...\n  b3os ps sbx_... --json | jq '.data[] | select(.status == \"running\") | .id'"},
      {"start", "b3os start sbx_... --tag web -- python3 -m http.server 8000\n  b3os start sbx_... -- 'npm run dev'"},
      {"kill", "b3os kill sbx_... proc_3            (TERM)\n  b3os kill sbx_... proc_3 -s KILL"},
      {"logs", "b3os logs sbx_... proc_3\n  b3os logs -f sbx_... proc_3         (exits with the process's exit code)"},
      {"attach", "b3os attach sbx_... proc_3"},
      {"fork", "b3os fork sbx_... -n 3"},
      {"pause", "b3os pause sbx_...; b3os resume sbx_..."},
      {"resume", "b3os resume sbx_..."},
      {"snapshot", "b3os snapshot create sbx_...\n  b3os snapshot list\n  b3os create --from-snapshot snp_...\n"
                   "  b3os snapshot rm snp_..."},
      {"status", "b3os status"},
      {"mcp", "b3os mcp        (an MCP client starts it; B3OS_API_URL and B3OS_API_KEY in its env)"},
      {"keys", "b3os keys create --project team-a\n  b3os keys list"},
      {"nodes", "b3os nodes list --store postgresql://b3os@db/b3os\n  b3os nodes drain node-3"},
  };
  for (const auto& [name, text] : kExamples) {
    CLI::App* sub = nullptr;
    try {
      sub = app.get_subcommand(name);
    } catch (const CLI::OptionNotFound&) {
      continue;
    }
    if (sub->get_footer().empty()) sub->footer(std::string("Examples:\n  ") + text);
  }
  app.footer(
      "Exit codes: 0 done; 1 the request failed (the API's error is printed as \"error: CODE: message\");\n"
      "2 a usage error; exec, shell and logs -f exit with the command's own code (exec: 124 when it\n"
      "timed out). Commands that answer with API objects take --json. Completion: b3os completion bash|zsh.");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace b3os::cli;
  GlobalOptions global;
  Action action;

  CLI::App app{"b3os: create sandboxes, run commands in them and move files in and out"};
  app.fallthrough();
  app.require_subcommand(1);
  app.add_option("--api-url", global.api_url, "Address of b3osd")
      ->envname("B3OS_API_URL")
      ->capture_default_str();
  app.add_option("--api-key", global.api_key, "API key (b3os_sk_...)")->envname("B3OS_API_KEY");

  add_key_commands(app, global, action);
  add_sandbox_commands(app, global, action);
  add_file_commands(app, global, action);
  add_process_commands(app, global, action);
  add_template_commands(app, global, action);
  add_mcp_command(app, global, action);
  add_status_command(app, global, action);
  add_more_sandbox_commands(app, global, action);
  add_completion_command(app, action);
  add_examples(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (!action) return kExitUsage;
  return action();
}
