#pragma once
// `b3os shell ID`: an interactive terminal in a sandbox over its pty WebSocket.

#include <string>

#include "cli/args.h"

namespace b3os::cli {

struct ShellOptions {
  std::string id;
  std::string cmd;   // "" : the sandbox's login shell
  std::string cwd;
  std::string user;
};

/// Runs the terminal until its shell exits; returns the shell's exit code (1 when the
/// connection ended without one, 3 when there is no such sandbox).
int run_shell(const ApiUrl& url, const std::string& api_key, const ShellOptions& o);

}  // namespace b3os::cli
