// E2B's in-sandbox API (docs/e2b.md, "envd"): process.Process and filesystem.Filesystem over
// the Connect protocol's JSON encodings, and /files, each mapped onto the sandbox service's
// background processes, file operations and watches.
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>


#include "common/clock.h"
#include "common/ids.h"
#include "daemon/e2b/multipart.h"
#include "daemon/e2b/server.h"
#include "daemon/e2b/wire.h"
#include "daemon/sandbox/requests.h"
#include "daemon/sys/codec.h"

namespace b3os::e2b {

using nlohmann::json;

namespace {

constexpr std::string_view kProcess = "process.Process";
constexpr std::string_view kFilesystem = "filesystem.Filesystem";
// How long one Start/Connect or WatchDir stream may follow (E2B's SDK ends its own at the
// command's timeoutMs, 60 s by default; 0 there means no limit): an hour, as a REST follow.
// The SDK's handle reconnects (Connect) to go on.
constexpr int64_t kMaxFollowMs = 3600LL * 1000;
constexpr int kMaxListDepth = 16;
// A deep listing is one agent call per directory: both bounded, so that one request cannot
// hold its thread for long (a tree of many small directories is refused, not walked).
constexpr size_t kMaxListEntries = 10'000;
constexpr size_t kMaxListDirs = 1'000;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool same(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string first(const Query& q, const std::string& name) {
  auto it = q.find(name);
  return it == q.end() ? "" : it->second;
}

/// The user of `Authorization: Basic base64("user:")` (E2B's SDKs send no password); "" when
/// there is none (the template's user runs the command).
Result<std::string> basic_user(std::string_view auth) {
  if (auth.empty()) return std::string();
  if (auth.size() < 6 || !std::equal(auth.begin(), auth.begin() + 6, "Basic ", [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
      }))
    return fail(ErrorCode::kUnauthorized, "Authorization: \"Basic base64(user:)\" names the user (or send none)");
  auto decoded = unbase64(auth.substr(6));
  if (!decoded) return fail(ErrorCode::kUnauthorized, "Authorization: the Basic credentials are not base64");
  const size_t colon = decoded->find(':');
  std::string user = decoded->substr(0, colon);
  if (user.size() > 64 || user.find('\0') != std::string::npos)
    return fail(ErrorCode::kInvalidRequest, "user: at most 64 characters");
  return user;
}

/// E2B resolves a relative path against the user's home.
std::string absolute(const std::string& path, const std::string& user) {
  if (!path.empty() && path.front() == '/') return path;
  const std::string home = user.empty() || user == "root" ? "/root" : "/home/" + user;
  return path.empty() ? home : home + "/" + path;
}

Result<std::string> path_field(const json& msg, const char* field, const std::string& user) {
  if (!msg.contains(field) || !msg[field].is_string())
    return fail(ErrorCode::kInvalidRequest, std::string(field) + ": a path is required");
  std::string p = msg[field].get<std::string>();
  if (p.size() > 4096 || p.find('\0') != std::string::npos)
    return fail(ErrorCode::kInvalidRequest, std::string(field) + ": at most 4096 bytes, no NUL");
  return absolute(p, user);
}

/// Go's FileMode.String() of a b3os entry: "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx".
std::string permissions(const std::string& type, int mode) {
  std::string s(10, '-');
  s[0] = type == "dir" ? 'd' : type == "symlink" ? 'L' : '-';
  const char* rwx = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i)
    if (mode & (1 << (8 - i))) s[1 + i] = rwx[i];
  return s;
}

/// filesystem.EntryInfo of a b3os file entry.
json entry_info(const json& e) {
  const std::string type = e.value("type", "other");
  json out = {{"name", e.value("name", "")},
              {"type", type == "file" ? "FILE_TYPE_FILE" : type == "dir" ? "FILE_TYPE_DIRECTORY"
                                                           : type == "symlink" ? "FILE_TYPE_SYMLINK"
                                                                               : "FILE_TYPE_UNSPECIFIED"},
              {"path", e.value("path", "")},
              {"size", std::to_string(e.value("size", uint64_t{0}))},
              {"mode", e.value("mode", 0)},
              {"permissions", permissions(type, e.value("mode", 0))},
              {"owner", e.value("owner", "")},
              {"group", e.value("group", "")},
              {"modifiedTime", e.value("modified_at", "")}};
  if (e.contains("symlink_target")) out["symlinkTarget"] = e["symlink_target"];
  return out;
}

/// The process a ProcessSelector names ({"pid": N} or {"tag": "..."}): "N" (a pid), or the
/// pid of the running process with that tag.
Result<std::string> selected(sandbox::Exec& exec, const sandbox::Principal& p, const std::string& id, const json& msg) {
  if (!msg.contains("process") || !msg["process"].is_object())
    return fail(ErrorCode::kInvalidRequest, "process: {\"pid\": N} or {\"tag\": \"...\"} is required");
  const json& sel = msg["process"];
  if (auto r = only_fields(sel, {"pid", "tag"}, "process"); !r) return fail(r.error());
  if (sel.contains("pid")) {
    const json& pid = sel["pid"];
    if (!pid.is_number_unsigned() || pid.get<uint64_t>() == 0 || pid.get<uint64_t>() > 4194304)
      return fail(ErrorCode::kInvalidRequest, "process.pid: a process id");
    return std::to_string(pid.get<uint64_t>());
  }
  if (sel.contains("tag") && sel["tag"].is_string()) {
    auto list = exec.list_processes(p, id);
    if (!list) return fail(list.error());
    for (const auto& proc : (*list)["data"])
      if (proc.value("tag", json()).is_string() && proc["tag"] == sel["tag"] && proc.value("status", "") == "running")
        return std::to_string(proc.value("pid", 0));
    return fail(ErrorCode::kProcessNotFound, "no running process tagged \"" + sel["tag"].get<std::string>().substr(0, 64) + "\"");
  }
  return fail(ErrorCode::kInvalidRequest, "process: {\"pid\": N} or {\"tag\": \"...\"} is required");
}

