// b3os-router: the one endpoint of a cluster (docs/cluster.md). Stateless: several may run
// behind a load balancer or a Kubernetes Service.

#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "daemon/cluster/peer.h"
#include "daemon/cluster/signature.h"
#include "daemon/http/metrics_listener.h"
#include "daemon/http/server.h"
#include "daemon/router/router.h"
#include "daemon/store/store.h"

using namespace b3os;

int main(int argc, char** argv) {
  CLI::App app{"b3os-router: one API endpoint for a cluster of b3osd nodes (docs/cluster.md)"};
  std::string listen_host = "127.0.0.1", store_spec, secret_file, name, log_level = "info";
  int port = 7080;
  router::Config cfg;
  http::Config http_cfg;
  http_cfg.name = "router";
  int64_t key_cache_ms = cfg.key_cache_ms;
  app.add_option("--listen", listen_host, "address to listen on")->capture_default_str();
  app.add_option("--port", port, "port to listen on")->capture_default_str();
  app.add_option("--store", store_spec, "the cluster's shared store: a postgres:// URL")->envname("B3OS_STORE")->required();
  app.add_option("--cluster-secret-file", secret_file, "the cluster secret (at least 32 bytes, mode 0600)")
      ->envname("B3OS_CLUSTER_SECRET_FILE")
      ->required();
  app.add_option("--name", name, "this router's name in logs (default: the host name)");
  app.add_option("--key-cache-ms", key_cache_ms, "how long a key found valid is trusted without asking the store")
      ->capture_default_str();
  app.add_option("--max-connections", http_cfg.max_connections, "open client connections")->capture_default_str();
  app.add_option("--max-requests", http_cfg.max_requests, "requests relayed at once")->capture_default_str();
  std::string cluster_tls_ca;
  app.add_option("--cluster-tls-ca", cluster_tls_ca,
                 "the CA the nodes' https:// internal listeners are checked against (PEM; docs/cluster.md)")
      ->envname("B3OS_CLUSTER_TLS_CA");
  std::string preview_listen = "off";
  app.add_option("--preview-listen", preview_listen,
                 "address:port serving the cluster's preview URLs (set the nodes' --preview-url-port to its port "
                 "and --preview-domain to the same domain), or off")
      ->envname("B3OS_ROUTER_PREVIEW_LISTEN")
      ->capture_default_str();
  app.add_option("--preview-domain", cfg.preview_domain, "the domain of preview URLs, as the nodes'")
      ->capture_default_str();
  std::string metrics_listen = "off";
  app.add_option("--metrics-listen", metrics_listen,
                 "address:port serving GET /metrics (Prometheus text format, no auth: keep it off the public network), "
                 "or off")
      ->envname("B3OS_ROUTER_METRICS_LISTEN")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  app.set_version_flag("--version", "b3os-router " B3OS_VERSION);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  ::signal(SIGPIPE, SIG_IGN);

  if (store_spec.rfind("postgres://", 0) != 0 && store_spec.rfind("postgresql://", 0) != 0) {
    std::cerr << "b3os-router: --store must be the cluster's postgres:// URL\n";
    return 2;
  }
  auto secret = cluster::read_cluster_secret(secret_file);
  if (!secret) {
    std::cerr << "b3os-router: " << secret.error().message << "\n";
    return 2;
  }
  if (!cluster_tls_ca.empty() && ::access(cluster_tls_ca.c_str(), R_OK) != 0) {
    std::cerr << "b3os-router: --cluster-tls-ca " << cluster_tls_ca << ": cannot read it\n";
    return 2;
  }
  router::set_cluster_ca(cluster_tls_ca);  // nodes with https:// URLs are dialed with TLS
  cluster::set_tls_ca(cluster_tls_ca);
  if (name.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    name = std::string("router-") + host;
  }
  auto store = store::open_store(store_spec, "", name, 16);
  if (!store) {
    std::cerr << "b3os-router: " << store.error().message << "\n";
    return 1;
  }
  cfg.secret = *secret;
  cfg.key_cache_ms = key_cache_ms;
  router::Router router(cfg, **store);
  router.register_metrics();
  std::unique_ptr<http::Server> preview_server;
  if (preview_listen != "off") {
    std::string phost;
    int pport = 0;
    if (!http::split_address(preview_listen, phost, pport)) {
      std::cerr << "b3os-router: --preview-listen must be host:port or off, got \"" << preview_listen << "\"\n";
      return 2;
    }
    http::Config pcfg = http_cfg;
    pcfg.name = "router-preview";
    preview_server = std::make_unique<http::Server>(phost, pport, pcfg,
                                                    [&router](http::Exchange& ex) { router.handle_preview(ex); });
    if (auto r = preview_server->listen(); !r) {
      std::cerr << "b3os-router: the preview listener (--preview-listen " << preview_listen << "): " << r.error().message
                << "\n";
      return 1;
    }
    std::thread([&preview_server] { preview_server->run(); }).detach();
  }
  std::unique_ptr<http::Server> metrics_server;
  if (metrics_listen != "off") {
    auto m = http::listen_metrics(metrics_listen, http_cfg);
    if (!m) {
      std::cerr << "b3os-router: the metrics listener (--metrics-listen " << metrics_listen << "): " << m.error().message
                << "\n";
      return 2;
    }
    metrics_server = std::move(*m);
    std::thread([&metrics_server] { metrics_server->run(); }).detach();
  }
  http::Server server(listen_host, port, http_cfg, [&router](http::Exchange& ex) { router.handle(ex); });
  if (auto r = server.listen(); !r) {
    std::cerr << "b3os-router: " << r.error().message << "\n";
    return 1;
  }
  std::cout << "b3os-router listening on http://" << listen_host << ":" << server.port();
  if (preview_server) std::cout << ", previews on http://" << preview_listen.substr(0, preview_listen.rfind(':')) << ":"
                                << preview_server->port();
  if (metrics_server) std::cout << ", metrics on http://" << metrics_listen.substr(0, metrics_listen.rfind(':')) << ":"
                                << metrics_server->port() << "/metrics";
  std::cout << std::endl;
  server.run();
  return 0;
}
