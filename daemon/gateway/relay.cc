#include "daemon/gateway/relay.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <spdlog/spdlog.h>

namespace b3os::gateway {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr auto kRelayRequestTimeout = 30s;  // the agent sends a whole request well within this
constexpr auto kRelayWriteTimeout = 120s;   // a reader inside that stops reading is given up on
constexpr size_t kMaxRelayBody = 4u << 20;  // the agent refuses more (one window)


/// Writes a gateway answer back through the agent to the client inside the sandbox.
class RelaySink : public Sink {
 public:
  explicit RelaySink(std::shared_ptr<agentlink::Stream> st) : st_(std::move(st)) {}

  Result<void> respond(int status, const std::string& content_type, const std::string& body) override {
    if (auto r = begin_stream(status, content_type); !r) return r;
    if (auto r = write(body); !r) return r;
    end(true);
    return {};
  }
  Result<void> begin_stream(int status, const std::string& content_type) override {
    return st_->send_header({{"status", status}, {"headers", {{"content-type", content_type}}}});
  }
  Result<void> write(std::string_view bytes) override {
    if (bytes.empty()) return {};
    return st_->send_data(bytes, Clock::now() + kRelayWriteTimeout);
  }
  void end(bool ok) override {
    if (ok)
      (void)st_->send_end({{"ok", true}});
    else
      (void)st_->send_end({{"ok", false}, {"error", {{"code", "internal"}, {"message", "the model call broke off"}}}});
  }
  bool gone() override { return st_->cancelled(); }

 private:
  std::shared_ptr<agentlink::Stream> st_;
};

}  // namespace

Relay::Relay(Gateway* gw, Lookup lookup) : gw_(gw), lookup_(std::move(lookup)) {}

std::optional<std::string> Relay::take(const std::string& id) {
  std::lock_guard lk(share_mu_);
  if (share_.try_take(id)) return std::nullopt;
  if (share_.of(id) >= share_.limits().per_tenant)
    return "this sandbox has " + std::to_string(share_.of(id)) + " model calls in flight, its maximum; retry";
  return std::string("too many model calls in flight on this node; retry");
}

void Relay::give(const std::string& id) {
  std::lock_guard lk(share_mu_);
  share_.give(id);
}

size_t Relay::calls_of(const std::string& id) {
  std::lock_guard lk(share_mu_);
  return share_.of(id);
}

void Relay::serve(const std::string& id, std::shared_ptr<agentlink::Stream> st) {
  // Runs on the channel's reader thread: hand the call to a thread of its own at once, within
  // the sandbox's share of the node's calls, and never let an exception reach the reader.
  if (auto why = take(id)) {
    RelaySink busy(st);
    answer_error(busy, {ErrorCode::kCapacityUnavailable, *why, 0});
    return;
  }
  try {
    std::thread([this, id, st] {
      try {
        relay_one(id, st);
      } catch (const std::exception& e) {
        spdlog::error("sandbox {}: model call failed: {}", id, e.what());
        // END ok:false works whether or not an answer had begun: before the HEADER the agent
        // answers 500 itself, after it the connection closes.
        (void)st->send_end({{"ok", false}, {"error", {{"code", "internal"}, {"message", "b3osd failed this call"}}}});
      }
      give(id);
    }).detach();
  } catch (const std::exception& e) {
    give(id);
    spdlog::error("sandbox {}: no thread for a model call: {}", id, e.what());
    RelaySink busy(st);
    answer_error(busy, {ErrorCode::kCapacityUnavailable, "b3osd is out of threads; retry", 0});
  }
}

void Relay::relay_one(const std::string& id, const std::shared_ptr<agentlink::Stream>& st) {
  RelaySink sink(st);
  auto refuse = [&](ErrorCode code, std::string msg) { answer_error(sink, {code, std::move(msg), 0}); };
  // The request: OPEN, then its body as DATA up to EOF.
  const auto deadline = Clock::now() + kRelayRequestTimeout;
  auto open = st->next(deadline);
  if (!open) return;
  json req = json::parse(open->payload, nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("op") || req["op"] != "http" ||
      !req.contains("path") || !req["path"].is_string() || !req.contains("method") || !req["method"].is_string())
    return refuse(ErrorCode::kInvalidRequest, "the agent relayed a request b3osd cannot read");
  std::string body;
  for (;;) {
    auto f = st->next(deadline);
    if (!f) return;
    if (f->type == protocol::FrameType::kCancel) return;
    if (f->type == protocol::FrameType::kEof) break;
    if (f->type != protocol::FrameType::kData) continue;
    body += f->payload;
    st->grant(static_cast<uint32_t>(f->payload.size()));
    if (body.size() > kMaxRelayBody) return refuse(ErrorCode::kPayloadTooLarge, "request body over 4 MiB");
  }
  auto grant = lookup_(id);
  if (!grant) return refuse(ErrorCode::kSandboxNotRunning, "this sandbox is not in service");
  if (!gw_) return refuse(ErrorCode::kProductUnavailable, "this b3osd has no model gateway");
  const std::string path = req["path"].get<std::string>();
  const std::string prefix = "/v1/infer";
  if (path.rfind(prefix, 0) != 0 || (path.size() > prefix.size() && path[prefix.size()] != '/'))
    return refuse(ErrorCode::kNotFound, "nothing at " + path + " (the model endpoint is " + prefix + " on 127.0.0.1:7700)");
  Caller c;
  c.budget_id = grant->budget_id;
  c.project_id = grant->project_id;
  c.sandbox_id = id;
  c.infer_scope = grant->infer;
  // Admission is read on every call: turning a project's switch off stops running sandboxes too.
  if (auto r = gw_->admit(c); !r) return answer_error(sink, r.error());
  gw_->handle(c, req["method"].get<std::string>(), path.substr(prefix.size()), body, sink);
}

}  // namespace b3os::gateway