/// A process.PTY: {"size": {"cols", "rows"}} (1 to 1000 each) as (rows, cols).
Result<std::pair<int, int>> pty_size(const json& pty) {
  if (!pty.is_object()) return fail(ErrorCode::kInvalidRequest, "pty: {\"size\": {\"cols\", \"rows\"}}");
  if (auto r = only_fields(pty, {"size"}, "pty"); !r) return fail(r.error());
  const json size = pty.value("size", json::object());
  if (!size.is_object()) return fail(ErrorCode::kInvalidRequest, "pty.size: {\"cols\", \"rows\"}");
  if (auto r = only_fields(size, {"cols", "rows"}, "pty.size"); !r) return fail(r.error());
  auto dim = [&](const char* f) -> Result<int> {
    const json v = size.value(f, json(80));
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 1000)
      return fail(ErrorCode::kInvalidRequest, std::string("pty.size.") + f + ": 1 to 1000");
    return static_cast<int>(v.get<uint64_t>());
  };
  auto rows = dim("rows");
  if (!rows) return fail(rows.error());
  auto cols = dim("cols");
  if (!cols) return fail(cols.error());
  return std::make_pair(*rows, *cols);
}

std::string signal_status(int exit_code, int sig) {
  if (sig == 0) return "exit status " + std::to_string(exit_code);
  switch (sig) {
    case 9: return "signal: killed";
    case 15: return "signal: terminated";
    case 2: return "signal: interrupt";
    case 1: return "signal: hangup";
    default: return "signal: " + std::to_string(sig);
  }
}

/// A Connect stream's writer: the response head on first use, then envelopes.
class Envelopes {
 public:
  explicit Envelopes(http::Exchange& ex) : ex_(ex) {}
  bool begin() {
    if (begun_) return true;
    begun_ = static_cast<bool>(
        ex_.begin_stream(200, "application/connect+json", http::Exchange::kUnknownLength, {{"Cache-Control", "no-cache"}}));
    return begun_;
  }
  bool message(const json& m) { return begin() && static_cast<bool>(ex_.write(envelope(0, dump(m)))); }
  void end(const std::optional<Error>& error) {
    if (!begin()) return;
    (void)ex_.write(end_stream(error));
    (void)ex_.end_stream();
  }
  bool begun() const { return begun_; }

 private:
  http::Exchange& ex_;
  bool begun_ = false;
};

void send_connect_error(http::Exchange& ex, const Error& e) {
  const std::string code(connect_code(e.code));
  ex.respond(connect_http_status(code), "application/json", dump(connect_error(e)), {});
}

}  // namespace

bool Server::is_envd(const http::Exchange& ex, const std::string& path, const Query& query) {
  return !ex.header("E2b-Sandbox-Id").empty() || (path == "/files" && query.count("signature"));
}

bool Server::is_envd_route(const std::string& path) {
  if (path == "/files" || path == "/health") return true;
  // /package.Service/Method, the first segment naming a service of a package.
  const size_t slash = path.find('/', 1);
  if (path.size() < 2 || path[0] != '/' || slash == std::string::npos) return false;
  const std::string_view service = std::string_view(path).substr(1, slash - 1);
  return service.find('.') != std::string_view::npos && path.find('/', slash + 1) == std::string::npos;
}

std::string Server::signature(const http::Exchange& ex, const Query& query, const std::string& token) {
  return signature(ex.method() == "GET", query, token);
}

std::string Server::signature(bool read, const Query& query, const std::string& token) {
  const std::string op = read ? "read" : "write";
  std::string raw = first(query, "path") + ":" + op + ":" + first(query, "username") + ":" + token;
  if (auto exp = first(query, "signature_expiration"); !exp.empty()) raw += ":" + exp;
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(raw.data()), raw.size(), md);
  std::string sig = "v1_" + sys::base64_encode(std::string_view(reinterpret_cast<const char*>(md), sizeof md));
  while (!sig.empty() && sig.back() == '=') sig.pop_back();
  return sig;
}


Result<std::string> Server::signer_of(const http::Exchange& ex, const Query& query) {
  const std::string client = http::client_key(ex.peer_address());
  return scan_signer(ex.method() == "GET", query, &client);
}

