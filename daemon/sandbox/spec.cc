#include "daemon/sandbox/spec.h"

#include "daemon/net/policy.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace b3os::sandbox {

using nlohmann::json;

namespace {

constexpr size_t kMaxMetadataPairs = 16;
constexpr size_t kMaxMetadataKey = 40;
constexpr size_t kMaxMetadataValue = 500;
constexpr size_t kMaxEnvVars = 256;
constexpr size_t kMaxEnvValue = 32 * 1024;
// Names and values in all: a record keeps them while the sandbox lives (and a snapshot's for
// as long as it is kept). 250 values of 4,000 characters made each record 1 MB.
constexpr size_t kMaxEnvTotal = 64 * 1024;
constexpr size_t kMaxArgvBytes = 256 * 1024;
constexpr int64_t kMaxExecTimeoutMs = 3600 * 1000;
const std::set<std::string> kKnownScopes = {"infer:run"};

tl::unexpected<Error> bad(const std::string& field, const std::string& why) {
  return fail(ErrorCode::kInvalidRequest, field + ": " + why);
}

std::string type_name(const json& j) { return j.type_name(); }

Result<int64_t> get_int(const json& j, const std::string& field, int64_t lo, int64_t hi) {
  if (!j.is_number_integer() && !j.is_number_unsigned()) {
    // 2.0 is an integer in JSON's eyes for most clients; accept whole floats.
    if (j.is_number_float() && j.get<double>() == static_cast<double>(static_cast<int64_t>(j.get<double>()))) {
      int64_t v = static_cast<int64_t>(j.get<double>());
      if (v < lo || v > hi) return bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
      return v;
    }
    return bad(field, "must be an integer, got " + type_name(j));
  }
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi))
    return bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) return bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

bool valid_env_name(const std::string& k) {
  if (k.empty() || k.size() > 256) return false;
  if (!(std::isalpha(static_cast<unsigned char>(k[0])) || k[0] == '_')) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

Result<std::map<std::string, std::string>> parse_env(const json& j, const std::string& field) {
  if (!j.is_object()) return bad(field, "must be an object of string values, got " + type_name(j));
  if (j.size() > kMaxEnvVars) return bad(field, "at most " + std::to_string(kMaxEnvVars) + " variables");
  std::map<std::string, std::string> out;
  size_t total = 0;
  for (auto& [k, v] : j.items()) {
    if (!valid_env_name(k)) return bad(field, "name \"" + k + "\" must match [A-Za-z_][A-Za-z0-9_]*");
    if (k.rfind("B3OS_", 0) == 0) return bad(field, "name \"" + k + "\": the B3OS_ prefix is reserved");
    if (!v.is_string()) return bad(field + "." + k, "must be a string, got " + type_name(v));
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > kMaxEnvValue) return bad(field + "." + k, "longer than 32 KiB");
    if (s.find('\0') != std::string::npos) return bad(field + "." + k, "contains a NUL byte");
    total += k.size() + s.size();
    if (total > kMaxEnvTotal) return bad(field, "names and values longer than 64 KiB in all");
    out[k] = s;
  }
  return out;
}

// (uid_t)-1 means "no change" to setuid, never a user.
constexpr uint64_t kMaxUserId = 4294967294ull;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool fits_user_id(std::string_view digits) {
  if (digits.size() > 10) return false;
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  return v <= kMaxUserId;
}

// The `user` of an exec: a user name, "UID" or "UID:GID".
Result<std::string> parse_user(const json& j) {
  if (!j.is_string()) return bad("user", "must be a string, got " + type_name(j));
  const auto& s = j.get_ref<const std::string&>();
  const size_t colon = s.find(':');
  const std::string_view uid = std::string_view(s).substr(0, colon);
  const std::string_view gid = colon == std::string::npos ? std::string_view() : std::string_view(s).substr(colon + 1);
  if (all_digits(uid) && (colon == std::string::npos || all_digits(gid))) {
    if (fits_user_id(uid) && (colon == std::string::npos || fits_user_id(gid))) return s;
    return bad("user", "\"" + s + "\": UID and GID must be at most " + std::to_string(kMaxUserId));
  }
  const bool name_ok = !s.empty() && s.size() <= 32 && s[0] != '-' &&
                       std::all_of(s.begin(), s.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
                       });
  if (!name_ok)
    return bad("user", "must be a user name (1-32 of A-Z a-z 0-9 _ . -, not starting with -), UID or UID:GID");
  return s;
}

