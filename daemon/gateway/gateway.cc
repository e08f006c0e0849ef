#include "daemon/gateway/gateway.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/scope_exit.h"
#include "daemon/gateway/upstream.h"

namespace b3os::gateway {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxUpstreamBody = 64u << 20;  // a non-streamed answer larger than this is refused
constexpr int kMaxChoices = 16;
constexpr size_t kMaxJsonDepth = 64;
// Fields some upstreams read as a completion length before max_tokens (llama.cpp's n_predict):
// the gateway sets the limit itself, so these never pass.
const char* const kLengthAliases[] = {"n_predict", "max_new_tokens", "num_predict", "max_length"};

json usage_of(const json& j) {
  if (j.is_object() && j.contains("usage") && j["usage"].is_object()) return j["usage"];
  return nullptr;
}

int64_t tokens(const json& usage, const char* field) {
  if (!usage.is_object() || !usage.contains(field) || !usage[field].is_number_integer()) return 0;
  return std::max<int64_t>(0, usage[field].get<int64_t>());
}

// The status the ledger records for a caller that went away (nginx's; never sent to anyone).
constexpr int kClientGone = 499;

/// Answers an upstream's error status. Its 4xx say the request was wrong (or the upstream is
/// rate-limited): the upstream decided them, so they pass on with its status, type and code
/// (`upstream_http_NNN` when it gave no code). Anything else, 5xx and also 401/403 (about the
/// upstream's key, not the caller's), is the gateway's own failure: 502 upstream_error. The
/// upstream's message is kept either way.
void answer_upstream_error(Sink& sink, int status, const std::string& body) {
  json j = json::parse(body, nullptr, false);
  std::string message = "the model upstream answered HTTP " + std::to_string(status);
  std::string type, code;
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object()) {
      if (e.contains("message") && e["message"].is_string()) message += ": " + e["message"].get<std::string>();
      if (e.contains("type") && e["type"].is_string()) type = e["type"].get<std::string>();
      if (e.contains("code") && e["code"].is_string()) code = e["code"].get<std::string>();
    } else if (e.is_string()) {
      message += ": " + e.get<std::string>();
    }
  } else if (!body.empty()) {
    message += ": " + body.substr(0, 300);
  }
  const bool relayed = status >= 400 && status < 500 && status != 401 && status != 403;
  if (!relayed) return answer_error(sink, Error{ErrorCode::kUpstreamError, message, 0});
  if (type.empty()) type = error_openai_type(ErrorCode::kInvalidRequest);
  if (code.empty()) code = "upstream_http_" + std::to_string(status);
  (void)sink.respond(status, "application/json", openai_error_body(message, type, code));
}

}  // namespace


std::string openai_error_body(const std::string& message, const std::string& type, const std::string& code) {
  return json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string openai_error_body(const Error& e) {
  return openai_error_body(e.message, std::string(error_openai_type(e.code)), std::string(error_code_name(e.code)));
}

namespace {
// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_calls = metrics::metrics().counter(
    "b3os_gateway_calls_total", "model gateway calls, by model and outcome (the ledger's: completed, "
    "completed_without_usage, upstream_error, client_gone, broken_stream...; and spend_cap_reached, budget_error "
    "for calls refused before the upstream)", {"model", "outcome"});
static auto& m_toks = metrics::metrics().counter(
    "b3os_gateway_tokens_total", "tokens charged by the model gateway, by model and kind (prompt, completion)",
    {"model", "kind"});
static auto& m_spend = metrics::metrics().counter(
    "b3os_gateway_spend_micros_total", "micro-dollars charged by the model gateway, by model", {"model"});

/// The gateway's metrics for one call: b3os_gateway_calls_total{model, outcome},
/// b3os_gateway_tokens_total{model, kind} and b3os_gateway_spend_micros_total{model}. Models
/// are the node's configured ones and outcomes the ledger's, so no client grows them.
void count_call(const std::string& model, const std::string& outcome, int64_t prompt, int64_t completion, Micros cost) {
  m_calls.with({model, outcome}).inc();
  if (prompt > 0) m_toks.with({model, "prompt"}).inc(static_cast<uint64_t>(prompt));
  if (completion > 0) m_toks.with({model, "completion"}).inc(static_cast<uint64_t>(completion));
  if (cost > 0) m_spend.with({model}).inc(static_cast<uint64_t>(cost));
}
}  // namespace