Result<std::string> Server::scan_signer(bool read, const Query& query, const std::string* client) {
  std::lock_guard lk(scan_mu_);
  const int64_t now = steady_ms();
  if (client) {
    switch (client_scans_.take(*client, now)) {
      case KeyedBuckets::Take::kTaken:
        break;
      case KeyedBuckets::Take::kNoRoom:
        return fail(ErrorCode::kRateLimited, "too many clients checking signed /files URLs at once; retry shortly");
      case KeyedBuckets::Take::kEmpty:
        return fail(ErrorCode::kRateLimited, "too many signed /files URLs from this client this second; retry shortly");
    }
  }
  scan_tokens_ = std::min(kScansPerSecond, scan_tokens_ + static_cast<double>(now - scan_refill_ms_) * kScansPerSecond / 1000.0);
  scan_refill_ms_ = now;
  if (scan_tokens_ < 1) {
    if (client) client_scans_.give_back(*client);
    return fail(ErrorCode::kRateLimited, "too many signed /files URLs to check this second; retry shortly");
  }
  scan_tokens_ -= 1;
  const std::string given = first(query, "signature");
  const auto live = sandboxes_.registry().all();
  if (token_cache_.size() > 2 * live.size() + 64) token_cache_.clear();
  std::string found;
  for (const auto& s : live) {
    auto it = token_cache_.find(s->id);
    if (it == token_cache_.end()) it = token_cache_.emplace(s->id, sandboxes_.access_token(s->id)).first;
    // Every one is computed and compared: the time taken says nothing of which matched.
    if (same(given, signature(read, query, it->second))) found = s->id;
  }
  if (found.empty()) return fail(ErrorCode::kUnauthorized, "the URL's signature is not that of a running sandbox's access token");
  return found;
}

namespace {
/// A signed URL's signature_expiration, when it has one, is a time still to come.
Result<void> not_expired(const Query& query) {
  // The signed message is E2B's, made by the SDK: "path:operation:user:token[:expiration]".
  // Its fields are joined with ':' and cannot be length-prefixed without breaking the SDK, so
  // what makes it unambiguous is checked here: a user name holds no ':' (none can, in Linux),
  // and the expiration is digits only; the operation is read or write and the token base32.
  // Then the message parses one way from its end, and a read URL never signs a write.
  if (first(query, "username").find(':') != std::string::npos)
    return fail(ErrorCode::kUnauthorized, "username: a user name has no ':'");
  const std::string exp = first(query, "signature_expiration");
  if (exp.empty()) return {};
  char* end = nullptr;
  const long long at = std::strtoll(exp.c_str(), &end, 10);
  if (*end || at <= 0) return fail(ErrorCode::kUnauthorized, "signature_expiration: a Unix time in seconds");
  if (at < now_unix_ms() / 1000) return fail(ErrorCode::kUnauthorized, "the signed URL has expired");
  return {};
}
}  // namespace

Result<std::string> Server::signer_for(bool read, const Query& query) {
  if (auto r = not_expired(query); !r) return fail(r.error());
  return scan_signer(read, query, nullptr);
}

Result<sandbox::Principal> Server::authenticate_envd(const http::Exchange& ex, const std::string& path, const Query& query) {
  std::string id(ex.header("E2b-Sandbox-Id"));
  const bool found_by_signature = id.empty();
  if (found_by_signature) {
    // Expired URLs are refused before the scan: they cost nothing.
    if (auto r = not_expired(query); !r) return fail(r.error());
    auto signer = signer_of(ex, query);
    if (!signer) return fail(signer.error());
    id = *signer;
  }
  const Error refused{ErrorCode::kUnauthorized,
                      "no sandbox " + id.substr(0, 64) + " with this access token (X-Access-Token is the envdAccessToken "
                                                         "the create or connect answered)",
                      0};
  // No such live sandbox: 502, what E2B's proxy answers and the SDK's isRunning() reads as
  // false. Ids are 80 random bits: that one is not live says nothing of anyone's.
  const Error not_live{ErrorCode::kUpstreamError, "sandbox " + id.substr(0, 64) + " is not running", 0};
  if (!valid_id(id, "sbx")) return fail(not_live);
  auto s = sandboxes_.registry().find(id);
  if (!s) return fail(not_live);
  std::string project;
  {
    std::lock_guard lk(s->mu);
    project = s->rec.project_id;
  }
  if (project.empty()) return fail(refused);  // a pool member: no one's yet
  const std::string token = sandboxes_.access_token(id);
  if (std::string_view given = ex.header("X-Access-Token"); !given.empty()) {
    if (!same(given, token)) return fail(refused);
  } else if (path == "/files" && query.count("signature")) {
    // A signed URL (Sandbox.uploadUrl / downloadUrl): "v1_" + base64(sha256 of
    // "path:operation:user:token[:expiration]"); signer_of compared it already when the URL
    // named no sandbox.
    if (auto r = not_expired(query); !r) return fail(r.error());
    if (!found_by_signature && !same(first(query, "signature"), signature(ex, query, token))) return fail(refused);
  } else {
    return fail(refused);
  }
  return sandbox::Principal{project, "envd:" + id, "", sandbox::CredentialKind::kEnvdToken, id};
}

