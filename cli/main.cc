// b3os: the command-line client of b3osd. API commands talk HTTP to B3OS_API_URL; `keys`
// works on the local store directly.

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/templates.h"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }
  if (!action) return kExitUsage;
  return action();
}
