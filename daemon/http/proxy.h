#pragma once
// The relay behind Exchange::proxy (server.h), apart from the server: it needs the
// connection's socket, buffer and parser, so it is an internal header of this module.

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "daemon/http/server.h"

namespace b3os::http::detail {

/// What the relay left of the client connection.
struct ProxyState {
  bool responded = false;  // a response head went to the client
  bool reusable = false;   // the connection may carry another request
  int status = 0;          // the status of the response head relayed
};

Result<void> relay(Exchange& ex, boost::asio::ip::tcp::socket& sock, boost::beast::flat_buffer& buf,
                   boost::beast::http::request_parser<boost::beast::http::buffer_body>& parser, Upstream& up,
                   const ProxyOptions& opts, ProxyState& st);

}  // namespace b3os::http::detail