void Server::handle_envd(http::Exchange& ex, const sandbox::Principal& p, const std::string& method, const std::string& path,
                         const Query& query) {
  // Only the token of the sandbox it names: authenticate_envd made this principal.
  if (p.kind != sandbox::CredentialKind::kEnvdToken || p.sandbox_id.empty())
    return ex.respond(401, "application/json",
                      dump(api_error({ErrorCode::kUnauthorized, "envd routes take the sandbox's access token", 0})), {});
  const std::string& id = p.sandbox_id;
  if (path == "/health") return ex.respond(204, "text/plain", "", {});
  if (path == "/files") {
    if (method == "GET") return files_get(ex, p, id, query);
    if (method == "POST") return files_post(ex, p, id, query);
    return ex.respond(405, "application/json", dump(api_error({ErrorCode::kMethodNotAllowed, "GET or POST", 0})),
                      {{"Allow", "GET, POST"}});
  }
  auto user = basic_user(ex.header("Authorization"));
  if (!user) return send_connect_error(ex, user.error());
  // /package.Service/Method
  const size_t slash = path.find('/', 1);
  if (path.size() < 2 || slash == std::string::npos || method != "POST")
    return ex.respond(404, "application/json",
                      dump(api_error({ErrorCode::kNotFound, "no such envd route (b3os serves process.Process, "
                                                            "filesystem.Filesystem, /files and /health)",
                                      0})),
                      {});
  const std::string_view service = std::string_view(path).substr(1, slash - 1);
  const std::string_view rpc = std::string_view(path).substr(slash + 1);
  if (service != kProcess && service != kFilesystem)
    return send_connect_error(ex, {ErrorCode::kNotImplemented, "service " + std::string(service) + " is not served", 0});
  const std::string_view ct = ex.header("Content-Type");
  if (ct.rfind("application/connect+json", 0) == 0) return stream(ex, p, id, service, rpc, *user);
  if (ct.rfind("application/json", 0) == 0) return unary(ex, p, id, service, rpc, *user);
  if (ct.rfind("application/proto", 0) == 0 || ct.rfind("application/connect+proto", 0) == 0)
    return send_connect_error(ex, {ErrorCode::kUnsupportedMediaType,
                                   "b3os speaks the Connect protocol's JSON encoding only (E2B's SDKs use it)", 0});
  send_connect_error(ex, {ErrorCode::kUnsupportedMediaType, "Content-Type: application/json (unary) or "
                                                            "application/connect+json (streams)",
                          0});
}

// ---- unary calls ----

void Server::unary(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, std::string_view service,
                   std::string_view rpc, const std::string& user) {
  auto raw = ex.read_body(cfg_.max_message);
  if (!raw) return send_connect_error(ex, raw.error());
  auto msg = parse_unary_request(*raw);
  if (!msg) return send_connect_error(ex, msg.error());
  Result<json> out = service == kProcess ? process_unary(p, id, rpc, *msg) : filesystem_unary(p, id, rpc, *msg, user);
  if (!out) return send_connect_error(ex, out.error());
  if (out->is_object() && out->contains("__connect_code")) {  // an answer only Connect has a code for
    const std::string code = (*out)["__connect_code"];
    return ex.respond(connect_http_status(code), "application/json",
                      dump({{"code", code}, {"message", (*out)["message"]}}), {});
  }
  ex.respond(200, "application/json", dump(*out), {});
}

Result<json> Server::process_unary(const sandbox::Principal& p, const std::string& id, std::string_view rpc,
                                   const json& msg) {
  auto& exec = sandboxes_.exec();
  if (rpc == "List") {
    if (auto r = only_fields(msg, {}, "ListRequest"); !r) return fail(r.error());
    auto list = exec.list_processes(p, id);
    if (!list) return fail(list.error());
    json procs = json::array();
    for (const auto& proc : (*list)["data"]) {
      if (proc.value("status", "") != "running") continue;
      const json argv = proc.value("argv", json::array());
      json args = json::array();
      for (size_t i = 1; i < argv.size(); ++i) args.push_back(argv[i]);
      json info = {{"config", {{"cmd", argv.empty() ? json("") : argv[0]}, {"args", args}, {"envs", json::object()}}},
                   {"pid", proc.value("pid", 0)}};
      if (proc.value("cwd", json()).is_string()) info["config"]["cwd"] = proc["cwd"];
      if (proc.value("tag", json()).is_string()) info["tag"] = proc["tag"];
      procs.push_back(std::move(info));
    }
    return json{{"processes", procs}};
  }
  if (rpc == "SendInput") {
    if (auto r = only_fields(msg, {"process", "input"}, "SendInputRequest"); !r) return fail(r.error());
    auto proc = selected(exec, p, id, msg);
    if (!proc) return fail(proc.error());
    const json input = msg.value("input", json::object());
    if (!input.is_object()) return fail(ErrorCode::kInvalidRequest, "input: {\"stdin\": base64} is required");
    // What is typed on a terminal goes to its stdin, as a command's input does.
    const char* field = input.contains("pty") ? "pty" : "stdin";
    if (!input.contains(field) || !input[field].is_string())
      return fail(ErrorCode::kInvalidRequest, "input: {\"stdin\": base64} or {\"pty\": base64}");
    auto bytes = unbase64(input[field].get<std::string>());
    if (!bytes) return fail(ErrorCode::kInvalidRequest, std::string("input.") + field + ": not base64");
    auto w = exec.write_process_stdin(p, id, *proc, *bytes, false);
    if (!w) return fail(w.error());
    return json::object();
  }
  if (rpc == "CloseStdin") {
    if (auto r = only_fields(msg, {"process"}, "CloseStdinRequest"); !r) return fail(r.error());
    auto proc = selected(exec, p, id, msg);
    if (!proc) return fail(proc.error());
    auto w = exec.write_process_stdin(p, id, *proc, "", true);
    if (!w) return fail(w.error());
    return json::object();
  }
  if (rpc == "SendSignal") {
    if (auto r = only_fields(msg, {"process", "signal"}, "SendSignalRequest"); !r) return fail(r.error());
    auto proc = selected(exec, p, id, msg);
    if (!proc) return fail(proc.error());
    const json sig = msg.value("signal", json("SIGNAL_UNSPECIFIED"));
    int n = 0;
    if (sig == "SIGNAL_SIGKILL" || sig == 9) n = 9;
    else if (sig == "SIGNAL_SIGTERM" || sig == 15) n = 15;
    else return fail(ErrorCode::kInvalidRequest, "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM");
    auto r = exec.signal_process(p, id, *proc, n, true);
    if (!r) return fail(r.error());
    return json::object();
  }
  if (rpc == "Update") {
    if (auto r = only_fields(msg, {"process", "pty"}, "UpdateRequest"); !r) return fail(r.error());
    auto proc = selected(exec, p, id, msg);
    if (!proc) return fail(proc.error());
    if (!msg.contains("pty") || msg["pty"].is_null()) return json::object();  // nothing to change
    auto size = pty_size(msg["pty"]);
    if (!size) return fail(size.error());
    auto r = exec.resize_process(p, id, *proc, size->first, size->second);
    if (!r) return fail(r.error());
    return json::object();
  }
  if (rpc == "StreamInput")
    return fail(ErrorCode::kNotImplemented, "StreamInput is a client stream, which HTTP/1.1 Connect cannot carry; use SendInput");
  if (rpc == "Start" || rpc == "Connect")
    return fail(ErrorCode::kInvalidRequest, std::string(rpc) + " is a server stream: send Content-Type: application/connect+json");
  return fail(ErrorCode::kNotImplemented, "process.Process/" + std::string(rpc) + " is not a method b3os serves");
}

