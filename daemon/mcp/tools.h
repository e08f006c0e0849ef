#pragma once
// The MCP tools: each a name, a title and a description written for a model, JSON Schemas of
// its arguments and of its result, and a call into SandboxService through the same request
// parsers the REST routes use (daemon/sandbox/requests.h, spec.h): one validation, one service
// call. Tools come in toolsets (`?toolsets=` on /mcp); docs/mcp.md is generated from this table.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/sys/codec.h"
#include "daemon/sandbox/service.h"
#include "daemon/template/service.h"
#include "daemon/sandbox/spec.h"

namespace b3os::mcp {

/// What a tool call may use besides its arguments.
struct CallContext {
  sandbox::Principal principal;
  /// True once the call should stop (the client went away, or sent notifications/cancelled).
  std::function<bool()> cancelled;
  /// Reports progress (elapsed seconds, a message); a no-op unless the client asked for it.
  std::function<void(double progress, const std::string& message)> progress;
  /// The call's phases, as the REST API reports them (`timing` in the structured result).
  sandbox::Timing timing;
};

/// A tool's answer: its structured result and a short text rendering of it. `is_error` marks a
/// result the model should read as a failure it may correct (a timed-out command).
struct ToolResult {
  nlohmann::json structured;
  std::string text;
  bool is_error = false;
};

struct Tool {
  std::string name, title, description, toolset;
  nlohmann::json input_schema, output_schema;
  std::function<Result<ToolResult>(const nlohmann::json& args, CallContext& ctx)> run;
  /// The tools/list entry.
  nlohmann::json listing() const;
};

struct ToolsConfig {
  sandbox::SpecLimits limits;
  /// Largest file sandbox_write_file takes and sandbox_read_file returns (bytes, decoded).
  size_t max_file_bytes = 8u << 20;
};

class Tools {
 public:
  /// `templates`: the templates users build (their tools); null: template_list alone.
  Tools(sandbox::SandboxService& sandboxes, ToolsConfig cfg, tpl::TemplateService* templates = nullptr);
  const std::vector<Tool>& all() const { return tools_; }
  const Tool* find(std::string_view name) const;

  /// The toolsets, in order, and the one a session gets when it names none.
  static const std::vector<std::string>& toolsets();
  static constexpr std::string_view kDefaultToolset = "sandboxes";

 private:
  sandbox::SandboxService& sandboxes_;
  ToolsConfig cfg_;
  std::vector<Tool> tools_;
};

using sys::base64_decode;
using sys::base64_encode;
using sys::valid_utf8;

}  // namespace b3os::mcp