void answer_error(Sink& sink, const Error& e) {
  if (e.code == ErrorCode::kInternal) spdlog::error("gateway: {}", e.message);
  (void)sink.respond(error_http_status(e.code), "application/json", openai_error_body(e));
}

Gateway::Gateway(std::vector<ModelConfig> models, Budgets& budgets) : models_(std::move(models)), budgets_(budgets) {}

std::string Gateway::default_model() const {
  for (auto& m : models_)
    if (m.is_default) return m.id;
  return models_.empty() ? "" : models_.front().id;
}

Result<void> Gateway::check_configured() const {
  if (configured()) return {};
  return fail(ErrorCode::kProductUnavailable,
              "no model is configured on this b3osd: start it with --model ID=http://HOST:PORT/v1,upstream=NAME,"
              "in=USD_PER_M,out=USD_PER_M (or --models-file FILE); see docs/configuration.md");
}

Result<void> Gateway::admit(const Caller& c) {
  const bool sandbox = !c.sandbox_id.empty();
  if (sandbox && !c.infer_scope)
    return fail(ErrorCode::kForbidden,
                "this sandbox was created without the infer:run scope; create it with \"api\": {\"scopes\": [\"infer:run\"]}");
  auto allowed = budgets_.store().project_allows_infer(c.project_id);
  if (!allowed) return fail(allowed.error());
  if (!*allowed)
    return fail(ErrorCode::kForbidden,
                sandbox ? "this sandbox's project may not use the model gateway (b3os projects set-infer NAME on)"
                        : "this key's project may not use the model gateway (infer:run); an admin can allow it with "
                          "`b3os projects set-infer NAME on`");
  if (auto r = check_configured(); !r) return r;
  if (c.budget_id.empty())
    return fail(ErrorCode::kInternal, sandbox ? "this sandbox's grant has no budget" : "this call names no budget");
  // A key's budget (no cap until an admin sets one) exists from the key's first call.
  if (!sandbox) return budgets_.store().ensure_budget(c.budget_id, c.project_id, std::nullopt);
  return {};
}

const ModelConfig* Gateway::find(const std::string& id) const {
  for (auto& m : models_)
    if (m.id == id) return &m;
  return nullptr;
}

int64_t Gateway::estimate_prompt_tokens(const json& request) {
  // An upper bound, so that a reservation covers the real prompt: no BPE token is shorter
  // than one byte, plus the chat template's few tokens around each message. Taken over the
  // whole request, since tools, response_format and the like become prompt upstream.
  int64_t bytes = static_cast<int64_t>(request.dump(-1, ' ', false, json::error_handler_t::replace).size());
  const json* messages = request.is_object() && request.contains("messages") ? &request["messages"] : &request;
  int64_t n = messages->is_array() ? static_cast<int64_t>(messages->size()) : 1;
  return bytes + 8 * n + 16;
}

void Gateway::handle(const Caller& c, const std::string& method, const std::string& subpath, const std::string& body,
                     Sink& sink) {
  if (auto r = check_configured(); !r) return answer_error(sink, r.error());
  if (subpath == "/models" || subpath == "/models/") {
    if (method != "GET") return answer_error(sink, {ErrorCode::kMethodNotAllowed, "use GET on /models", 0});
    json data = json::array();
    for (auto& m : models_) data.push_back(m.to_openai());
    return (void)sink.respond(200, "application/json", json{{"object", "list"}, {"data", data}}.dump());
  }
  if (subpath.rfind("/models/", 0) == 0) {
    if (method != "GET") return answer_error(sink, {ErrorCode::kMethodNotAllowed, "use GET on /models/ID", 0});
    const ModelConfig* m = find(subpath.substr(8));
    if (!m) return answer_error(sink, {ErrorCode::kModelNotFound, "no model \"" + subpath.substr(8) + "\" on this node", 0});
    return (void)sink.respond(200, "application/json", m->to_openai().dump());
  }
  if (subpath == "/chat/completions" || subpath.empty() || subpath == "/") {
    if (method != "POST") return answer_error(sink, {ErrorCode::kMethodNotAllowed, "use POST for chat completions", 0});
    return chat(c, body, sink);
  }
  answer_error(sink, {ErrorCode::kNotFound,
                      "unknown path /v1/infer" + subpath + " (this gateway serves /chat/completions and /models)", 0});
}