Result<json> Server::filesystem_unary(const sandbox::Principal& p, const std::string& id, std::string_view rpc,
                                      const json& msg, const std::string& user) {
  auto& exec = sandboxes_.exec();
  sandbox::Timing t;
  if (rpc == "Stat") {
    if (auto r = only_fields(msg, {"path"}, "StatRequest"); !r) return fail(r.error());
    auto path = path_field(msg, "path", user);
    if (!path) return fail(path.error());
    auto e = exec.stat_path(p, id, *path);
    if (!e) return fail(e.error());
    return json{{"entry", entry_info(*e)}};
  }
  if (rpc == "MakeDir") {
    if (auto r = only_fields(msg, {"path"}, "MakeDirRequest"); !r) return fail(r.error());
    auto path = path_field(msg, "path", user);
    if (!path) return fail(path.error());
    auto e = exec.make_dir(p, id, *path);
    if (!e) return fail(e.error());
    if (!e->value("created", false)) return json{{"__connect_code", "already_exists"}, {"message", "directory " + *path + " already exists"}};
    return json{{"entry", entry_info(*e)}};
  }
  if (rpc == "Move") {
    if (auto r = only_fields(msg, {"source", "destination"}, "MoveRequest"); !r) return fail(r.error());
    auto from = path_field(msg, "source", user);
    if (!from) return fail(from.error());
    auto to = path_field(msg, "destination", user);
    if (!to) return fail(to.error());
    auto e = exec.move_path(p, id, *from, *to);
    if (!e) return fail(e.error());
    return json{{"entry", entry_info(*e)}};
  }
  if (rpc == "Remove") {
    if (auto r = only_fields(msg, {"path"}, "RemoveRequest"); !r) return fail(r.error());
    auto path = path_field(msg, "path", user);
    if (!path) return fail(path.error());
    auto r = exec.remove_path(p, id, *path, true, t);
    if (!r) return fail(r.error());
    return json::object();
  }
  if (rpc == "ListDir") {
    if (auto r = only_fields(msg, {"path", "depth"}, "ListDirRequest"); !r) return fail(r.error());
    auto path = path_field(msg, "path", user);
    if (!path) return fail(path.error());
    int depth = 1;
    if (msg.contains("depth")) {
      if (!msg["depth"].is_number_unsigned() || msg["depth"].get<uint64_t>() > kMaxListDepth)
        return fail(ErrorCode::kInvalidRequest, "depth: 0 to " + std::to_string(kMaxListDepth));
      depth = std::max<int>(1, static_cast<int>(msg["depth"].get<uint64_t>()));
    }
    // Breadth first, `depth` levels, each directory one list of the agent's.
    json entries = json::array();
    std::deque<std::pair<std::string, int>> todo{{*path, 1}};
    size_t dirs = 0;
    const auto too_many = [] {
      return fail(ErrorCode::kInvalidRequest, "the listing spans over " + std::to_string(kMaxListDirs) +
                                                  " directories; ask for less depth");
    };
    while (!todo.empty()) {
      ++dirs;
      auto [dir, level] = todo.front();
      todo.pop_front();
      auto list = exec.list_dir(p, id, dir, t);
      if (!list) {
        // A directory removed or unreadable since its parent was listed is left out; anything
        // else (the sandbox or its agent) ends the listing, not one wait per directory.
        const ErrorCode c = list.error().code;
        if (dir == *path || (c != ErrorCode::kFileNotFound && c != ErrorCode::kForbidden && c != ErrorCode::kInvalidRequest))
          return fail(list.error());
        continue;
      }
      // A directory of more than a page is read page by page (ListDir has no cursor of its
      // own); kMaxListEntries below bounds how far.
      for (json more = *list; more["next_cursor"].is_string() && (*list)["data"].size() <= kMaxListEntries;) {
        auto after = sandbox::parse_list_page({{"cursor", more["next_cursor"].get<std::string>()}});
        if (!after) return fail(after.error());
        auto next = exec.list_dir(p, id, dir, t, after->after);
        if (!next) return fail(next.error());
        for (auto& e : (*next)["data"]) (*list)["data"].push_back(std::move(e));
        more = std::move(*next);
      }
      if ((*list).value("truncated", false))
        return fail(ErrorCode::kInvalidRequest, "the sandbox's agent cut the listing of " + dir +
                                                    " short (an agent of an older b3os); restart the sandbox");
      for (const auto& e : (*list)["data"]) {
        if (entries.size() >= kMaxListEntries)
          return fail(ErrorCode::kInvalidRequest, "the listing is over " + std::to_string(kMaxListEntries) + " entries; ask for less depth");
        entries.push_back(entry_info(e));
        if (e.value("type", "") == "dir" && level < depth) {
          // Refused as soon as it is known to be too wide, not after a thousand agent calls.
          if (dirs + todo.size() >= kMaxListDirs) return too_many();
          todo.emplace_back(e.value("path", ""), level + 1);
        }
      }
    }
    return json{{"entries", entries}};
  }
  if (rpc == "CreateWatcher" || rpc == "GetWatcherEvents" || rpc == "RemoveWatcher")
    return fail(ErrorCode::kNotImplemented, std::string(rpc) + ": the polled watchers are not served; WatchDir (the stream E2B's JS SDK uses) is");
  if (rpc == "WatchDir")
    return fail(ErrorCode::kInvalidRequest, "WatchDir is a server stream: send Content-Type: application/connect+json");
  return fail(ErrorCode::kNotImplemented, "filesystem.Filesystem/" + std::string(rpc) + " is not a method b3os serves");
}

