#pragma once
// JSON-RPC 2.0 as MCP's streamable HTTP transport carries it: exactly one message per POST
// (batches were removed in revision 2025-06-18 and are refused). Pure: no I/O, fuzzed
// (tests/fuzz/jsonrpc_fuzz.cc).

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <tl/expected.hpp>

namespace b3os::mcp {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

/// One message from a client.
struct Message {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kRequest;
  nlohmann::json id;      // a string or an integer (requests and responses); null otherwise
  std::string method;     // requests and notifications
  nlohmann::json params;  // always an object ({} when absent)
};

/// A message that is not one: its code, and the id when one could be read.
struct RpcError {
  int code = kInvalidRequest;
  std::string message;
  nlohmann::json id;  // null when the id could not be read
};

/// A string id longer than this is refused (ids are kept while their call runs, and echoed).
inline constexpr size_t kMaxIdBytes = 256;
/// Bodies above this depth are refused before they are parsed (parsing recurses).
inline constexpr size_t kMaxDepth = 64;

/// Parses the body of a POST: one JSON-RPC 2.0 request, notification or response.
tl::expected<Message, RpcError> parse_message(std::string_view body);

/// `{"jsonrpc": "2.0", "id": id, "result": result}`.
nlohmann::json make_result(const nlohmann::json& id, nlohmann::json result);
/// `{"jsonrpc": "2.0", "id": id, "error": {"code", "message"[, "data"]}}`.
nlohmann::json make_error(const nlohmann::json& id, int code, const std::string& message,
                          const nlohmann::json& data = nullptr);
/// A notification from the server (`notifications/progress`, ...).
nlohmann::json make_notification(const std::string& method, nlohmann::json params);

}  // namespace b3os::mcp
