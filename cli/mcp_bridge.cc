// `b3os mcp`: the MCP tools over stdio, for clients that start an MCP server as a process
// (docs/mcp.md). A bridge to b3osd's /mcp, so the tools, their schemas and their checks are
// the daemon's, never a second copy: each newline-delimited JSON-RPC message read on stdin is
// POSTed to B3OS_API_URL/mcp with the key and the session, and each answer is written to
// stdout as one line. Requests run concurrently (a long sandbox_exec does not hold up a ping
// or the notifications/cancelled that stops it); stdout is written one whole line at a time.

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"

namespace b3os::cli {

namespace {

constexpr int kMaxInFlight = 32;

struct Bridge {
  HttpClient client;
  std::string path;
  std::mutex out_mu;
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::string session;

  void emit(const std::string& line) {
    std::lock_guard lk(out_mu);
    std::cout << line << "\n" << std::flush;
  }

  void emit_error(const Json& id, const std::string& message) {
    if (id.is_null()) {
      std::cerr << "b3os mcp: " << message << "\n";
      return;
    }
    emit(Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", -32000}, {"message", message}}}}.dump());
  }

  /// POSTs one message; writes what comes back (a JSON-RPC message, or nothing for a 202).
  void forward(const std::string& line, const Json& id) {
    std::vector<std::pair<std::string, std::string>> headers = {{"Content-Type", "application/json"},
                                                                {"Accept", "application/json, text/event-stream"}};
    {
      std::lock_guard lk(mu);
      if (!session.empty()) headers.emplace_back("Mcp-Session-Id", session);
    }
    std::vector<std::pair<std::string, std::string>> got;
    // An event stream (a tool call that asked for progress): each event's data is a message,
    // written as soon as it is complete.
    std::string pending;
    bool streamed = false;
    auto on_body = [&](const HttpResponse& head, std::string_view chunk) {
      if (head.content_type.find("text/event-stream") == std::string::npos) return;
      streamed = true;
      pending.append(chunk);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        std::string event = pending.substr(0, end), data;
        pending.erase(0, end + 2);
        for (size_t pos = 0; pos < event.size();) {
          size_t nl = event.find('\n', pos);
          if (nl == std::string::npos) nl = event.size();
          std::string_view l(event.data() + pos, nl - pos);
          if (l.rfind("data:", 0) == 0) {
            l.remove_prefix(5);
            if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
            data += std::string(l);
          }
          pos = nl + 1;
        }
        if (!data.empty()) emit(data);
      }
    };
    auto r = client.exchange("POST", path, line, headers, {"Mcp-Session-Id"}, &got, on_body);
    if (!r) return emit_error(id, r.error().message);
    if (streamed) return;
    for (auto& [k, v] : got) {
      std::lock_guard lk(mu);
      if (session.empty()) session = v;
    }
    if (r->status == 202 || r->body.empty()) return;
    Json body = Json::parse(r->body, nullptr, false);
    if (body.is_object() && body.contains("jsonrpc")) {
      // The server's answer, an error included (its id is the request's, or null).
      if (body["id"].is_null() && !id.is_null()) body["id"] = id;
      return emit(body.dump());
    }
    emit_error(id, "b3osd answered HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300));
  }
};

int run_mcp(const GlobalOptions& g, const std::string& toolsets) {
  auto client = make_client(g);
  if (!client) {
    std::cerr << "b3os mcp: " << client.error().message << "\n";
    return kExitFailure;
  }
  if (!client->has_api_key()) std::cerr << "b3os mcp: no API key (set B3OS_API_KEY); b3osd will refuse every message\n";
  Bridge b{std::move(*client), "/mcp?toolsets=" + toolsets, {}, {}, {}, 0, {}};
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Json msg = Json::parse(line, nullptr, false);
    Json id = msg.is_object() && msg.contains("id") ? msg["id"] : Json(nullptr);
    const bool init = msg.is_object() && msg.value("method", "") == "initialize";
    if (init) {
      // The session comes from its answer: every later message waits for it.
      {
        std::lock_guard lk(b.mu);
        b.session.clear();
      }
      b.forward(line, id);
      continue;
    }
    std::unique_lock lk(b.mu);
    b.cv.wait(lk, [&] { return b.in_flight < kMaxInFlight; });
    ++b.in_flight;
    lk.unlock();
    std::thread([&b, line, id] {
      b.forward(line, id);
      std::lock_guard lk2(b.mu);
      --b.in_flight;
      b.cv.notify_all();
    }).detach();
  }
  std::unique_lock lk(b.mu);
  b.cv.wait(lk, [&] { return b.in_flight == 0; });
  if (!b.session.empty()) {
    // The client closed stdin: the session ends with it.
    (void)b.client.exchange("DELETE", "/mcp", "", {{"Mcp-Session-Id", b.session}}, {}, nullptr);
  }
  return 0;
}

}  // namespace

void add_mcp_command(CLI::App& app, const GlobalOptions& g, Action& action) {
  auto toolsets = std::make_shared<std::string>("sandboxes");
  auto* m = app.add_subcommand("mcp", "Serve b3osd's MCP tools over stdio (for MCP clients that start a command)");
  m->add_option("--toolsets", *toolsets, "Toolsets: sandboxes, snapshots, templates, all (comma-separated)")
      ->capture_default_str();
  m->callback([&g, &action, toolsets] { action = [&g, toolsets] { return run_mcp(g, *toolsets); }; });
}

}  // namespace b3os::cli