// ---- server streams ----

void Server::stream(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, std::string_view service,
                    std::string_view rpc, const std::string& user) {
  Envelopes out(ex);
  // A stream may last an hour: it holds a stream's place (the project's fair share), never
  // one of the request workers short requests need.
  if (auto h = ex.hold_stream(p.project_id); !h) return out.end(h.error());
  auto raw = ex.read_body(cfg_.max_message + 5);
  if (!raw) return out.end(raw.error());
  auto msg = parse_stream_request(*raw, cfg_.max_message);
  if (!msg) return out.end(msg.error());
  auto& exec = sandboxes_.exec();
  if (service == kProcess && rpc == "Start") {
    if (auto r = only_fields(*msg, {"process", "pty", "tag", "stdin"}, "StartRequest"); !r) return out.end(r.error());
    sandbox::ProcessSpec spec;
    if (msg->contains("pty") && !(*msg)["pty"].is_null()) {
      auto size = pty_size((*msg)["pty"]);
      if (!size) return out.end(size.error());
      spec.pty = *size;
    }
    const json& cfg = msg->value("process", json());
    if (!cfg.is_object()) return out.end(Error{ErrorCode::kInvalidRequest, "process: {\"cmd\", \"args\", \"envs\", \"cwd\"} is required", 0});
    if (auto r = only_fields(cfg, {"cmd", "args", "envs", "cwd"}, "process"); !r) return out.end(r.error());
    spec.output_bytes = cfg_.process_output_bytes;
    if (!cfg.contains("cmd") || !cfg["cmd"].is_string() || cfg["cmd"].get<std::string>().empty())
      return out.end(Error{ErrorCode::kInvalidRequest, "process.cmd: the program to run", 0});
    spec.cmd.argv.push_back(cfg["cmd"]);
    if (cfg.contains("args")) {
      if (!cfg["args"].is_array()) return out.end(Error{ErrorCode::kInvalidRequest, "process.args: a list of strings", 0});
      for (const auto& a : cfg["args"]) {
        if (!a.is_string()) return out.end(Error{ErrorCode::kInvalidRequest, "process.args: a list of strings", 0});
        spec.cmd.argv.push_back(a);
      }
    }
    if (cfg.contains("envs") && !cfg["envs"].is_null()) {
      auto env = sandbox::parse_env_object(cfg["envs"], "process.envs");
      if (!env) return out.end(env.error());
      spec.cmd.env = std::move(*env);
    }
    if (cfg.contains("cwd") && !cfg["cwd"].is_null()) {
      if (!cfg["cwd"].is_string()) return out.end(Error{ErrorCode::kInvalidRequest, "process.cwd: a path", 0});
      spec.cmd.cwd = absolute(cfg["cwd"], user);
      spec.cmd.cwd_given = true;
    }
    spec.cmd.user = user;
    if (msg->contains("stdin")) {
      if (!(*msg)["stdin"].is_boolean()) return out.end(Error{ErrorCode::kInvalidRequest, "stdin: true or false", 0});
      spec.stdin_open = (*msg)["stdin"];
    }
    if (msg->contains("tag") && !(*msg)["tag"].is_null()) {
      if (!(*msg)["tag"].is_string() || (*msg)["tag"].get<std::string>().size() > 256)
        return out.end(Error{ErrorCode::kInvalidRequest, "tag: a string of at most 256 bytes", 0});
      spec.tag = (*msg)["tag"];
    }
    // The command's deadline (the SDK's timeoutMs; absent or 0: none), from now: the process is
    // killed when it passes, followed or not, as E2B's envd does.
    int64_t timeout_ms = 0;
    if (const std::string_view h = ex.header("Connect-Timeout-Ms"); !h.empty()) {
      if (h.size() > 10 || h.find_first_not_of("0123456789") != std::string_view::npos)
        return out.end(Error{ErrorCode::kInvalidRequest, "Connect-Timeout-Ms: at most 10 digits (milliseconds)", 0});
      // At most a day: a sandbox lives at most that long without activity anyway.
      timeout_ms = std::min<int64_t>(std::stoll(std::string(h)), 24LL * 3600 * 1000);
    }
    const int64_t deadline = steady_ms() + timeout_ms;
    if (timeout_ms > 0)
      if (auto r = deadlines_.reserve(p, id); !r) return out.end(r.error());
    sandbox::Timing t;
    auto started = exec.start_process(p, id, spec, t);
    if (!started) return out.end(started.error());
    const std::string pid = std::to_string(started->value("pid", 0));
    if (timeout_ms > 0) deadlines_.add(p, id, started->value("id", pid), deadline);
    return process_events(ex, p, id, pid, true, &*started);
  }
  if (service == kProcess && rpc == "Connect") {
    if (auto r = only_fields(*msg, {"process"}, "ConnectRequest"); !r) return out.end(r.error());
    auto proc = selected(exec, p, id, *msg);
    if (!proc) return out.end(proc.error());
    return process_events(ex, p, id, *proc, false);
  }
  if (service == kFilesystem && rpc == "WatchDir") return watch_dir(ex, p, id, *msg);
  out.end(Error{ErrorCode::kNotImplemented, std::string(service) + "/" + std::string(rpc) + " is not a server stream b3os serves", 0});
}

