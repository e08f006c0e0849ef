// b3os ps/start/kill/logs/wait (background processes), fork, pause, resume and snapshot
// create/list/rm: one route each, a table or a line by default and the API's JSON with --json.

#include <cstdio>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/events.h"
#include "cli/table.h"

namespace b3os::cli {

namespace {

std::string process_table(const Json& list) {
  Table t({"ID", "PID", "STATUS", "EXIT", "TAG", "COMMAND"});
  for (const auto& p : list) {
    std::string cmd;
    for (const auto& a : p.value("argv", Json::array())) cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
    if (cmd.rfind("/bin/sh -c ", 0) == 0) cmd = cmd.substr(11);
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    t.add_row({field(p, "id"), field(p, "pid"), field(p, "status"), field(p, "exit_code"), field(p, "tag"), cmd});
  }
  return t.render();
}

struct ProcOptions {
  std::string id, proc, signal = "TERM", tag;
  std::vector<std::string> cmd;
  bool json = false, follow = false, stdin_open = false;
  uint64_t since = 0;
  int64_t timeout_ms = 30000;
  int count = 1;
};

// logs: the output from an offset; with -f followed (server-sent events) until the process's
// output is done, then its exit code is ours.
int run_logs(const GlobalOptions& g, const ProcOptions& o) {
  auto client = make_client(g);
  if (!client) return report_error(client.error());
  std::string path = sandbox_path(o.id, "/processes/" + o.proc + "/output?follow=true&since=" + std::to_string(o.since));
  if (!o.follow) {
    auto reply = call_api(*client, "GET", sandbox_path(o.id, "/processes/" + o.proc + "/output?since=" + std::to_string(o.since)), nullptr);
    if (!reply) return report_error(reply.error());
    if (o.json) {
      print_json(*reply);
      return 0;
    }
    for (const auto& c : reply->value("chunks", Json::array()))
      if (c.contains("data")) write_output_event(c.value("stream", "stdout"), c);
    return 0;
  }
  SseParser sse;
  std::optional<int> code;
  auto on_body = [&](const HttpResponse& head, std::string_view chunk) {
    if (head.status / 100 != 2) return;
    sse.feed(chunk, [&](const std::string& event, const std::string& data, const std::string&) {
      Json j = Json::parse(data, nullptr, false);
      if (!j.is_object()) return;
      if (write_output_event(event, j)) return;
      if (event == "gap") {
        std::cerr << "b3os: " << (j.value("to", uint64_t{0}) - j.value("from", uint64_t{0}))
                  << " bytes of output were dropped before they were read (the process's ring is full)\n";
      } else if (event == "exit") {
        code = exec_exit_status(j);
      }
    });
  };
  auto reply = client->exchange("GET", path, "", {{"Accept", "text/event-stream"}}, {}, nullptr, on_body);
  if (!reply) return report_error(reply.error());
  if (reply->status / 100 != 2) return report_error(api_error(*reply));
  return code.value_or(0);
}

}  // namespace

void add_process_commands(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto o = std::make_shared<ProcOptions>();

  auto* ps = app.add_subcommand("ps", "List a sandbox's background processes: ps ID");
  ps->add_option("id", o->id, "Sandbox id")->required();
  ps->add_flag("--json", o->json, "Print the list as JSON");
  ps->callback([&g, &action, o] {
    action = [&g, o] {
      return simple(g, "GET", sandbox_path(o->id, "/processes"), nullptr, o->json,
                    [](const Json& r) { std::cout << process_table(r.value("data", Json::array())); });
    };
  });

  auto* st = app.add_subcommand("start", "Start a background process: start ID [--tag T] -- CMD [ARGS...]");
  st->footer("Prints the process id (proc_N). One word after -- runs under /bin/sh -c.\n"
             "Example: b3os start sbx_01... --tag web -- python3 -m http.server 8000");
  st->add_option("id", o->id, "Sandbox id")->required();
  st->add_option("cmd", o->cmd, "Command and arguments")->required();
  st->add_option("--tag", o->tag, "A label shown by ps");
  st->add_flag("--stdin", o->stdin_open, "Keep its standard input open (for POST .../stdin)");
  st->add_flag("--json", o->json, "Print the process as JSON");
  st->callback([&g, &action, o] {
    action = [&g, o] {
      Json body = {{"cmd", o->cmd.size() == 1 ? Json(o->cmd[0]) : Json(o->cmd)}};
      if (!o->tag.empty()) body["tag"] = o->tag;
      if (o->stdin_open) body["stdin"] = true;
      return simple(g, "POST", sandbox_path(o->id, "/processes"), &body, o->json,
                    [](const Json& r) { std::cout << field(r, "id") << "\n"; });
    };
  });

  auto* kill = app.add_subcommand("kill", "Signal a background process: kill ID PROC [-s SIGNAL]");
  kill->add_option("id", o->id, "Sandbox id")->required();
  kill->add_option("proc", o->proc, "Process id (proc_N) or pid")->required();
  kill->add_option("-s,--signal", o->signal, "TERM (default), KILL, INT, HUP, ... or a number");
  kill->add_flag("--json", o->json, "Print the reply as JSON");
  kill->callback([&g, &action, o] {
    action = [&g, o] {
      Json body = {{"signal", o->signal}};
      if (!o->signal.empty() && o->signal.find_first_not_of("0123456789") == std::string::npos)
        body["signal"] = std::stoi(o->signal);
      return simple(g, "POST", sandbox_path(o->id, "/processes/" + o->proc + "/signal"), &body, o->json,
                    [](const Json& r) { std::cout << (r.value("delivered", false) ? "delivered" : "not delivered (it had exited)") << "\n"; });
    };
  });

  auto* logs = app.add_subcommand("logs", "A background process's output: logs ID PROC [-f] [--since N]");
  logs->footer("With -f it follows until the process exits and exits with its code.");
  logs->add_option("id", o->id, "Sandbox id")->required();
  logs->add_option("proc", o->proc, "Process id (proc_N) or pid")->required();
  logs->add_flag("-f,--follow", o->follow, "Follow the output until the process exits");
  logs->add_option("--since", o->since, "Offset to start from (bytes of output, stdout and stderr together)");
  logs->add_flag("--json", o->json, "Print the reply as JSON (without -f)");
  logs->callback([&g, &action, o] { action = [&g, o] { return run_logs(g, *o); }; });

  auto* attach = app.add_subcommand("attach", "Follow a background process from its start: attach ID PROC");
  attach->add_option("id", o->id, "Sandbox id")->required();
  attach->add_option("proc", o->proc, "Process id (proc_N) or pid")->required();
  attach->callback([&g, &action, o] {
    action = [&g, o] {
      o->follow = true;
      return run_logs(g, *o);
    };
  });

  auto* fork = app.add_subcommand("fork", "Fork a running sandbox into N copies: fork ID [-n N]");
  fork->add_option("id", o->id, "Sandbox id (created with forkable)")->required();
  fork->add_option("-n,--count", o->count, "How many copies (1-16)");
  fork->add_flag("--json", o->json, "Print the reply as JSON");
  fork->callback([&g, &action, o] {
    action = [&g, o] {
      Json body = {{"count", o->count}};
      return simple(g, "POST", sandbox_path(o->id, "/fork"), &body, o->json, [](const Json& r) {
        for (const auto& s : r.value("data", Json::array())) std::cout << field(s, "id") << "\n";
      });
    };
  });

  for (const char* verb : {"pause", "resume"}) {
    auto* c = app.add_subcommand(verb, std::string(verb == std::string("pause") ? "Pause" : "Resume") + " a sandbox: " + verb + " ID");
    c->add_option("id", o->id, "Sandbox id")->required();
    c->add_flag("--json", o->json, "Print the sandbox as JSON");
    c->callback([&g, &action, o, verb] {
      action = [&g, o, verb] {
        return simple(g, "POST", sandbox_path(o->id, std::string("/") + verb), nullptr, o->json,
                      [](const Json& r) { std::cout << field(r, "id") << " " << field(r, "status") << "\n"; });
      };
    });
  }

  auto* snap = app.add_subcommand("snapshot", "Snapshots: snapshot create ID | list | rm SNAPSHOT_ID");
  snap->require_subcommand(1);
  auto* sc = snap->add_subcommand("create", "Snapshot a sandbox (memory, disk, processes)");
  sc->add_option("id", o->id, "Sandbox id")->required();
  sc->add_flag("--json", o->json, "Print the snapshot as JSON");
  sc->callback([&g, &action, o] {
    action = [&g, o] {
      return simple(g, "POST", sandbox_path(o->id, "/snapshot"), nullptr, o->json,
                    [](const Json& r) { std::cout << field(r, "id") << "\n"; });
    };
  });
  auto* sl = snap->add_subcommand("list", "List the project's snapshots");
  sl->add_flag("--json", o->json, "Print the list as JSON");
  sl->callback([&g, &action, o] {
    action = [&g, o] {
      return simple(g, "GET", "/v1/snapshots?limit=100", nullptr, o->json, [](const Json& r) {
        Table t({"ID", "SANDBOX", "SIZE", "CREATED"});
        for (const auto& s : r.value("data", Json::array()))
          t.add_row({field(s, "id"), field(s, "sandbox_id"), field(s, "size_bytes"), field(s, "created_at")});
        std::cout << t.render();
      });
    };
  });
  auto* sr = snap->add_subcommand("rm", "Delete a snapshot");
  sr->add_option("id", o->id, "Snapshot id")->required();
  sr->add_flag("--json", o->json, "Print the reply as JSON");
  sr->callback([&g, &action, o] {
    action = [&g, o] {
      return simple(g, "DELETE", "/v1/snapshots/" + url_encode(o->id), nullptr, o->json,
                    [](const Json& r) { std::cout << field(r, "id") << " deleted\n"; });
    };
  });
}

}  // namespace b3os::cli