Result<void> reject_unknown(const json& body, const std::set<std::string>& known, const std::string& where) {
  for (auto& [k, v] : body.items()) {
    if (!known.count(k)) return bad(where.empty() ? k : where + "." + k, "unknown field");
  }
  return {};
}

}  // namespace

Result<std::map<std::string, std::string>> parse_env_object(const json& j, const std::string& field) {
  return parse_env(j, field);
}

Result<EgressSpec> parse_egress(const json& j) {
  if (!j.is_object()) return bad("egress", "must be an object like {\"mode\": \"deny\"}");
  if (auto r = reject_unknown(j, {"mode", "allow"}, "egress"); !r) return fail(r.error());
  EgressSpec e;
  if (j.contains("mode")) {
    if (!j["mode"].is_string()) return bad("egress.mode", "must be one of public, allowlist, deny");
    e.mode = j["mode"].get<std::string>();
    if (e.mode != "public" && e.mode != "allowlist" && e.mode != "deny")
      return bad("egress.mode", "must be one of public, allowlist, deny, got \"" + e.mode + "\"");
  }
  if (j.contains("allow")) {
    if (!j["allow"].is_array()) return bad("egress.allow", "must be an array of CIDRs or domain names");
    if (j["allow"].size() > 256) return bad("egress.allow", "at most 256 entries");
    for (size_t i = 0; i < j["allow"].size(); ++i) {
      const auto& a = j["allow"][i];
      if (!a.is_string())
        return bad("egress.allow[" + std::to_string(i) + "]", "must be a string (an IPv4 address or CIDR, a name or *.name)");
      e.allow.push_back(a.get<std::string>());
    }
  }
  if (e.mode != "allowlist" && !e.allow.empty())
    return bad("egress.allow", "only allowed with mode \"allowlist\"");
  // Each entry as the firewall will read it: a bad one is a 400 naming it, one inside an
  // always-denied range a 403 egress_denied (net/policy.h has the syntax).
  if (auto parsed = net::parse_allow_list(e.allow); !parsed) return fail(parsed.error());
  return e;
}

namespace {

Result<ApiGrantSpec> parse_api(const json& j) {
  if (!j.is_object()) return bad("api", "must be an object like {\"scopes\": [\"infer:run\"]}");
  if (auto r = reject_unknown(j, {"scopes", "spend_cap_usd"}, "api"); !r) return fail(r.error());
  ApiGrantSpec g;
  if (j.contains("scopes")) {
    if (!j["scopes"].is_array()) return bad("api.scopes", "must be an array of scope names");
    for (auto& s : j["scopes"]) {
      if (!s.is_string()) return bad("api.scopes", "entries must be strings");
      std::string name = s.get<std::string>();
      if (!kKnownScopes.count(name)) return bad("api.scopes", "unknown scope \"" + name + "\" (known: infer:run)");
      if (std::find(g.scopes.begin(), g.scopes.end(), name) == g.scopes.end()) g.scopes.push_back(name);
    }
  }
  if (j.contains("spend_cap_usd") && !j["spend_cap_usd"].is_null()) {
    if (!j["spend_cap_usd"].is_number()) return bad("api.spend_cap_usd", "must be a number or null");
    double cap = j["spend_cap_usd"].get<double>();
    if (!(cap >= 0 && cap <= 1e6)) return bad("api.spend_cap_usd", "must be between 0 and 1000000");
    g.spend_cap_usd = cap;
  }
  return g;
}

Result<std::vector<PortSpec>> parse_ports(const json& j) {
  if (!j.is_array()) return bad("ports", "must be an array of {\"port\", \"public\"}");
  if (j.size() > 32) return bad("ports", "at most 32 ports");
  std::vector<PortSpec> out;
  std::set<int> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    std::string f = "ports[" + std::to_string(i) + "]";
    const auto& p = j[i];
    if (!p.is_object()) return bad(f, "must be an object");
    if (auto r = reject_unknown(p, {"port", "public"}, f); !r) return fail(r.error());
    if (!p.contains("port")) return bad(f + ".port", "is required");
    auto port = get_int(p["port"], f + ".port", 1, 65535);
    if (!port) return fail(port.error());
    if (!seen.insert(static_cast<int>(*port)).second) return bad(f + ".port", "is listed twice");
    PortSpec ps{static_cast<int>(*port), false};
    if (p.contains("public")) {
      if (!p["public"].is_boolean()) return bad(f + ".public", "must be a boolean");
      ps.is_public = p["public"].get<bool>();
    }
    out.push_back(ps);
  }
  return out;
}

}  // namespace