void Server::process_events(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const std::string& proc,
                            bool started, const json* known) {
  Envelopes out(ex);
  auto& exec = sandboxes_.exec();
  // A start already has the process's view: asking again could only fail and hide the pid of a
  // process that runs.
  auto info = known ? Result<json>(*known) : exec.get_process(p, id, proc);
  if (!info) return out.end(info.error());
  const int pid = info->value("pid", 0);
  // Start gives the output from the first byte; Connect from now on, as E2B's envd does.
  const uint64_t since = started ? 0 : (*info)["output"].value("end", uint64_t{0});
  if (!out.message({{"event", {{"start", {{"pid", pid}}}}}})) return;
  const bool pty = info->value("pty", false);  // a terminal's output is one stream, "pty"
  sandbox::Exec::OutputReader reader;
  reader.begin = [](const json&) { return true; };
  reader.data = [&](uint64_t, bool is_stderr, std::string_view bytes) {
    const char* stream = pty ? "pty" : is_stderr ? "stderr" : "stdout";
    return out.message({{"event", {{"data", {{stream, sys::base64_encode(bytes)}}}}}});
  };
  reader.gap = [](uint64_t, uint64_t) { return true; };
  // Keepalive-Ping-Interval (seconds; the SDK sends 50): an event while the command is silent,
  // so that a quiet command's stream is not cut as idle by a client or a proxy in between.
  if (const std::string_view h = ex.header("Keepalive-Ping-Interval");
      !h.empty() && h.size() <= 5 && h.find_first_not_of("0123456789") == std::string_view::npos) {
    reader.quiet_every_ms = std::max<int64_t>(1, std::stoll(std::string(h))) * 1000;
    reader.quiet = [&] { return out.message({{"event", {{"keepalive", json::object()}}}}); };
  }
  auto r = exec.process_output(p, id, proc, since, true, kMaxFollowMs, reader, [&] { return ex.client_gone(); });
  if (!r) return out.end(r.error());
  if (r->value("running", false)) return out.end(Error{ErrorCode::kUpstreamTimeout, "the process still runs after 24 h of following it", 0});
  const int code = r->value("exit_code", json(-1)).is_number() ? (*r)["exit_code"].get<int>() : -1;
  const int sig = r->value("signal", json(0)).is_number() ? (*r)["signal"].get<int>() : 0;
  if (started) deadlines_.remove(id, info->value("id", proc));
  json end = {{"exited", true}, {"status", signal_status(code, sig)}, {"exitCode", sig ? -1 : code}};
  if (!out.message({{"event", {{"end", end}}}})) return;
  out.end(std::nullopt);
}

