#include "daemon/http/metrics_listener.h"

#include <cstdlib>

#include "common/metrics.h"

namespace b3os::http {

bool split_address(const std::string& a, std::string& host, int& port) {
  const auto c = a.rfind(':');
  if (c == std::string::npos || c == 0) return false;
  host = a.substr(0, c);
  char* end = nullptr;
  const long p = std::strtol(a.c_str() + c + 1, &end, 10);
  if (end == a.c_str() + c + 1 || *end != '\0' || p < 0 || p > 65535) return false;
  port = static_cast<int>(p);
  return true;
}

void serve_metrics(Exchange& ex) {
  std::string_view target = ex.target();
  target = target.substr(0, target.find('?'));
  if (target != "/metrics") {
    ex.respond(404, "text/plain; charset=utf-8", "only GET /metrics is served here\n", {});
    return;
  }
  ex.set_route("/metrics");
  if (ex.method() != "GET") {
    ex.respond(405, "text/plain; charset=utf-8", "GET /metrics\n", {{"Allow", "GET"}});
    return;
  }
  ex.respond(200, "text/plain; version=0.0.4; charset=utf-8", metrics::metrics().render(), {});
}

Result<std::unique_ptr<Server>> listen_metrics(const std::string& address, const Config& base) {
  std::string host;
  int port = 0;
  if (!split_address(address, host, port))
    return fail(ErrorCode::kInvalidRequest, "a metrics address must be host:port (port 0-65535), got \"" + address + "\"");
  Config cfg;
  cfg.name = "metrics";
  cfg.max_connections = 64;
  cfg.max_requests = 4;
  cfg.idle_timeout = base.idle_timeout;
  cfg.head_timeout = base.head_timeout;
  cfg.body_timeout = base.body_timeout;
  auto server = std::make_unique<Server>(host, port, cfg, serve_metrics);
  if (auto r = server->listen(); !r) return fail(r.error());
  return server;
}

}  // namespace b3os::http
