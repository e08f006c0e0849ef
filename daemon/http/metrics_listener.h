#pragma once
// The listener of GET /metrics (Prometheus text format, no auth), shared by b3osd and
// b3os-router: a small server of its own so that a scrape never waits behind the API's
// connection or request limits, and the API's port never serves metrics.

#include <memory>
#include <string>

#include "common/result.h"
#include "daemon/http/server.h"

namespace b3os::http {

/// "host:port" into its parts; false unless the port is 0-65535 (0: any free one) and the
/// host is not empty.
bool split_address(const std::string& address, std::string& host, int& port);

/// Answers GET /metrics with the process's registry (metrics::metrics()); 404 for any other
/// path, 405 for another method.
void serve_metrics(Exchange& ex);

/// A listening metrics server on `address` ("host:port"), its timeouts from `base`; an
/// error when the address is not host:port or cannot be bound. Call run() on a thread.
Result<std::unique_ptr<Server>> listen_metrics(const std::string& address, const Config& base);

}  // namespace b3os::http
