#include "daemon/gateway/models.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace b3os::gateway {

using nlohmann::json;

namespace {

Error bad(const std::string& what, const std::string& why) {
  return Error{ErrorCode::kInvalidRequest, "model " + what + ": " + why, 0};
}

/// Splits base_url into host, port and path prefix. Only http:// is spoken to upstreams.
Result<void> parse_base_url(ModelConfig& m) {
  std::string u = m.base_url;
  if (u.rfind("https://", 0) == 0)
    return fail(bad(m.id, "https upstreams are not supported by this build; run the upstream on plain http on "
                          "a local or private address (llama.cpp, vLLM and Ollama all do), or put a local "
                          "TLS-originating proxy in front of a remote API"));
  if (u.rfind("http://", 0) != 0) return fail(bad(m.id, "base URL must start with http:// (got \"" + u + "\")"));
  u = u.substr(7);
  size_t slash = u.find('/');
  std::string hostport = u.substr(0, slash);
  m.path_prefix = slash == std::string::npos ? "" : u.substr(slash);
  while (!m.path_prefix.empty() && m.path_prefix.back() == '/') m.path_prefix.pop_back();
  if (hostport.empty()) return fail(bad(m.id, "base URL has no host"));
  if (hostport.front() == '[') {
    size_t close = hostport.find(']');
    if (close == std::string::npos) return fail(bad(m.id, "bad IPv6 address in the base URL"));
    m.host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size() && hostport[close + 1] == ':') m.port = hostport.substr(close + 2);
  } else if (size_t colon = hostport.rfind(':'); colon != std::string::npos) {
    m.host = hostport.substr(0, colon);
    m.port = hostport.substr(colon + 1);
  } else {
    m.host = hostport;
  }
  if (m.host.empty() || m.port.empty() || m.port.find_first_not_of("0123456789") != std::string::npos)
    return fail(bad(m.id, "bad host or port in base URL \"" + m.base_url + "\""));
  return {};
}

/// A price in USD per million tokens, kept to the micro-dollar (per million tokens).
Result<Micros> parse_price(const std::string& id, const std::string& key, const std::string& v) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= 0 && d <= 1e6)) return fail(bad(id, key + " must be a price in USD per million tokens, 0 to 1000000"));
  return usd_to_micros(d);
}

Result<int> parse_int(const std::string& id, const std::string& key, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    return fail(bad(id, key + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi)));
  return static_cast<int>(n);
}

Result<void> check_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return fail(bad("\"" + id + "\"", "id must be 1 to 128 characters"));
  for (char c : id)
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '-' || c == '_' || c == ':'))
      return fail(bad("\"" + id + "\"", "id may hold letters, digits and / . - _ : only"));
  return {};
}

}  // namespace

Micros ModelConfig::cost(int64_t prompt_tokens, int64_t completion_tokens) const {
  // 128 bits: tokens x micro-dollars per million pass 2^63 before the division (4M-token
  // bounds x n=16 at $1M per million); an upstream's absurd usage saturates, never wraps.
  using u128 = unsigned __int128;
  const u128 p = static_cast<u128>(std::max<int64_t>(prompt_tokens, 0)) * static_cast<u128>(micros_per_m_input);
  const u128 q = static_cast<u128>(std::max<int64_t>(completion_tokens, 0)) * static_cast<u128>(micros_per_m_output);
  const u128 per_m = 1'000'000;
  const u128 micros = (p + q + per_m - 1) / per_m;
  return micros > static_cast<u128>(std::numeric_limits<Micros>::max()) ? std::numeric_limits<Micros>::max()
                                                                         : static_cast<Micros>(micros);
}

Result<std::string> ModelConfig::upstream_key() const {
  if (!key_env.empty()) {
    const char* v = std::getenv(key_env.c_str());
    if (!v || !*v) return fail(ErrorCode::kProductUnavailable, "model " + id + ": environment variable " + key_env + " (its upstream key) is not set");
    return std::string(v);
  }
  if (!key_file.empty()) {
    std::ifstream f(key_file);
    std::string k;
    if (!f || !std::getline(f, k) || k.empty()) return fail(ErrorCode::kProductUnavailable, "model " + id + ": cannot read its upstream key from " + key_file);
    while (!k.empty() && (k.back() == '\r' || k.back() == ' ')) k.pop_back();
    return k;
  }
  return std::string();
}

json ModelConfig::to_openai() const {
  return {{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "b3os"}};
}

