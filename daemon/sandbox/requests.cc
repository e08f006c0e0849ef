#include "daemon/sandbox/requests.h"

#include <cstdlib>

#include "common/ids.h"
#include "daemon/sandbox/spec.h"

namespace b3os::sandbox {

using nlohmann::json;

namespace {

const std::string* find(const Params& params, const std::string& name) {
  for (auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

Result<int> parse_limit(const Params& params) {
  const std::string* l = find(params, "limit");
  if (!l) return 20;
  char* end = nullptr;
  long v = std::strtol(l->c_str(), &end, 10);
  if (l->empty() || *end || v < 1 || v > 100) return fail(ErrorCode::kInvalidRequest, "limit: must be an integer from 1 to 100");
  return static_cast<int>(v);
}

}  // namespace

Result<ForkRequest> parse_fork(const json& body) {
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object");
  for (auto& [k, v] : body.items())
    if (k != "count" && k != "metadata") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  ForkRequest r;
  if (body.contains("count")) {
    const json& c = body["count"];
    if (!c.is_number_integer() || c.get<int64_t>() < 1 || c.get<int64_t>() > kMaxForkCount)
      return fail(ErrorCode::kInvalidRequest, "count: must be an integer between 1 and " + std::to_string(kMaxForkCount));
    r.count = c.get<int>();
  }
  if (body.contains("metadata")) {
    auto md = parse_metadata(body["metadata"], "metadata");
    if (!md) return fail(md.error());
    r.metadata = std::move(*md);
  }
  return r;
}

Result<PortUrlRequest> parse_port_url(const std::string& port, const json& body) {
  PortUrlRequest r;
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || port.size() > 5 || *end || p < 1 || p > 65535)
    return fail(ErrorCode::kInvalidRequest, "port: must be an integer from 1 to 65535, got \"" + port.substr(0, 12) + "\"");
  r.port = static_cast<int>(p);
  if (body.is_null()) return r;
  if (!body.is_object()) return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object");
  for (auto& [k, v] : body.items())
    if (k != "ttl_s") return fail(ErrorCode::kInvalidRequest, k + ": unknown field");
  if (body.contains("ttl_s") && !body["ttl_s"].is_null()) {
    const json& t = body["ttl_s"];
    if (!t.is_number_integer() || t.get<int64_t>() < 1 || t.get<int64_t>() > 7 * 24 * 3600)
      return fail(ErrorCode::kInvalidRequest, "ttl_s: must be an integer from 1 to 604800 (7 days)");
    r.ttl_s = t.get<int>();
  }
  return r;
}

Result<store::SandboxQuery> parse_list_sandboxes(const Params& params) {
  store::SandboxQuery q;
  auto limit = parse_limit(params);
  if (!limit) return fail(limit.error());
  q.limit = *limit;
  if (const std::string* cur = find(params, "cursor"); cur && !cur->empty()) {
    if (!valid_id(*cur, "sbx")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
    q.after_id = *cur;
  }
  if (const std::string* st = find(params, "status")) {
    if (*st != "running" && *st != "paused" && *st != "stopped" && *st != "failed")
      return fail(ErrorCode::kInvalidRequest, "status: must be one of running, paused, stopped, failed");
    q.status = *st;
  }
  for (auto& [k, v] : params) {
    if (k.rfind("metadata[", 0) == 0 && k.size() > 10 && k.back() == ']') {
      q.metadata.emplace_back(k.substr(9, k.size() - 10), v);
    } else if (k != "limit" && k != "cursor" && k != "status") {
      return fail(ErrorCode::kInvalidRequest, k + ": unknown query parameter (filters: status, metadata[KEY]=VALUE)");
    }
  }
  return q;
}

Result<ListSnapshotsRequest> parse_list_snapshots(const Params& params) {
  ListSnapshotsRequest r;
  auto limit = parse_limit(params);
  if (!limit) return fail(limit.error());
  r.limit = *limit;
  if (const std::string* cur = find(params, "cursor"); cur && !cur->empty()) {
    if (!valid_id(*cur, "snp")) return fail(ErrorCode::kInvalidRequest, "cursor: not a cursor from next_cursor");
    r.cursor = *cur;
  }
  return r;
}

Result<FileRequest> parse_file_request(const Params& params, bool allow_recursive) {
  const std::string* raw = find(params, "path");
  if (!raw) return fail(ErrorCode::kInvalidRequest, "path: query parameter is required (?path=/workspace/file)");
  auto path = resolve_path(*raw);
  if (!path) return fail(path.error());
  FileRequest r;
  r.path = std::move(*path);
  if (allow_recursive) {
    if (const std::string* rec = find(params, "recursive")) {
      if (*rec != "true" && *rec != "false") return fail(ErrorCode::kInvalidRequest, "recursive: must be true or false");
      r.recursive = *rec == "true";
    }
  }
  return r;
}

Result<UpdateRequest> parse_update(const json& body) {
  if (!body.is_object())
    return fail(ErrorCode::kInvalidRequest, "body: must be a JSON object like {\"egress\": {\"mode\": \"allowlist\", ...}}");
  UpdateRequest u;
  for (auto& [k, v] : body.items()) {
    if (k != "egress")
      return fail(ErrorCode::kInvalidRequest, k + ": cannot be changed on a running sandbox (only egress can)");
  }
  if (body.contains("egress")) {
    auto e = parse_egress(body["egress"]);
    if (!e) return fail(e.error());
    if (!body["egress"].contains("mode"))
      return fail(ErrorCode::kInvalidRequest, "egress.mode: is required (public or allowlist)");
    if (e->mode == "deny")
      return fail(ErrorCode::kInvalidRequest,
                  "egress.mode: deny is fixed at create (such a sandbox has no network); to cut a running sandbox "
                  "off, set {\"mode\": \"allowlist\", \"allow\": []}");
    u.egress = std::move(*e);
  }
  return u;
}

}  // namespace b3os::sandbox