Result<std::map<std::string, std::string>> parse_metadata(const json& j, const std::string& field) {
  if (!j.is_object()) return bad(field, "must be an object of string values, got " + type_name(j));
  if (j.size() > kMaxMetadataPairs) return bad(field, "at most 16 key-value pairs");
  std::map<std::string, std::string> out;
  for (auto& [k, v] : j.items()) {
    if (k.empty() || k.size() > kMaxMetadataKey) return bad(field, "key \"" + k + "\" must be 1 to 40 characters");
    for (char c : k) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '-'))
        return bad(field, "key \"" + k + "\" has a character outside A-Z a-z 0-9 _ . : -");
    }
    if (!v.is_string()) return bad(field + "." + k, "must be a string, got " + type_name(v));
    const auto& s = v.get_ref<const std::string&>();
    // 500 characters, counted as Unicode code points (UTF-8 continuation bytes do not count).
    size_t chars = 0;
    for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
    if (chars > kMaxMetadataValue) return bad(field + "." + k, "longer than 500 characters");
    out[k] = s;
  }
  return out;
}

Result<SandboxSpec> parse_create(const json& body, const SpecLimits& limits) {
  if (!body.is_object()) return bad("body", "must be a JSON object");
  if (auto r = reject_unknown(body, {"template", "snapshot", "timeout_s", "on_idle", "env", "secrets", "metadata",
                                     "vcpu", "memory_mib", "disk_gib", "forkable", "egress", "api", "ports"},
                              "");
      !r)
    return fail(r.error());
  SandboxSpec s;
  if (body.contains("template") && !body["template"].is_null()) {
    if (!body["template"].is_string() || body["template"].get<std::string>().empty())
      return bad("template", "must be a template name such as \"base\"");
    s.template_name = body["template"].get<std::string>();
    if (s.template_name.size() > 64) return bad("template", "longer than 64 characters");
  }
  if (body.contains("snapshot") && !body["snapshot"].is_null()) {
    if (!body["snapshot"].is_string() || body["snapshot"].get<std::string>().empty())
      return bad("snapshot", "must be a snapshot id (snp_...)");
    s.snapshot = body["snapshot"].get<std::string>();
  }
  auto int_field = [&](const char* name, int& out, int64_t lo, int64_t hi) -> Result<void> {
    if (!body.contains(name) || body[name].is_null()) return {};
    auto v = get_int(body[name], name, lo, hi);
    if (!v) return fail(v.error());
    out = static_cast<int>(*v);
    return {};
  };
  if (auto r = int_field("timeout_s", s.timeout_s, 1, limits.max_timeout_s); !r) return fail(r.error());
  if (auto r = int_field("vcpu", s.vcpu, 1, limits.max_vcpu); !r) return fail(r.error());
  if (auto r = int_field("memory_mib", s.memory_mib, 128, limits.max_memory_mib); !r) return fail(r.error());
  if (auto r = int_field("disk_gib", s.disk_gib, 1, limits.max_disk_gib); !r) return fail(r.error());
  s.vcpu_given = body.contains("vcpu") && !body["vcpu"].is_null();
  s.memory_given = body.contains("memory_mib") && !body["memory_mib"].is_null();
  s.disk_given = body.contains("disk_gib") && !body["disk_gib"].is_null();
  if (body.contains("on_idle") && !body["on_idle"].is_null()) {
    if (!body["on_idle"].is_string()) return bad("on_idle", "must be \"stop\" or \"pause\"");
    s.on_idle = body["on_idle"].get<std::string>();
    if (s.on_idle != "stop" && s.on_idle != "pause") return bad("on_idle", "must be \"stop\" or \"pause\"");
  }
  if (body.contains("env") && !body["env"].is_null()) {
    auto e = parse_env(body["env"], "env");
    if (!e) return fail(e.error());
    s.env = std::move(*e);
  }
  if (body.contains("secrets") && !body["secrets"].is_null()) {
    auto e = parse_env(body["secrets"], "secrets");
    if (!e) return fail(e.error());
    s.secrets = std::move(*e);
  }
  if (body.contains("metadata") && !body["metadata"].is_null()) {
    auto m = parse_metadata(body["metadata"], "metadata");
    if (!m) return fail(m.error());
    s.metadata = std::move(*m);
  }
  if (body.contains("forkable") && !body["forkable"].is_null()) {
    if (!body["forkable"].is_boolean()) return bad("forkable", "must be a boolean");
    s.forkable = body["forkable"].get<bool>();
  }
  if (body.contains("egress") && !body["egress"].is_null()) {
    auto e = parse_egress(body["egress"]);
    if (!e) return fail(e.error());
    s.egress = std::move(*e);
  }
  if (body.contains("api") && !body["api"].is_null()) {
    auto g = parse_api(body["api"]);
    if (!g) return fail(g.error());
    s.api = std::move(*g);
  }
  if (body.contains("ports") && !body["ports"].is_null()) {
    auto p = parse_ports(body["ports"]);
    if (!p) return fail(p.error());
    s.ports = std::move(*p);
  }
  return s;
}

