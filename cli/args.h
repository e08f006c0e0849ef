#pragma once
// Pure helpers of the b3os CLI: K=V arguments, the API URL, URL encoding and query strings.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"

namespace b3os::cli {

/// JSON as the CLI handles it: objects keep the server's key order for display.
using Json = nlohmann::ordered_json;

/// The default daemon address when neither --api-url nor B3OS_API_URL is set.
inline constexpr std::string_view kDefaultApiUrl = "http://127.0.0.1:7070";

/// Splits "K=V" at the first '='; the value may be empty or contain '=', the key may not be empty.
Result<std::pair<std::string, std::string>> parse_kv(std::string_view arg);

/// Parses repeated K=V arguments into a JSON object of strings; a later key replaces an earlier
/// one. `what` names the flag in errors, e.g. "--env".
Result<Json> parse_kv_object(const std::vector<std::string>& args, std::string_view what);

/// Parses repeated K=V arguments into ordered pairs (duplicates kept), for query filters.
Result<std::vector<std::pair<std::string, std::string>>> parse_kv_pairs(
    const std::vector<std::string>& args, std::string_view what);

/// Where the daemon is: `http://host[:port][/base]`. Only plain HTTP is supported.
struct ApiUrl {
  std::string host;       // without brackets for IPv6
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix", never with a trailing slash
  std::string original;   // as given, for messages

  /// The Host header value: host, bracketed if IPv6, with ":port" unless it is 80.
  std::string host_header() const;
  /// The request target for an API path: base_path + path.
  std::string target(std::string_view path) const;
};

/// Parses "http://127.0.0.1:7070", "http://[::1]:7070/b3os/", or "localhost:7070" (http assumed).
Result<ApiUrl> parse_api_url(std::string_view url);

/// Percent-encodes everything but RFC 3986 unreserved characters; `keep` lists extra characters
/// left as they are (e.g. "/" for paths in a query value).
std::string url_encode(std::string_view s, std::string_view keep = "");

/// Builds a query string: adds "name=value" pairs, encoded, and renders "?a=1&b=2" (or "").
class Query {
 public:
  /// Adds a pair, both sides encoded ('/' is kept in values, so paths stay readable).
  Query& add(std::string_view name, std::string_view value);
  /// Adds `metadata[key]=value`, the filter form of GET /v1/sandboxes.
  Query& add_metadata(std::string_view key, std::string_view value);
  /// "?..." or "" if no pair was added.
  std::string str() const;

 private:
  std::string text_;
};

/// Builds a sandbox path: "/v1/sandboxes/ID" + suffix, with the id encoded.
std::string sandbox_path(std::string_view id, std::string_view suffix = "");

}  // namespace b3os::cli