void Gateway::chat(const Caller& c, const std::string& body, Sink& sink) {
  Stopwatch sw;
  // A request the gateway cannot serve as it is: 400, nothing reserved.
  auto bad = [&](std::string message) { answer_error(sink, {ErrorCode::kInvalidRequest, std::move(message), 0}); };
  if (json_depth(body) > kMaxJsonDepth)
    return bad("the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  json req = json::parse(body, nullptr, false);
  if (req.is_discarded() || !req.is_object())
    return bad("the body must be a JSON object (a chat completion request)");
  std::string model_id = default_model();
  if (req.contains("model")) {
    if (!req["model"].is_string()) return bad("model must be a string");
    model_id = req["model"].get<std::string>();
  }
  const ModelConfig* m = find(model_id);
  if (!m) {
    std::string known;
    for (auto& x : models_) known += (known.empty() ? "" : ", ") + x.id;
    return answer_error(sink, {ErrorCode::kModelNotFound, "no model \"" + model_id + "\" on this node (models: " + known + ")", 0});
  }
  if (!req.contains("messages") || !req["messages"].is_array() || req["messages"].empty())
    return bad("messages must be a non-empty array");
  int n = 1;
  if (req.contains("n") && !req["n"].is_null()) {
    if (!req["n"].is_number_integer() || req["n"].get<int64_t>() < 1 || req["n"].get<int64_t>() > kMaxChoices)
      return bad("n must be an integer from 1 to " + std::to_string(kMaxChoices));
    n = req["n"].get<int>();
  }
  // The completion's bound: what the request asks, never more than the model's limit; it is
  // always sent upstream, so the worst case below really is the worst case.
  const char* max_field = req.contains("max_completion_tokens") && !req["max_completion_tokens"].is_null()
                              ? "max_completion_tokens" : "max_tokens";
  int64_t max_out = m->max_output_tokens;
  if (req.contains(max_field) && !req[max_field].is_null()) {
    if (!req[max_field].is_number_integer() || req[max_field].get<int64_t>() < 1)
      return bad(std::string(max_field) + " must be a positive integer");
    max_out = std::min<int64_t>(max_out, req[max_field].get<int64_t>());
  }
  if (req.contains("stream") && !req["stream"].is_null() && !req["stream"].is_boolean())
    return bad("stream must be true or false");
  const bool stream = req.contains("stream") && req["stream"].is_boolean() && req["stream"].get<bool>();
  bool client_wants_usage = false;
  if (req.contains("stream_options") && !req["stream_options"].is_null()) {
    if (!stream) return bad("stream_options is only allowed when stream is true");
    const json& so = req["stream_options"];
    if (!so.is_object()) return bad("stream_options must be an object");
    if (so.contains("include_usage") && !so["include_usage"].is_boolean())
      return bad("stream_options.include_usage must be true or false");
    client_wants_usage = so.contains("include_usage") && so["include_usage"].get<bool>();
  }

  // Everything the upstream reads counts as prompt (tools, response_format...), not only
  // the messages: the bound is taken over the whole request.
  const int64_t prompt_est = estimate_prompt_tokens(req);
  const Micros worst = m->cost(prompt_est, max_out * n);
  const Micros input_cost = m->cost(prompt_est, 0);  // charged when the caller leaves early
  // 402 spend_cap_reached when the worst case would pass the cap; 500 when the budget is gone.
  auto reservation = budgets_.reserve(c.budget_id, worst);
  if (!reservation) {
    count_call(m->id, reservation.error().code == ErrorCode::kPaymentRequired ? "spend_cap_reached" : "budget_error", 0,
               0, 0);
    return answer_error(sink, reservation.error());
  }
  Reservation& held = *reservation;

  store::LedgerRow row;
  row.project_id = c.project_id;
  row.sandbox_id = c.sandbox_id;
  row.key_id = c.key_id;
  row.model = m->id;
  auto settle = [&](int status, std::string outcome, int64_t prompt, int64_t completion, Micros cost) {
    // Never more than was reserved: a cap is a promise. An upstream that reports more than
    // the bound allowed is logged and the difference is not charged.
    if (cost > held.amount) {
      spdlog::warn("gateway: {} reported a cost of {} over its reservation of {}; charged the reservation", m->id,
                   format_usd(cost), format_usd(held.amount));
      cost = held.amount;
      outcome += "_over_reservation";
    }
    row.status = status;
    row.outcome = outcome;
    row.prompt_tokens = prompt;
    row.completion_tokens = completion;
    row.cost_micros = cost;
    row.duration_ms = sw.elapsed_ms();
    budgets_.settle(held, row);
    count_call(m->id, outcome, prompt, completion, cost);
  };

  // Ends the call with an error of the gateway's own: charged `cost`, recorded with the status
  // the caller gets.
  auto fail_call = [&](const std::string& outcome, int64_t prompt, int64_t completion, Micros cost, const Error& e) {
    settle(error_http_status(e.code), outcome, prompt, completion, cost);
    answer_error(sink, e);
  };

  // Charges what the upstream reported it used.
  auto settle_usage = [&](int status, const std::string& outcome, const json& usage) {
    int64_t p = tokens(usage, "prompt_tokens"), q = tokens(usage, "completion_tokens");
    settle(status, outcome, p, q, m->cost(p, q));
  };

  // Whatever happens below (an exception included), the reservation is settled once.
  ScopeExit settle_if_forgotten([&] {
    if (held.active) settle(error_http_status(ErrorCode::kInternal), "internal_error", prompt_est, max_out * n, worst);
  });

  json up = req;
  up["model"] = m->upstream_model;
  // Both length fields carry the bound, whichever one the upstream reads.
  up["max_tokens"] = max_out;
  if (std::string(max_field) == "max_completion_tokens") up["max_completion_tokens"] = max_out;
  for (const char* alias : kLengthAliases) up.erase(alias);
  if (stream) {
    json so = up.contains("stream_options") && up["stream_options"].is_object() ? up["stream_options"] : json::object();
    so["include_usage"] = true;  // llama.cpp's server sends usage only when asked
    up["stream_options"] = so;
  } else {
    up.erase("stream_options");  // vLLM refuses it on a non-streamed call
  }
  auto key = m->upstream_key();
  if (!key) return fail_call("no_upstream_key", 0, 0, 0, key.error());
  UpstreamRequest ur;
  ur.host = m->host;
  ur.port = m->port;
  ur.target = m->path_prefix + "/chat/completions";
  ur.headers = {{"Content-Type", "application/json"}, {"Accept", stream ? "text/event-stream" : "application/json"}};
  if (!key->empty()) ur.headers.emplace_back("Authorization", "Bearer " + *key);
  ur.body = up.dump(-1, ' ', false, json::error_handler_t::replace);
  const Deadline deadline = Clock::now() + std::chrono::seconds(m->timeout_s);
  auto gone = [&] { return sink.gone(); };

  bool sent = false;  // the request reached the upstream (from then on, a failure is charged)
  // A call that failed before a usable answer: once the request was sent, the upstream may
  // have done (and billed) all the work, so the reservation is charged.
  auto upstream_failed = [&](const UpstreamError& e) {
    switch (e.kind) {
      case UpstreamFailure::kCancelled:
        settle(kClientGone, "client_gone", prompt_est, 0, input_cost);
        return;
      case UpstreamFailure::kTimeout: {
        Error out{ErrorCode::kUpstreamTimeout,
                  "the model upstream " + m->id + " did not answer within " + std::to_string(m->timeout_s) + " s", 0};
        if (sent) return fail_call("upstream_timeout", prompt_est, max_out * n, worst, out);
        return fail_call("upstream_timeout", 0, 0, 0, out);
      }
      case UpstreamFailure::kUnreachable:
        return fail_call("upstream_unreachable", 0, 0, 0,
                         {ErrorCode::kUpstreamUnavailable, "the model upstream " + m->id + " is unreachable (" + e.message + ")", 0});
      case UpstreamFailure::kBroken: {
        Error out{ErrorCode::kUpstreamError, "the model upstream " + m->id + " broke the call (" + e.message + ")", 0};
        if (sent) return fail_call("upstream_broken", prompt_est, max_out * n, worst, out);
        return fail_call("upstream_broken", 0, 0, 0, out);
      }
    }
  };

  auto call = UpstreamCall::start(ur, deadline, gone, &sent);
  if (!call) return upstream_failed(call.error());
  const int status = (*call)->status();

  if (!stream || status < 200 || status >= 300) {
    std::string answer;
    for (;;) {
      auto piece = (*call)->read(deadline, gone);
      if (!piece) return upstream_failed(piece.error());  // an answer cut short: charged
      if (!*piece) break;
      answer += **piece;
      if (answer.size() > kMaxUpstreamBody)
        return fail_call("upstream_too_large", 0, 0, worst, {ErrorCode::kUpstreamError, "the model upstream's answer passed 64 MiB", 0});
    }
    if (status < 200 || status >= 300) {
      settle(status, "upstream_error", 0, 0, 0);
      return answer_upstream_error(sink, status, answer);
    }
    json j = json::parse(answer, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return fail_call("upstream_unreadable", 0, 0, worst,
                       {ErrorCode::kUpstreamError, "the model upstream answered something that is not JSON", 0});
    json usage = usage_of(j);
    if (usage.is_null()) {
      settle(200, "completed_without_usage", prompt_est, max_out * n, worst);
    } else {
      settle_usage(200, "completed", usage);
    }
    if (j.contains("model")) j["model"] = m->id;
    return (void)sink.respond(200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  // A stream: relay each server-sent event as soon as it is whole, take the last usage seen.
  if (auto r = sink.begin_stream(200, "text/event-stream"); !r) return settle(kClientGone, "client_gone", prompt_est, 0, input_cost);
  json usage = nullptr;
  int64_t content_chunks = 0;
  bool done_seen = false;
  std::string pending;
  auto relay_event = [&](std::string_view event) -> Result<void> {
    // `event` holds one event's lines without the blank line that ends it.
    std::string out;
    size_t pos = 0;
    while (pos <= event.size()) {
      size_t eol = event.find('\n', pos);
      std::string_view line = event.substr(pos, eol == std::string_view::npos ? std::string_view::npos : eol - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.rfind("data:", 0) == 0) {
        std::string_view data = line.substr(5);
        if (!data.empty() && data.front() == ' ') data.remove_prefix(1);
        if (data == "[DONE]") {
          done_seen = true;
          out += "data: [DONE]\n";
        } else {
          json chunk = json::parse(data, nullptr, false);
          if (chunk.is_object()) {
            json u = usage_of(chunk);
            if (!u.is_null()) usage = u;
            bool usage_only = chunk.contains("choices") && chunk["choices"].is_array() && chunk["choices"].empty();
            if (usage_only && !client_wants_usage) {
              pos = eol == std::string_view::npos ? event.size() + 1 : eol + 1;
              continue;  // the client did not ask for it: its stream keeps the shape it asked for
            }
            if (!client_wants_usage) chunk.erase("usage");
            if (!usage_only) ++content_chunks;
            if (chunk.contains("model")) chunk["model"] = m->id;
            out += "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
          } else {
            out += "data: " + std::string(data) + "\n";
          }
        }
      } else if (!line.empty()) {
        out += std::string(line) + "\n";  // comments, event:, id:, retry: pass as they are
      }
      if (eol == std::string_view::npos) break;
      pos = eol + 1;
    }
    if (out.empty()) return {};
    out += "\n";
    return sink.write(out);
  };
  std::optional<UpstreamError> failure;
  bool caller_left = false;
  for (;;) {
    auto piece = (*call)->read(deadline, gone);
    if (!piece) {
      failure = piece.error();
      break;
    }
    if (!*piece) break;
    pending += **piece;
    for (;;) {
      size_t end = pending.find("\n\n");
      size_t crlf = pending.find("\r\n\r\n");
      size_t cut, skip;
      if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
        cut = crlf;
        skip = 4;
      } else if (end != std::string::npos) {
        cut = end;
        skip = 2;
      } else {
        break;
      }
      if (!relay_event(std::string_view(pending).substr(0, cut))) {
        caller_left = true;
        break;
      }
      pending.erase(0, cut + skip);
    }
    if (caller_left) break;
  }
  if (!failure && !caller_left && !pending.empty()) caller_left = !relay_event(pending);
  if (caller_left || (failure && failure->kind == UpstreamFailure::kCancelled)) {
    // The caller left: closing the upstream connection stops the generation. Charge the
    // usage if it came, else the input and the chunks relayed so far (about a token each).
    if (!usage.is_null()) {
      settle_usage(kClientGone, "client_gone", usage);
    } else {
      settle(kClientGone, "client_gone", prompt_est, content_chunks, m->cost(prompt_est, content_chunks));
    }
    sink.end(false);
    return;
  }
  const bool broken = failure.has_value() || !done_seen;
  if (!usage.is_null()) {
    settle_usage(200, broken ? "broken_stream_with_usage" : "completed", usage);
  } else {
    // No usage: a broken stream (or an upstream that never reports it) is charged the whole
    // reservation, the only amount known not to undercharge.
    settle(200, broken ? "broken_stream" : "completed_without_usage", prompt_est, max_out * n, worst);
  }
  if (broken) spdlog::warn("gateway: stream from {} ended early{}", m->id, failure ? ": " + failure->message : "");
  sink.end(!broken);
}

}  // namespace b3os::gateway