// Every create field the spec names is implemented now; this stays the one place a field a
// node cannot serve yet is refused (501 not_implemented) before anything is made.
Result<void> check_supported(const SandboxSpec&) { return {}; }

Result<ExecSpec> parse_exec(const json& body) {
  if (!body.is_object()) return bad("body", "must be a JSON object");
  if (auto r = reject_unknown(body, {"cmd", "env", "cwd", "timeout_ms", "stdin", "user", "stream"}, ""); !r)
    return fail(r.error());
  ExecSpec e;
  if (!body.contains("cmd")) return bad("cmd", "is required (a string for /bin/sh -c, or an argv array)");
  const auto& cmd = body["cmd"];
  size_t bytes = 0;
  if (cmd.is_string()) {
    const auto& s = cmd.get_ref<const std::string&>();
    if (s.empty()) return bad("cmd", "must not be empty");
    e.argv = {"/bin/sh", "-c", s};
    bytes = s.size();
  } else if (cmd.is_array()) {
    if (cmd.empty()) return bad("cmd", "must not be an empty array");
    for (auto& a : cmd) {
      if (!a.is_string()) return bad("cmd", "array entries must be strings");
      e.argv.push_back(a.get<std::string>());
      bytes += e.argv.back().size();
    }
    if (e.argv[0].empty()) return bad("cmd", "the program name must not be empty");
  } else {
    return bad("cmd", "must be a string or an array of strings, got " + type_name(cmd));
  }
  for (auto& a : e.argv)
    if (a.find('\0') != std::string::npos) return bad("cmd", "contains a NUL byte");
  if (bytes > kMaxArgvBytes) return bad("cmd", "longer than 256 KiB");
  if (body.contains("env") && !body["env"].is_null()) {
    auto env = parse_env(body["env"], "env");
    if (!env) return fail(env.error());
    e.env = std::move(*env);
  }
  if (body.contains("cwd") && !body["cwd"].is_null()) {
    e.cwd_given = true;
    if (!body["cwd"].is_string()) return bad("cwd", "must be a string");
    auto p = resolve_path(body["cwd"].get<std::string>());
    if (!p) return bad("cwd", p.error().message);
    e.cwd = *p;
  }
  if (body.contains("timeout_ms") && !body["timeout_ms"].is_null()) {
    auto t = get_int(body["timeout_ms"], "timeout_ms", 1, kMaxExecTimeoutMs);
    if (!t) return fail(t.error());
    e.timeout_ms = *t;
  }
  if (body.contains("stdin") && !body["stdin"].is_null()) {
    if (!body["stdin"].is_string()) return bad("stdin", "must be a string");
    e.stdin_data = body["stdin"].get<std::string>();
  }
  if (body.contains("user") && !body["user"].is_null()) {
    auto u = parse_user(body["user"]);
    if (!u) return fail(u.error());
    e.user = std::move(*u);
  }
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) return bad("stream", "must be true or false");
    e.stream = body["stream"].get<bool>();
  }
  return e;
}

