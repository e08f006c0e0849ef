#include "daemon/mcp/jsonrpc.h"

#include "common/json.h"

namespace b3os::mcp {

using nlohmann::json;

namespace {
tl::unexpected<RpcError> bad(int code, std::string message, json id = nullptr) {
  return tl::unexpected<RpcError>(RpcError{code, std::move(message), std::move(id)});
}

bool valid_id(const json& id) { return id.is_string() || id.is_number_integer() || id.is_number_unsigned(); }
}  // namespace

tl::expected<Message, RpcError> parse_message(std::string_view body) {
  if (json_depth(body) > kMaxDepth) return bad(kParseError, "the message is nested deeper than 64 levels");
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return bad(kParseError, "the body is not valid JSON");
  if (j.is_array()) return bad(kInvalidRequest, "JSON-RPC batches are not supported: send one message per request");
  if (!j.is_object()) return bad(kInvalidRequest, "a JSON-RPC message is an object");
  json id = nullptr;
  if (auto it = j.find("id"); it != j.end()) {
    if (!valid_id(*it)) return bad(kInvalidRequest, "\"id\" must be a string or an integer");
    if (it->is_string() && it->get_ref<const std::string&>().size() > kMaxIdBytes)
      return bad(kInvalidRequest, "\"id\": at most 256 characters");
    id = *it;
  }
  auto v = j.find("jsonrpc");
  if (v == j.end() || !v->is_string() || v->get_ref<const std::string&>() != "2.0")
    return bad(kInvalidRequest, "\"jsonrpc\" must be \"2.0\"", id);
  Message m;
  m.id = id;
  auto method = j.find("method");
  if (method == j.end()) {
    // A response to something the server asked (it asks nothing today): taken and dropped.
    if (id.is_null() || (!j.contains("result") && !j.contains("error")))
      return bad(kInvalidRequest, "a message needs a \"method\" (request, notification) or a \"result\" or \"error\" (response)", id);
    m.kind = Message::Kind::kResponse;
    m.params = json::object();
    return m;
  }
  if (!method->is_string() || method->get_ref<const std::string&>().empty())
    return bad(kInvalidRequest, "\"method\" must be a non-empty string", id);
  m.method = method->get<std::string>();
  m.kind = j.contains("id") ? Message::Kind::kRequest : Message::Kind::kNotification;
  auto params = j.find("params");
  if (params == j.end() || params->is_null()) {
    m.params = json::object();
  } else if (params->is_object()) {
    m.params = std::move(*params);
  } else {
    return bad(kInvalidParams, "\"params\" must be an object", id);
  }
  return m;
}

json make_result(const json& id, json result) {
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json make_error(const json& id, int code, const std::string& message, const json& data) {
  json err = {{"code", code}, {"message", message}};
  if (!data.is_null()) err["data"] = data;
  return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", std::move(err)}};
}

json make_notification(const std::string& method, json params) {
  return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
}

}  // namespace b3os::mcp
