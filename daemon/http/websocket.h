#pragma once
// The WebSocket side of the HTTP server (Beast's websocket::stream): the upgrade of a request
// the server parsed, then the connection run on the request's thread with its own io_context.
// Internal to daemon/http.

#include <chrono>

#include <boost/beast/http.hpp>

#include "common/result.h"
#include "daemon/http/server.h"

namespace b3os::http::detail {

/// True when `req` asks for a WebSocket (Connection: upgrade, Upgrade: websocket).
bool is_websocket_upgrade(const boost::beast::http::request<boost::beast::http::buffer_body>& req);

/// Accepts the upgrade on a duplicate of `fd` and runs the connection until it closes.
Result<void> run_websocket(int fd, const boost::beast::http::request<boost::beast::http::buffer_body>& req,
                           const WebSocketHandler& handler, std::chrono::milliseconds idle_timeout);

}  // namespace b3os::http::detail