Result<ProcessSpec> parse_process(const json& body, uint64_t default_output_bytes) {
  if (!body.is_object()) return bad("body", "must be a JSON object");
  if (auto r = reject_unknown(body, {"cmd", "env", "cwd", "user", "stdin", "tag", "output_bytes"}, ""); !r)
    return fail(r.error());
  json cmd = json::object();
  for (const char* k : {"cmd", "env", "cwd", "user"})
    if (body.contains(k)) cmd[k] = body[k];
  auto e = parse_exec(cmd);
  if (!e) return fail(e.error());
  ProcessSpec ps;
  ps.cmd = std::move(*e);
  ps.output_bytes = default_output_bytes;
  if (body.contains("stdin") && !body["stdin"].is_null()) {
    if (!body["stdin"].is_boolean()) return bad("stdin", "must be true (keep it open for writes) or false");
    ps.stdin_open = body["stdin"].get<bool>();
  }
  if (body.contains("tag") && !body["tag"].is_null()) {
    if (!body["tag"].is_string()) return bad("tag", "must be a string");
    ps.tag = body["tag"].get<std::string>();
    if (ps.tag.size() > 128) return bad("tag", "longer than 128 characters");
    for (unsigned char c : ps.tag)
      if (c < 0x20 || c == 0x7f) return bad("tag", "must not hold control characters");
  }
  if (body.contains("output_bytes") && !body["output_bytes"].is_null()) {
    auto n = get_int(body["output_bytes"], "output_bytes", 4096, static_cast<int64_t>(kMaxProcessOutputBytes));
    if (!n) return fail(n.error());
    ps.output_bytes = static_cast<uint64_t>(*n);
  }
  return ps;
}

Result<std::string> resolve_path(const std::string& path) {
  if (path.empty()) return fail(ErrorCode::kInvalidRequest, "path: must not be empty");
  if (path.size() > 4096) return fail(ErrorCode::kInvalidRequest, "path: longer than 4096 bytes");
  if (path.find('\0') != std::string::npos) return fail(ErrorCode::kInvalidRequest, "path: contains a NUL byte");
  std::string p = path[0] == '/' ? path : "/workspace/" + path;
  // Normalise "//" and "/./"; refuse ".." so a path never means something surprising.
  std::string out;
  size_t i = 0;
  while (i < p.size()) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string part = p.substr(i, j - i);
    if (part == "..") return fail(ErrorCode::kInvalidRequest, "path: \"..\" is not allowed");
    if (!part.empty() && part != ".") out += "/" + part;
    i = j + 1;
  }
  return out.empty() ? std::string("/") : out;
}

}  // namespace b3os::sandbox
