#pragma once
// An exchange whose request body was read whole already (and checked: the cluster listener
// reads a body a router signed the digest of before the API sees any of it): the handler reads
// that body from memory, through read_body or read_chunk, and a proxy sends it. Everything
// else goes to the exchange it wraps.

#include <string>

#include "daemon/http/server.h"

namespace b3os::http {

class HeldBodyExchange final : public Exchange {
 public:
  HeldBodyExchange(Exchange& inner, std::string body) : inner_(inner), body_(std::move(body)) {}

  std::string_view method() const override { return inner_.method(); }
  std::string_view target() const override { return inner_.target(); }
  std::string_view header(std::string_view name) const override { return inner_.header(name); }
  std::string peer_address() const override { return inner_.peer_address(); }
  std::optional<uint64_t> content_length() const override { return body_.size(); }
  bool has_body() const override { return !body_.empty(); }

  Result<std::string> read_body(size_t limit) override;
  Result<size_t> read_chunk(char* buf, size_t cap, uint64_t limit) override;

  void respond(int status, std::string_view content_type, std::string body, const Headers& headers) override {
    inner_.respond(status, content_type, std::move(body), headers);
  }
  Result<void> begin_stream(int status, std::string_view content_type, uint64_t length, const Headers& headers) override {
    return inner_.begin_stream(status, content_type, length, headers);
  }
  Result<void> write(std::string_view bytes) override { return inner_.write(bytes); }
  Result<void> end_stream() override { return inner_.end_stream(); }
  void abort_stream() override { inner_.abort_stream(); }
  bool responded() const override { return inner_.responded(); }
  bool client_gone() const override { return inner_.client_gone(); }
  Result<void> proxy(Upstream& up, const ProxyOptions& opts) override;
  Result<void> hold_stream(std::string_view tenant) override { return inner_.hold_stream(tenant); }
  bool is_websocket_upgrade() const override { return inner_.is_websocket_upgrade(); }
  Result<void> websocket(const WebSocketHandler& handler, std::chrono::milliseconds idle_timeout) override {
    return inner_.websocket(handler, idle_timeout);
  }
  std::string_view request_id() const override { return inner_.request_id(); }
  void set_route(std::string_view route) override { inner_.set_route(route); }

 private:
  Exchange& inner_;
  std::string body_;
  size_t read_ = 0;  // of body_, by read_chunk
};

}  // namespace b3os::http
