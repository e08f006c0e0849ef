#pragma once
// The model gateway: OpenAI-compatible chat completions and models, priced per call and
// held to hard spend caps (docs/gateway.md). Called from the REST API (/v1/infer/..., the
// key's budget) and from the agent relay inside sandboxes (the sandbox grant's budget).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json.h"
#include "common/result.h"
#include "daemon/gateway/budget.h"
#include "daemon/gateway/models.h"

namespace b3os::gateway {

/// Who pays for a call, and what the ledger records about it. A sandbox's call has
/// `sandbox_id` (and its grant's budget); a call from outside has the key's id as `key_id`
/// and `budget_id`.
struct Caller {
  std::string budget_id, project_id, sandbox_id, key_id;
  /// A sandbox's grant names the infer:run scope (read only for sandboxes: keys need none).
  /// False unless set, so a caller that forgets it is refused, never let through.
  bool infer_scope = false;
};

/// Where the answer goes: a whole body, or a stream of bytes.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual Result<void> respond(int status, const std::string& content_type, const std::string& body) = 0;
  virtual Result<void> begin_stream(int status, const std::string& content_type) = 0;
  virtual Result<void> write(std::string_view bytes) = 0;
  /// Ends a stream; `ok` false when the upstream broke mid-way.
  virtual void end(bool ok) = 0;
  /// True when the caller went away (the upstream call is then stopped).
  virtual bool gone() = 0;
};

/// The OpenAI-shaped body of one of b3os's errors: {"error":{"message","type","param":null,
/// "code"}}, its type and code from the one error table (common/error.cc).
std::string openai_error_body(const Error& e);
/// Answers `e` on `sink`: the table's HTTP status and the OpenAI-shaped body. The one way the
/// gateway (and the places that refuse before it) answer an error of their own.
void answer_error(Sink& sink, const Error& e);
/// An OpenAI-shaped body from its parts, for errors b3os does not decide itself (an upstream's
/// own 4xx, relayed). b3os's own errors go through the Error overload above.
std::string openai_error_body(const std::string& message, const std::string& type, const std::string& code);

class Gateway {
 public:
  Gateway(std::vector<ModelConfig> models, Budgets& budgets);

  bool configured() const { return !models_.empty(); }
  Budgets& budgets() { return budgets_; }
  /// The default model's public id ("" when none is configured).
  std::string default_model() const;
  /// The public ids of the models configured.
  std::vector<std::string> model_ids() const {
    std::vector<std::string> out;
    for (auto& m : models_) out.push_back(m.id);
    return out;
  }

  /// Whether `c` may use the gateway now, checked before its request is read: the one place
  /// these rules live, for the REST API (/v1/infer) and the sandbox relay alike:
  /// - a sandbox needs the infer:run scope: kForbidden;
  /// - the project must allow the gateway (`b3os projects set-infer`, read on every call, so
  ///   turning it off stops running sandboxes too): kForbidden;
  /// - a model must be configured: kProductUnavailable, saying how;
  /// - a sandbox's grant must have a budget (kInternal); a key's budget is created on its
  ///   first call.
  /// kInternal also when the store cannot be read.
  Result<void> admit(const Caller& c);

  /// Handles `method` on `subpath` (what follows /v1/infer: "", "/chat/completions",
  /// "/models", "/models/ID"). Every answer, errors included, is OpenAI-shaped.
  void handle(const Caller& c, const std::string& method, const std::string& subpath, const std::string& body,
              Sink& sink);

  /// Upper bound of a request's prompt tokens (public for tests).
  static int64_t estimate_prompt_tokens(const nlohmann::json& request);

 private:
  /// kProductUnavailable, saying how to configure a model, when none is configured.
  Result<void> check_configured() const;
  const ModelConfig* find(const std::string& id) const;
  void chat(const Caller& c, const std::string& body, Sink& sink);

  std::vector<ModelConfig> models_;
  Budgets& budgets_;
};

}  // namespace b3os::gateway
