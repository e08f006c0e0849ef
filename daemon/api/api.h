#pragma once
// The REST API: authentication, rate limits, idempotency, routing, errors and timing, then
// a call into the service layer. HTTP stops here.

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "daemon/api/rate_limit.h"
#include "daemon/api/target.h"
#include "daemon/api/config.h"
#include "daemon/e2b/server.h"
#include "daemon/gateway/gateway.h"
#include "daemon/http/server.h"
#include "daemon/mcp/server.h"
#include "daemon/sandbox/service.h"
#include "daemon/store/store.h"
#include "daemon/template/service.h"

namespace b3os::api {

/// A JSON response before timing is added.
struct Reply {
  int status = 200;
  nlohmann::json body;
  http::Headers headers;
};

/// The error body and status for an Error (`{"error": {"code", "message"}}`).
Reply error_reply(const Error& e);
/// Serialises JSON for the wire; invalid UTF-8 becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);
/// Formats Server-Timing from phases plus total.
std::string server_timing(const sandbox::Timing& t, double total_ms);

class Api {
 public:
  /// `mcp`: the MCP endpoint (/mcp); null answers it 501. `e2b`: E2B's API (docs/e2b.md);
  /// null leaves its paths to the routes (404).
  Api(const Config& cfg, store::Store& store, sandbox::SandboxService& sandboxes, gateway::Gateway& gw,
      mcp::Server* mcp = nullptr, tpl::TemplateService* templates = nullptr, e2b::Server* e2b = nullptr);
  /// Handles one request (the http::Server handler). `relayed_mcp`: a request to /mcp is one
  /// tools/call another node relayed (the internal listener checked its signature).
  void handle(http::Exchange& ex, bool relayed_mcp = false);
  /// Every REST route as (method, pattern): each must have a row in the access table.
  static std::vector<std::pair<std::string_view, std::string_view>> rest_routes();

 private:
  struct Call;
  /// One operation of the API: a method and a path pattern, and its handler.
  struct Route {
    std::string_view method;
    std::string_view pattern;
    Result<Reply> (Api::*json)(Call&);  // JSON in and out
    void (Api::*stream)(Call&);         // or: it reads and answers the request itself
    std::string_view operation = {};    // its name in b3os_operation_* metrics ("": not counted)
  };
  /// The route of a request, or the refusal (404, 405 with Allow, 501).
  struct Match {
    const Route* route = nullptr;
    Reply refusal;
  };
  static const std::vector<Route>& routes();
  Match route(Call& c);
  /// The route pattern a path has (its metrics label), whatever the method; "unmatched" else.
  static std::string_view route_label(const std::vector<std::string>& segments);
  Result<sandbox::Principal> authenticate(http::Exchange& ex);
  /// /v1/infer/...: the model gateway, paid from the calling key's budget.
  bool dispatch_infer(Call& c);
  void send(Call& c, Reply r);
  void send_error(Call& c, const Error& e);

  Result<Reply> list_templates(Call& c);
  Result<Reply> create_template(Call& c);
  Result<Reply> get_template(Call& c);
  Result<Reply> delete_template(Call& c);
  Result<Reply> list_builds(Call& c);
  Result<Reply> get_build(Call& c);
  Result<Reply> cancel_build(Call& c);
  void build_logs(Call& c);
  void upload_template_file(Call& c);
  Result<Reply> list_snapshots(Call& c);
  Result<Reply> get_snapshot(Call& c);
  Result<Reply> delete_snapshot(Call& c);
  Result<Reply> create_sandbox(Call& c);
  Result<Reply> list_sandboxes(Call& c);
  Result<Reply> get_sandbox(Call& c);
  Result<Reply> delete_sandbox(Call& c);
  Result<Reply> update_sandbox(Call& c);
  Result<Reply> exec(Call& c);
  Result<Reply> exec_streamed(Call& c, sandbox::ExecSpec& spec);
  Result<Reply> start_process(Call& c);
  Result<Reply> list_processes(Call& c);
  Result<Reply> get_process(Call& c);
  Result<Reply> forget_process(Call& c);
  Result<Reply> process_stdin(Call& c);
  Result<Reply> signal_process(Call& c);
  Result<Reply> wait_process(Call& c);
  void process_output(Call& c);
  void watch_files(Call& c);
  void terminal(Call& c);
  Result<Reply> remove_file(Call& c);
  Result<Reply> list_files(Call& c);
  Result<Reply> fork(Call& c);
  Result<Reply> pause(Call& c);
  Result<Reply> mint_port_url(Call& c);
  Result<Reply> resume(Call& c);
  Result<Reply> snapshot(Call& c);
  void upload(Call& c);
  void download(Call& c);

  Config cfg_;
  store::Store& store_;
  sandbox::SandboxService& sandboxes_;
  gateway::Gateway& gw_;
  mcp::Server* mcp_;
  tpl::TemplateService* templates_;
  e2b::Server* e2b_;
  RateLimiter limiter_;
  InFlightLimiter in_flight_;
};

}  // namespace b3os::api