void Server::watch_dir(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const json& msg) {
  Envelopes out(ex);
  if (auto r = only_fields(msg, {"path", "recursive", "include_entry", "allow_network_mounts"}, "WatchDirRequest"); !r)
    return out.end(r.error());
  auto path = path_field(msg, "path", "");
  if (!path) return out.end(path.error());
  if (msg.contains("recursive") && !msg["recursive"].is_boolean())
    return out.end(Error{ErrorCode::kInvalidRequest, "WatchDirRequest.recursive: a boolean", 0});
  const bool recursive = msg.value("recursive", false);
  const std::string root = *path == "/" ? "" : *path;
  sandbox::Exec::WatchReader reader;
  reader.begin = [&](const json&) { return out.message({{"start", json::object()}}); };
  reader.quiet = [&] { return out.message({{"keepalive", json::object()}}); };
  reader.events = [&](std::string_view lines) {
    size_t i = 0;
    while (i < lines.size()) {
      const size_t nl = std::min(lines.find('\n', i), lines.size());
      const json e = json::parse(lines.substr(i, nl - i), nullptr, false);
      i = nl + 1;
      if (!e.is_object()) continue;
      const std::string type = e.value("type", "");
      auto rel = [&](const std::string& full) {
        return full.rfind(root + "/", 0) == 0 ? full.substr(root.size() + 1) : full;
      };
      auto send = [&](const std::string& name, const char* t) {
        return out.message({{"filesystem", {{"name", name}, {"type", t}}}});
      };
      bool ok = true;
      if (type == "create") ok = send(rel(e.value("path", "")), "EVENT_TYPE_CREATE");
      else if (type == "modify") ok = send(rel(e.value("path", "")), "EVENT_TYPE_WRITE");
      else if (type == "delete") ok = send(rel(e.value("path", "")), "EVENT_TYPE_REMOVE");
      else if (type == "attrib") ok = send(rel(e.value("path", "")), "EVENT_TYPE_CHMOD");
      else if (type == "rename")
        ok = send(rel(e.value("from", "")), "EVENT_TYPE_RENAME") && send(rel(e.value("path", "")), "EVENT_TYPE_CREATE");
      if (!ok) return false;
    }
    return true;
  };
  auto r = sandboxes_.exec().watch_files(p, id, *path, recursive, kMaxFollowMs, reader, [&] { return ex.client_gone(); });
  if (!r) return out.end(r.error());
  out.end(std::nullopt);
}

// ---- /files ----

void Server::files_get(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const Query& q) {
  auto fail_with = [&](const Error& e) {
    ex.respond(error_http_status(e.code), "application/json", dump(api_error(e)), {});
  };
  const std::string user = first(q, "username");
  const std::string raw = first(q, "path");
  if (raw.empty()) return fail_with({ErrorCode::kInvalidRequest, "path: the file to read", 0});
  const std::string path = absolute(raw, user);
  bool begun = false;
  sandbox::FileSink sink;
  sink.begin = [&](uint64_t size) -> Result<void> {
    begun = true;
    return ex.begin_stream(200, "application/octet-stream", size, {});
  };
  sink.data = [&](std::string_view chunk) { return ex.write(chunk); };
  sandbox::Timing t;
  auto r = sandboxes_.read_file(p, id, path, sink, t);
  if (!r && !begun) return fail_with(r.error());
  if (!r) ex.abort_stream();
}

void Server::files_post(http::Exchange& ex, const sandbox::Principal& p, const std::string& id, const Query& q) {
  auto fail_with = [&](const Error& e) {
    ex.respond(error_http_status(e.code), "application/json", dump(api_error(e)), {});
  };
  const std::string user = first(q, "username");
  const std::string given = first(q, "path");
  if (auto len = ex.content_length(); len && *len > cfg_.max_upload_bytes)
    return fail_with({ErrorCode::kPayloadTooLarge, "the upload is over " + std::to_string(cfg_.max_upload_bytes) + " bytes", 0});
  auto pull = [&](char* buf, size_t cap) { return ex.read_chunk(buf, cap, cfg_.max_upload_bytes); };
  const std::string_view ct = ex.header("Content-Type");
  if (!ex.header("Content-Encoding").empty() && ex.header("Content-Encoding") != "identity")
    return fail_with({ErrorCode::kUnsupportedMediaType, "Content-Encoding: only identity uploads are taken (b3os reports envd "
                                                        "0.5.7; gzip is not decoded)",
                      0});
  json written = json::array();
  sandbox::Timing t;
  auto write_one = [&](const std::string& path, const sandbox::ChunkSource& source) -> Result<void> {
    auto r = sandboxes_.write_file(p, id, path, source, t);
    if (!r) return fail(r.error());
    const size_t slash = path.find_last_of('/');
    written.push_back({{"name", path.substr(slash + 1)}, {"type", "file"}, {"path", path}});
    return {};
  };
  if (ct.rfind("application/octet-stream", 0) == 0) {
    if (given.empty()) return fail_with({ErrorCode::kInvalidRequest, "path: where to write the file", 0});
    if (auto r = write_one(absolute(given, user), pull); !r) return fail_with(r.error());
    return ex.respond(200, "application/json", dump(written), {});
  }
  auto boundary = multipart_boundary(ct);
  if (!boundary) return fail_with(boundary.error());
  MultipartReader parts(*boundary, pull);
  for (size_t n = 0;; ++n) {
    auto part = parts.next();
    if (!part) return fail_with(part.error());
    if (!*part) break;
    if (n >= 1000) return fail_with({ErrorCode::kInvalidRequest, "at most 1000 files in one upload", 0});
    // ?path names the file when there is one; otherwise each part's filename does.
    const std::string target = !given.empty() ? given : (*part)->filename;
    if (target.empty() || target.size() > 4096 || target.find('\0') != std::string::npos)
      return fail_with({ErrorCode::kInvalidRequest, "each file needs a path (?path=, or the part's filename)", 0});
    sandbox::ChunkSource source = [&](char* buf, size_t cap) { return parts.read(buf, cap); };
    if (auto r = write_one(absolute(target, user), source); !r) return fail_with(r.error());
  }
  if (written.empty()) return fail_with({ErrorCode::kInvalidRequest, "the upload holds no file", 0});
  ex.respond(200, "application/json", dump(written), {});
}

}  // namespace b3os::e2b