Result<ModelConfig> parse_model_flag(const std::string& flag) {
  ModelConfig m;
  size_t eq = flag.find('=');
  if (eq == std::string::npos) return fail(bad("\"" + flag + "\"", "expected ID=BASE_URL[,upstream=NAME][,in=USD][,out=USD][,key-env=VAR][,key-file=PATH][,max-output=N][,timeout=S][,default]"));
  m.id = flag.substr(0, eq);
  if (auto r = check_id(m.id); !r) return fail(r.error());
  std::stringstream rest(flag.substr(eq + 1));
  std::string part;
  bool first = true;
  while (std::getline(rest, part, ',')) {
    if (first) {
      m.base_url = part;
      first = false;
      continue;
    }
    size_t e = part.find('=');
    std::string k = part.substr(0, e), v = e == std::string::npos ? "" : part.substr(e + 1);
    if (k == "default" && e == std::string::npos) {
      m.is_default = true;
    } else if (k == "upstream") {
      m.upstream_model = v;
    } else if (k == "in") {
      auto p = parse_price(m.id, "in", v);
      if (!p) return fail(p.error());
      m.micros_per_m_input = *p;
    } else if (k == "out") {
      auto p = parse_price(m.id, "out", v);
      if (!p) return fail(p.error());
      m.micros_per_m_output = *p;
    } else if (k == "key-env") {
      m.key_env = v;
    } else if (k == "key-file") {
      m.key_file = v;
    } else if (k == "max-output") {
      auto n = parse_int(m.id, "max-output", v, 1, 1 << 22);
      if (!n) return fail(n.error());
      m.max_output_tokens = *n;
    } else if (k == "timeout") {
      auto n = parse_int(m.id, "timeout", v, 1, 3600);
      if (!n) return fail(n.error());
      m.timeout_s = *n;
    } else {
      return fail(bad(m.id, "unknown setting \"" + k + "\""));
    }
  }
  if (m.upstream_model.empty()) m.upstream_model = m.id;
  if (auto r = parse_base_url(m); !r) return fail(r.error());
  return m;
}

Result<std::vector<ModelConfig>> load_models_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return fail(ErrorCode::kInvalidRequest, "cannot read the models file " + path);
  json j = json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("models") || !j["models"].is_array())
    return fail(ErrorCode::kInvalidRequest, path + ": expected {\"models\": [...]}");
  std::vector<ModelConfig> out;
  for (auto& e : j["models"]) {
    if (!e.is_object()) return fail(ErrorCode::kInvalidRequest, path + ": each model must be an object");
    ModelConfig m;
    double in_usd = 0, out_usd = 0;
    try {
      m.id = e.at("id").get<std::string>();
      m.base_url = e.at("base_url").get<std::string>();
      m.upstream_model = e.value("upstream_model", m.id);
      in_usd = e.value("usd_per_m_input", 0.0);
      out_usd = e.value("usd_per_m_output", 0.0);
      m.key_env = e.value("key_env", "");
      m.key_file = e.value("key_file", "");
      m.max_output_tokens = e.value("max_output_tokens", 4096);
      m.timeout_s = e.value("timeout_s", 120);
      m.is_default = e.value("default", false);
    } catch (const std::exception& ex) {
      return fail(ErrorCode::kInvalidRequest, path + ": " + ex.what());
    }
    if (auto r = check_id(m.id); !r) return fail(r.error());
    if (!(in_usd >= 0 && in_usd <= 1e6 && out_usd >= 0 && out_usd <= 1e6))
      return fail(bad(m.id, "prices must be USD per million tokens, 0 to 1000000"));
    m.micros_per_m_input = usd_to_micros(in_usd);
    m.micros_per_m_output = usd_to_micros(out_usd);
    if (m.max_output_tokens < 1 || m.timeout_s < 1) return fail(bad(m.id, "max_output_tokens and timeout_s must be positive"));
    if (auto r = parse_base_url(m); !r) return fail(r.error());
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::vector<ModelConfig>> finalize_models(std::vector<ModelConfig> models) {
  std::set<std::string> ids;
  int defaults = 0;
  for (auto& m : models) {
    if (!ids.insert(m.id).second) return fail(bad(m.id, "configured twice"));
    defaults += m.is_default;
  }
  if (defaults > 1) return fail(ErrorCode::kInvalidRequest, "more than one model is marked default");
  if (defaults == 0 && !models.empty()) models.front().is_default = true;
  return models;
}

}  // namespace b3os::gateway
