#include "cli/args.h"

#include <cctype>
#include <charconv>

namespace b3os::cli {

namespace {

bool is_unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

Result<uint16_t> parse_port(std::string_view s, std::string_view url) {
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || value == 0 || value > 65535) {
    return fail(ErrorCode::kInvalidRequest,
                "API URL " + std::string(url) + ": bad port \"" + std::string(s) + "\"");
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_kv(std::string_view arg) {
  auto eq = arg.find('=');
  if (eq == std::string_view::npos) {
    return fail(ErrorCode::kInvalidRequest, "expected K=V, got \"" + std::string(arg) + "\"");
  }
  if (eq == 0) {
    return fail(ErrorCode::kInvalidRequest, "empty key in \"" + std::string(arg) + "\"");
  }
  return std::pair{std::string(arg.substr(0, eq)), std::string(arg.substr(eq + 1))};
}

Result<Json> parse_kv_object(const std::vector<std::string>& args, std::string_view what) {
  auto obj = Json::object();
  for (const auto& arg : args) {
    auto kv = parse_kv(arg);
    if (!kv) return fail(kv.error().wrap(what));
    obj[kv->first] = kv->second;
  }
  return obj;
}

Result<std::vector<std::pair<std::string, std::string>>> parse_kv_pairs(
    const std::vector<std::string>& args, std::string_view what) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& arg : args) {
    auto kv = parse_kv(arg);
    if (!kv) return fail(kv.error().wrap(what));
    out.push_back(std::move(*kv));
  }
  return out;
}

std::string ApiUrl::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (port != 80) h += ":" + std::to_string(port);
  return h;
}

std::string ApiUrl::target(std::string_view path) const { return base_path + std::string(path); }

Result<ApiUrl> parse_api_url(std::string_view url) {
  ApiUrl out;
  out.original = std::string(url);
  std::string_view rest = url;
  auto scheme_end = rest.find("://");
  if (scheme_end != std::string_view::npos) {
    std::string scheme(rest.substr(0, scheme_end));
    for (auto& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (scheme == "https") {
      return fail(ErrorCode::kInvalidRequest,
                  "API URL " + out.original + ": https is not supported, use http://");
    }
    if (scheme != "http") {
      return fail(ErrorCode::kInvalidRequest,
                  "API URL " + out.original + ": unsupported scheme \"" + scheme + "\"");
    }
    rest.remove_prefix(scheme_end + 3);
  }
  auto path_start = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_start);
  std::string_view path = path_start == std::string_view::npos ? "" : rest.substr(path_start);
  if (!path.empty() && path.front() != '/') {
    return fail(ErrorCode::kInvalidRequest,
                "API URL " + out.original + ": a query or fragment is not allowed");
  }
  if (authority.find('@') != std::string_view::npos) {
    return fail(ErrorCode::kInvalidRequest,
                "API URL " + out.original + ": user info is not allowed; use --api-key");
  }

  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return fail(ErrorCode::kInvalidRequest, "API URL " + out.original + ": unclosed '['");
    }
    out.host = std::string(authority.substr(1, close - 1));
    auto after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return fail(ErrorCode::kInvalidRequest, "API URL " + out.original + ": bad host");
      }
      port_text = after.substr(1);
    }
  } else {
    auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) {
    return fail(ErrorCode::kInvalidRequest, "API URL " + out.original + ": no host");
  }
  if (!port_text.empty() || authority.ends_with(':')) {
    auto port = parse_port(port_text, out.original);
    if (!port) return fail(port.error());
    out.port = *port;
  }
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  out.base_path = std::string(path);
  return out;
}

std::string url_encode(std::string_view s, std::string_view keep) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (is_unreserved(c) || keep.find(c) != std::string_view::npos) {
      out += c;
    } else {
      auto b = static_cast<unsigned char>(c);
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 0x0F];
    }
  }
  return out;
}

Query& Query::add(std::string_view name, std::string_view value) {
  text_ += text_.empty() ? '?' : '&';
  text_ += url_encode(name);
  text_ += '=';
  text_ += url_encode(value, "/");
  return *this;
}

Query& Query::add_metadata(std::string_view key, std::string_view value) {
  std::string name = "metadata[" + url_encode(key) + "]";
  text_ += text_.empty() ? '?' : '&';
  text_ += name;
  text_ += '=';
  text_ += url_encode(value, "/");
  return *this;
}

std::string Query::str() const { return text_; }

std::string sandbox_path(std::string_view id, std::string_view suffix) {
  return "/v1/sandboxes/" + url_encode(id) + std::string(suffix);
}

}  // namespace b3os::cli
