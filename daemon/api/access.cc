#include "daemon/api/access.h"

#include <nlohmann/json.hpp>

namespace b3os::api::access {

using K = Kind;

const std::vector<Rule>& rules() {
  static const std::vector<Rule> kRules = {
      // The node's health and metrics: no credential, nothing of any tenant's.
      {"health", "GET", "/healthz", {K::kNone}},
      {"metrics", "GET", "<the metrics listener: /metrics>", {K::kNone}},
      // The REST API (Api::routes()): a project's key, for that project's resources only.
      {"rest", "GET", "/v1/templates", {K::kApiKey}},
      {"rest", "POST", "/v1/templates", {K::kApiKey}},
      {"rest", "POST", "/v1/templates/uploads", {K::kApiKey}},
      {"rest", "GET", "/v1/templates/{tpl}", {K::kApiKey}},
      {"rest", "DELETE", "/v1/templates/{tpl}", {K::kApiKey}},
      {"rest", "GET", "/v1/templates/{tpl}/builds", {K::kApiKey}},
      {"rest", "GET", "/v1/templates/{tpl}/builds/{bld}", {K::kApiKey}},
      {"rest", "GET", "/v1/templates/{tpl}/builds/{bld}/logs", {K::kApiKey}},
      {"rest", "POST", "/v1/templates/{tpl}/builds/{bld}/cancel", {K::kApiKey}},
      {"rest", "GET", "/v1/snapshots", {K::kApiKey}},
      {"rest", "GET", "/v1/snapshots/{snp}", {K::kApiKey}},
      {"rest", "DELETE", "/v1/snapshots/{snp}", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}", {K::kApiKey}},
      {"rest", "DELETE", "/v1/sandboxes/{sbx}", {K::kApiKey}},
      {"rest", "PATCH", "/v1/sandboxes/{sbx}", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/exec", {K::kApiKey}},
      {"rest", "PUT", "/v1/sandboxes/{sbx}/files", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/files", {K::kApiKey}},
      {"rest", "DELETE", "/v1/sandboxes/{sbx}/files", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/files/list", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/files/watch", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/fork", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/pause", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/resume", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/snapshot", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/ports/{port}/url", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/pty", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/processes", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/processes", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/processes/{proc}", {K::kApiKey}},
      {"rest", "DELETE", "/v1/sandboxes/{sbx}/processes/{proc}", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/processes/{proc}/stdin", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/processes/{proc}/signal", {K::kApiKey}},
      {"rest", "POST", "/v1/sandboxes/{sbx}/processes/{proc}/wait", {K::kApiKey}},
      {"rest", "GET", "/v1/sandboxes/{sbx}/processes/{proc}/output", {K::kApiKey}},
      {"rest", "*", "/v1/sandboxes/{sbx}/ports", {K::kApiKey}},
      {"rest", "*", "/v1/sandboxes/{sbx}/ports/{port}", {K::kApiKey}},
      // The model gateway from outside (paid from the key's budget), and MCP.
      {"infer", "*", "/v1/infer/*", {K::kApiKey}},
      {"mcp", "*", "/mcp", {K::kApiKey}},
      // E2B's control plane (/sandboxes, /v2/sandboxes, ...): a key, as the SDK sends it.
      {"e2b-control", "*", kE2bControlPattern, {K::kApiKey}},
      // E2B's in-sandbox API: the named sandbox's access token only (docs/e2b.md).
      {"envd", "*", "/files", {K::kEnvdToken}},
      {"envd", "GET", "/health", {K::kEnvdToken}},
      {"envd", "POST", "/{package.Service}/{Method}", {K::kEnvdToken}},
      // The preview listener: a port's token, its cookie, or E2B's traffic token (docs/ports.md).
      {"preview", "*", "<a port's preview host: {port}-{host_id}.DOMAIN>", {K::kPortToken}},
      // The internal listener of a cluster node: the cluster's signature, then (for relayed API
      // requests) the client's own credential as on the public port (docs/cluster.md).
      {"internal", "*", "<any route above, relayed by a router>", {K::kClusterSignature}},
      {"internal", "POST", "/internal/adopt", {K::kClusterSignature}},
      {"internal", "POST", "/internal/e2b-signer", {K::kClusterSignature}},
      {"internal", "POST", "<mcp-call: /mcp>", {K::kClusterSignature}},
  };
  return kRules;
}

const Rule* find(std::string_view surface, std::string_view method, std::string_view pattern) {
  for (const Rule& r : rules())
    if (r.surface == surface && (r.method == method || r.method == "*") && r.pattern == pattern) return &r;
  return nullptr;
}

bool admits(const Rule& rule, sandbox::CredentialKind kind) {
  const Kind want = kind == sandbox::CredentialKind::kApiKey      ? Kind::kApiKey
                    : kind == sandbox::CredentialKind::kEnvdToken ? Kind::kEnvdToken
                                                                   : Kind::kNone;
  if (kind == sandbox::CredentialKind::kInternal) return false;  // b3osd's own calls never come as requests
  for (Kind k : rule.kinds)
    if (k == want) return true;
  return false;
}

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "none";
    case Kind::kApiKey: return "api_key";
    case Kind::kEnvdToken: return "envd_token";
    case Kind::kPortToken: return "port_token";
    case Kind::kClusterSignature: return "cluster_signature";
  }
  return "?";
}

std::string to_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const Rule& r : rules()) {
    nlohmann::json kinds = nlohmann::json::array();
    for (Kind k : r.kinds) kinds.push_back(kind_name(k));
    out.push_back({{"surface", r.surface}, {"method", r.method}, {"pattern", r.pattern}, {"kinds", kinds}});
  }
  return nlohmann::json{{"rules", out}}.dump(1);
}

}  // namespace b3os::api::access
