// SandboxService: model access from inside sandboxes (grants, budgets and the agent relay).
#include "daemon/sandbox/service_internal.h"

#include <atomic>

#include <spdlog/spdlog.h>

#include "common/ids.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace detail;

namespace {

constexpr auto kRelayRequestTimeout = 30s;  // the agent sends a whole request well within this
constexpr auto kRelayWriteTimeout = 120s;   // a reader inside that stops reading is given up on
constexpr size_t kMaxRelayBody = 4u << 20;  // the agent refuses more (one window)
constexpr int kMaxRelayCalls = 512;          // model calls from all sandboxes at once

std::atomic<int> g_relay_calls{0};

/// Writes a gateway answer back through the agent to the client inside the sandbox.
class RelaySink : public gateway::Sink {
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

Result<std::string> SandboxService::grant_budget(const Principal& p, const SandboxSpec& spec, const std::string& inherited) {
  const bool infer = std::find(spec.api.scopes.begin(), spec.api.scopes.end(), "infer:run") != spec.api.scopes.end();
  if (!infer) return std::string();
  auto allowed = store_.project_allows_infer(p.project_id);
  if (!allowed) return fail(allowed.error());
  if (!*allowed)
    return fail(ErrorCode::kForbidden, "this project may not use the model gateway (api.scopes infer:run); an admin can "
                                       "allow it with `b3os projects set-infer NAME on`");
  if (!inherited.empty()) return inherited;
  // A cap of its own: a new budget, shared later by the sandbox's forks and snapshots.
  if (spec.api.spend_cap_usd) {
    std::string id = new_id("grt");
    if (auto r = store_.ensure_budget(id, p.project_id, usd_to_micros(*spec.api.spend_cap_usd)); !r) return fail(r.error());
    return id;
  }
  // No cap given: the creating key's own budget (and cap, if it has one) applies.
  if (p.key_id.empty()) return fail(ErrorCode::kInternal, "a grant with no cap needs the creating key");
  if (auto r = store_.ensure_budget(p.key_id, p.project_id, std::nullopt); !r) return fail(r.error());
  return p.key_id;
}

std::shared_ptr<agentlink::AgentChannel> SandboxService::start_channel(UniqueFd fd, const std::string& id) {
  // The relay handler is in place before the reader starts, so no early call is turned away.
  return agentlink::AgentChannel::start(
      std::move(fd), id, [this, id](const std::string& why) { on_channel_closed(id, why); },
      [this, id](std::shared_ptr<agentlink::Stream> st) { serve_relay(id, std::move(st)); });
}

void SandboxService::serve_relay(const std::string& id, std::shared_ptr<agentlink::Stream> st) {
  // Runs on the channel's reader thread: hand the call to a thread of its own at once, never
  // more than kMaxRelayCalls of them, and never let an exception reach the reader.
  if (++g_relay_calls > kMaxRelayCalls) {
    --g_relay_calls;
    RelaySink busy(st);
    (void)busy.respond(503, "application/json",
                       gateway::openai_error_body("too many model calls in flight on this node; retry", "server_error",
                                                  "capacity_unavailable"));
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
      --g_relay_calls;
    }).detach();
  } catch (const std::exception& e) {
    --g_relay_calls;
    spdlog::error("sandbox {}: no thread for a model call: {}", id, e.what());
    RelaySink busy(st);
    (void)busy.respond(503, "application/json", gateway::openai_error_body("b3osd is out of threads; retry", "server_error", "capacity_unavailable"));
  }
}

void SandboxService::relay_one(const std::string& id, const std::shared_ptr<agentlink::Stream>& st) {
  RelaySink sink(st);
  auto refuse = [&](int status, const std::string& msg, const std::string& type, const std::string& code) {
    (void)sink.respond(status, "application/json", gateway::openai_error_body(msg, type, code));
  };
  // The request: OPEN, then its body as DATA up to EOF.
  const auto deadline = Clock::now() + kRelayRequestTimeout;
  auto open = st->next(deadline);
  if (!open) return;
  json req = json::parse(open->payload, nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("op") || req["op"] != "http" ||
      !req.contains("path") || !req["path"].is_string() || !req.contains("method") || !req["method"].is_string())
    return refuse(400, "the agent relayed a request b3osd cannot read", "invalid_request_error", "invalid_request");
  std::string body;
  for (;;) {
    auto f = st->next(deadline);
    if (!f) return;
    if (f->type == protocol::FrameType::kCancel) return;
    if (f->type == protocol::FrameType::kEof) break;
    if (f->type != protocol::FrameType::kData) continue;
    body += f->payload;
    st->grant(static_cast<uint32_t>(f->payload.size()));
    if (body.size() > kMaxRelayBody) return refuse(413, "request body over 4 MiB", "invalid_request_error", "payload_too_large");
  }
  std::shared_ptr<Sandbox> s;
  {
    std::lock_guard lk(mu_);
    if (auto it = live_.find(id); it != live_.end()) s = it->second;
  }
  if (!s) return refuse(503, "this sandbox is not in service", "server_error", "sandbox_not_running");
  bool infer;
  gateway::Caller c;
  {
    std::lock_guard lk(s->mu);
    infer = grants_infer(s->doc);
    c.budget_id = s->doc["_b3os"].value("budget_id", "");
  }
  if (!infer)
    return refuse(403, "this sandbox was created without the infer:run scope; create it with \"api\": {\"scopes\": [\"infer:run\"]}",
                  "permission_error", "forbidden");
  // The project's switch is read on every call: turning it off stops running sandboxes too.
  auto allowed = store_.project_allows_infer(s->project_id);
  if (!allowed) return refuse(500, allowed.error().message, "server_error", "internal");
  if (!*allowed)
    return refuse(403, "this sandbox's project may not use the model gateway (b3os projects set-infer NAME on)",
                  "permission_error", "forbidden");
  if (!gw_) return refuse(503, "this b3osd has no model gateway", "server_error", "product_unavailable");
  const std::string path = req["path"].get<std::string>();
  const std::string prefix = "/v1/infer";
  if (path.rfind(prefix, 0) != 0 || (path.size() > prefix.size() && path[prefix.size()] != '/'))
    return refuse(404, "nothing at " + path + " (the model endpoint is " + std::string(kInferBaseUrl) + ")",
                  "invalid_request_error", "not_found");
  c.project_id = s->project_id;
  c.sandbox_id = id;
  if (c.budget_id.empty()) return refuse(500, "this sandbox's grant has no budget", "server_error", "internal");
  gw_->handle(c, req["method"].get<std::string>(), path.substr(prefix.size()), body, sink);
}

}  // namespace b3os::sandbox
