#include "daemon/router/router.h"
#include "daemon/router/relay.h"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/metrics.h"
#include "daemon/cluster/peer.h"
#include "daemon/cluster/signature.h"

namespace b3os::router {

namespace {

std::vector<std::string_view> segments_of(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    const size_t j = std::min(path.find('/', i), path.size());
    out.push_back(path.substr(i, j - i));
    i = j;
  }
  return out;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(prefix[i]))) return false;
  return true;
}

// A request that may last (a command, a wait, a terminal, a watch, a follow, a model or MCP
// call, an envd stream): relayed, it holds one of the router's stream places (the project's
// fair share of them), never a request worker, as on the nodes (http::Config::max_streams).
bool long_lived(std::string_view method, const std::vector<std::string_view>& segs, std::string_view content_type) {
  if (starts_with_ci(content_type, "application/connect")) return true;  // envd's streams
  if (segs.empty()) return false;
  if (segs[0] == "mcp" || (segs.size() >= 2 && segs[0] == "v1" && segs[1] == "infer")) return true;
  const std::string_view last = segs.back();
  if (method == "POST" && (last == "exec" || last == "wait")) return true;
  return method == "GET" && (last == "pty" || last == "watch" || last == "output" || last == "logs");
}

std::string hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

/// The bytes of lowercase or uppercase hex; "" when it is not hex.
std::string unhex(std::string_view h) {
  if (h.empty() || h.size() % 2 != 0 || h.size() > 512) return {};
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    const int a = val(h[i]), b = val(h[i + 1]);
    if (a < 0 || b < 0) return {};
    out += static_cast<char>(a * 16 + b);
  }
  return out;
}

// Registered at start, so every family is on /metrics from the first scrape.
auto& m_forwards = metrics::metrics().counter(
    "b3os_router_forwards_total",
    "requests the router passed on, by what the path names (sandbox: a sandbox's or snapshot's path; create; mcp; "
    "preview: a preview URL's; other) and result (relayed; node_unreachable: a node refused the connection, the router tried again; no_node: "
    "no node could take it, the client got 503 or 429)",
    {"kind", "result"});

std::string error_body(const Error& e) {
  nlohmann::json j = {{"error", {{"code", std::string(error_code_name(e.code))}, {"message", e.message}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

namespace {
std::string g_cluster_ca;  // set once at start, before any relay
}  // namespace

void set_cluster_ca(std::string ca_file) { g_cluster_ca = std::move(ca_file); }
const std::string& cluster_ca() { return g_cluster_ca; }

Result<NodeAddress> parse_node_url(const std::string& url) {
  NodeAddress a;
  std::string_view rest;
  if (url.rfind("http://", 0) == 0) {
    rest = std::string_view(url).substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = std::string_view(url).substr(8);
    a.tls = true;
  } else {
    return fail(ErrorCode::kInvalidRequest, "node URL \"" + url + "\": not http(s)://HOST:PORT");
  }
  if (auto slash = rest.find('/'); slash != std::string_view::npos) rest = rest.substr(0, slash);
  size_t colon;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      return fail(ErrorCode::kInvalidRequest, "node URL \"" + url + "\": not http://[V6]:PORT");
    a.host = std::string(rest.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail(ErrorCode::kInvalidRequest, "node URL \"" + url + "\": no port");
    a.host = std::string(rest.substr(0, colon));
  }
  const std::string_view port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return fail(ErrorCode::kInvalidRequest, "node URL \"" + url + "\": bad port");
  a.port = std::stoi(std::string(port));
  if (a.port < 1 || a.port > 65535) return fail(ErrorCode::kInvalidRequest, "node URL \"" + url + "\": bad port");
  return a;
}

Router::Router(Config cfg, store::Store& store) : cfg_(std::move(cfg)), store_(store) {}

void Router::register_metrics() {
  auto& reg = metrics::metrics();
  reg.collect({"b3os_router_nodes", "the cluster's nodes by state (ready, draining, down), as this router last read them",
               {"state"}, [this](auto& out) {
                 std::map<std::string, int> by_state{{"ready", 0}, {"draining", 0}, {"down", 0}};
                 std::lock_guard lk(mu_);
                 for (const auto& n : nodes_) ++by_state[n.state];
                 for (auto& [st, c] : by_state) out.push_back({metrics::Labels{st}, double(c)});
               }});
  reg.collect({"b3os_router_node_sandboxes", "sandboxes each node that is not down said it holds at its last heartbeat",
               {"node"}, [this](auto& out) {
                 std::lock_guard lk(mu_);
                 for (const auto& n : nodes_)
                   if (n.state != "down") out.push_back({metrics::Labels{n.id}, double(n.sandboxes)});
               }});
}

void Router::send_error(http::Exchange& ex, const Error& e) {
  http::Headers h;
  if (e.code == ErrorCode::kUnauthorized) h.emplace_back("WWW-Authenticate", "Bearer");
  const int status = error_http_status(e.code);
  if (status == 503 || status == 429) h.emplace_back("Retry-After", "1");
  ex.respond(status, "application/json", error_body(e), h);
}

Result<store::ApiKeyRecord> Router::authenticate(http::Exchange& ex) {
  // The same checks and words as a node's (daemon/api/api.cc): the router answers what a
  // node would, without a trip to one.
  auto presented = store::presented_api_key(ex.header("Authorization"), ex.header("X-API-Key"));
  if (!presented) return fail(presented.error());
  const std::string_view key = *presented;
  const std::string hash = store::sha256_hex(key);
  const int64_t now = steady_ms();
  {
    std::lock_guard lk(mu_);
    if (auto it = keys_.find(hash); it != keys_.end() && it->second.until_ms > now) return it->second.rec;
  }
  auto rec = store_.find_api_key(key);
  if (!rec) return fail(rec.error());
  if (!*rec) return fail(ErrorCode::kUnauthorized, "unknown or revoked API key");
  std::lock_guard lk(mu_);
  if (keys_.size() >= 100'000) keys_.clear();  // bounded: keys in use come back at their next request
  keys_[hash] = CachedKey{**rec, now + cfg_.key_cache_ms};
  return **rec;
}

Result<std::vector<store::NodeRecord>> Router::nodes(bool fresh) {
  const int64_t now = steady_ms();
  if (!fresh) {
    std::lock_guard lk(mu_);
    if (nodes_at_ms_ >= 0 && now - nodes_at_ms_ < cfg_.nodes_cache_ms) return nodes_;
  }
  auto all = store_.list_nodes();
  if (!all) return fail(all.error());
  std::lock_guard lk(mu_);
  nodes_ = *all;
  nodes_at_ms_ = now;
  return nodes_;
}

std::optional<store::NodeRecord> Router::live_node(const std::vector<store::NodeRecord>& all, const std::string& node_id) {
  for (const auto& n : all)
    if (n.id == node_id && n.state != "down") return n;
  return std::nullopt;
}

const store::NodeRecord* pick_node(const std::vector<store::NodeRecord>& all, const PlaceRequest& req) {
  const store::NodeRecord* best = nullptr;
  std::pair<int, int64_t> best_score;
  for (size_t k = 0; k < all.size(); ++k) {
    const auto& n = all[(req.turn + k) % all.size()];  // equal scores: a different node each time
    if (std::find(req.skip.begin(), req.skip.end(), n.id) != req.skip.end()) continue;
    if (n.state != "ready" && !(req.draining_ok && n.state == "draining")) continue;
    const int64_t load = n.sandboxes + (req.pending ? req.pending(n.id) : 0);
    if (req.memory_mib > 0) {  // a create: room for it
      if (n.max_sandboxes > 0 && load >= n.max_sandboxes) continue;
      if (n.memory_mib > 0 && n.used_memory_mib + req.memory_mib > n.memory_mib) continue;
      if (req.vcpu > 0 && n.vcpu > 0 && n.used_vcpu + req.vcpu > n.vcpu) continue;
    }
    const bool warm = !req.tpl.empty() && std::find(n.warm.begin(), n.warm.end(), req.tpl) != n.warm.end();
    const std::pair<int, int64_t> score{warm ? 0 : 1, load};
    if (best == nullptr || score < best_score) {
      best = &n;
      best_score = score;
    }
  }
  return best;
}

std::optional<store::NodeRecord> Router::least_loaded(const std::vector<store::NodeRecord>& all,
                                                      const std::vector<std::string>& skip, bool draining_ok,
                                                      int memory_mib, const std::string& tpl, int vcpu) {
  std::lock_guard lk(mu_);
  const int64_t now = steady_ms();
  // What this router sent a node that its load may not show yet: creates in flight, and
  // those placed within a heartbeat and a cache refresh.
  auto pending = [&](const std::string& id) {
    int64_t p = 0;
    if (auto it = creating_.find(id); it != creating_.end()) p += it->second;
    if (auto it = placed_.find(id); it != placed_.end()) {
      auto& v = it->second;
      v.erase(std::remove_if(v.begin(), v.end(), [&](int64_t t) { return now - t > 2'000 + cfg_.nodes_cache_ms; }),
              v.end());
      p += static_cast<int64_t>(v.size());
    }
    return p;
  };
  PlaceRequest req{skip, draining_ok, memory_mib, vcpu, tpl, turn_++, pending};
  const store::NodeRecord* best = pick_node(all, req);
  if (best == nullptr) return std::nullopt;
  if (memory_mib > 0) placed_[best->id].push_back(now);
  return *best;
}

bool Router::forward(http::Exchange& ex, const store::NodeRecord& node, const std::optional<std::string>& body,
                     std::string* error, const std::function<void(http::ProxyOptions&, const store::NodeRecord&)>& adjust,
                     std::string_view route) {
  http::ProxyOptions o;
  o.target = std::string(ex.target());
  o.cookie = std::string(ex.header("Cookie"));
  o.idle_timeout = cfg_.idle_timeout;
  o.body = body;
  o.expect_large_bodies = true;
  if (adjust) adjust(o, node);
  auto relayed = relay_signed(ex, node.url, cfg_.secret, route, std::move(o), cfg_.connect_timeout);
  if (relayed || ex.responded()) return true;
  if (relayed.error().code == ErrorCode::kNodeUnavailable || relayed.error().code == ErrorCode::kInvalidRequest) {
    // Not reached (refused, no answer to the connect, or a bad URL in its row): nothing was
    // sent, and another node, or this one at its new address, may take the request.
    *error = "node " + node.id + ": " + relayed.error().message;
    return false;
  }
  send_error(ex, {ErrorCode::kNodeUnavailable,
                  "node " + node.id + " broke off the request: " + relayed.error().message + "; retry shortly", 0});
  return true;
}

Result<std::string> Router::node_holding(const std::string& project, const std::string& id, bool snapshot) {
  const std::string key = (snapshot ? "s/" : "b/") + project + "/" + id;
  const int64_t now = steady_ms();
  {
    std::lock_guard lk(mu_);
    if (auto it = places_.find(key); it != places_.end() && it->second.until_ms > now) return it->second.node_id;
  }
  std::string node;
  if (snapshot) {
    auto rec = store_.get_snapshot(project, id);
    if (!rec) return fail(rec.error());
    if (!*rec) return std::string();
    node = (*rec)->node_id;
  } else {
    auto rec = store_.get_sandbox(project, id);
    if (!rec) return fail(rec.error());
    if (!*rec) return std::string();
    node = (*rec)->node_id;
  }
  std::lock_guard lk(mu_);
  if (places_.size() >= 200'000) places_.clear();  // bounded; refilled as requests come
  places_[key] = CachedPlace{node, now + 60'000};
  return node;
}

namespace {
/// A path of E2B's control plane (e2b::Server::is_control's roots; the router does not link
/// the E2B module): /sandboxes..., /v2/sandboxes..., /templates...
bool is_e2b_control(const std::vector<std::string_view>& s) {
  if (s.empty()) return false;
  const std::string_view root = (s[0] == "v2" || s[0] == "v3") && s.size() > 1 ? s[1] : s[0];
  for (std::string_view r : {"sandboxes", "templates", "volumes", "volumecontent", "secrets", "snapshots"})
    if (root == r) return true;
  return false;
}
}  // namespace

Result<std::string> Router::sandbox_node(const std::string& id) {
  const int64_t now = steady_ms();
  {
    std::lock_guard lk(mu_);
    if (auto it = places_.find("p/" + id); it != places_.end() && it->second.until_ms > now) return it->second.node_id;
  }
  auto found = store_.sandbox_node(id);
  if (!found || found->empty()) return found;
  std::lock_guard lk(mu_);
  if (places_.size() >= 200'000) places_.clear();
  places_["p/" + id] = CachedPlace{*found, now + 60'000};
  return found;
}

void Router::send_e2b_error(http::Exchange& ex, const Error& e) {
  const int status = error_http_status(e.code);
  http::Headers h;
  if (status == 503 || status == 429) h.emplace_back("Retry-After", "1");
  // The message may quote what the client sent (a header): bytes that are not UTF-8 are replaced.
  ex.respond(status, "application/json",
             nlohmann::json{{"code", status}, {"message", e.message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
             h);
}

void Router::handle_envd(http::Exchange& ex, const std::string& id, bool signed_url) {
  if (!signed_url) ex.set_route("e2b_envd");
  // As E2B's proxy answers for a sandbox it cannot reach: 502 (the SDK's isRunning() reads
  // false from it).
  const auto gone = [&](const std::string& why) { send_e2b_error(ex, {ErrorCode::kUpstreamError, why, 0}); };
  if (id.size() < 5 || id.size() > 64 || id.compare(0, 4, "sbx_") != 0 ||
      !std::all_of(id.begin() + 4, id.end(), [](unsigned char c) { return std::isalnum(c); }))
    return gone("no sandbox " + id.substr(0, 64));
  auto node = sandbox_node(id);
  if (!node) return send_e2b_error(ex, node.error());
  if (node->empty()) return gone("no sandbox " + id);
  auto all = nodes();
  if (!all) return send_e2b_error(ex, all.error());
  auto n = live_node(*all, *node);
  if (!n) return gone("sandbox " + id + " is not running: its node " + *node + " is down");
  // Relayed as an API request, unauthenticated here: the node checks the sandbox's token. A
  // node that says "retry" (the sandbox is being moved) makes the next request look again.
  const std::string place_key = "p/" + id;
  auto adjust = [this, place_key, signed_url, &id](http::ProxyOptions& o, const store::NodeRecord&) {
    // A signed URL's sandbox, as the node found it: the node checks the signature against that
    // sandbox's token alone.
    if (signed_url) o.request_headers.emplace_back("E2b-Sandbox-Id", id);
    o.rewrite_response_header = [this, place_key](std::string_view name, std::string_view) -> std::optional<std::string> {
      if (name.size() == 11 && starts_with_ci(name, "retry-after")) {
        std::lock_guard lk(mu_);
        places_.erase(place_key);
      }
      return std::nullopt;
    };
  };
  std::string error;
  if (forward(ex, *n, std::nullopt, &error, adjust)) {
    m_forwards.with({"e2b_envd", "relayed"}).inc();
    return;
  }
  m_forwards.with({"e2b_envd", "node_unreachable"}).inc();
  gone("the node holding sandbox " + id + " is not answering (" + error + ")");
}

void Router::handle_signed_files(http::Exchange& ex) {
  ex.set_route("e2b_signed_files");
  // Each client's URLs are limited here, as a node limits its own clients': the nodes see only
  // the router, and count its questions against themselves alone.
  {
    std::lock_guard lk(mu_);
    switch (signed_clients_.take(http::client_key(ex.peer_address()), steady_ms())) {
      case KeyedBuckets::Take::kTaken:
        break;
      case KeyedBuckets::Take::kNoRoom:
        return send_e2b_error(ex, {ErrorCode::kRateLimited, "too many clients checking signed /files URLs at once; retry shortly", 0});
      case KeyedBuckets::Take::kEmpty:
        return send_e2b_error(ex, {ErrorCode::kRateLimited, "too many signed /files URLs from this client this second; retry shortly", 0});
    }
  }
  auto all = nodes();
  if (!all) return send_e2b_error(ex, all.error());
  // The URL names no sandbox and only a node can tell its sandboxes' tokens: each live node is
  // asked which of its sandboxes signed it (at most one did).
  const std::string ask = nlohmann::json{{"method", std::string(ex.method())}, {"target", std::string(ex.target())}}.dump();
  std::optional<Error> other;  // a node's refusal other than "none of mine" (its own limit, a bad URL)
  Error none{ErrorCode::kUnauthorized, "the URL's signature is not that of a running sandbox's access token", 0};
  bool unreachable = false;
  for (const auto& n : *all) {
    if (n.state == "down") continue;
    auto a = cluster::post_to_node(n.url, cfg_.secret, "e2b-signer", "/internal/e2b-signer", ask, std::chrono::seconds(5));
    if (!a) {
      unreachable = true;
      continue;
    }
    const auto j = nlohmann::json::parse(a->body, nullptr, false);
    if (a->status == 200 && j.is_object() && j.value("sandbox", nlohmann::json()).is_string())
      return handle_envd(ex, j["sandbox"].get<std::string>(), true);
    // The node answers in b3os's shape: {"error": {"code", "message"}}.
    const nlohmann::json err = j.is_object() ? j.value("error", nlohmann::json()) : nlohmann::json();
    const std::string msg = err.is_object() && err.value("message", nlohmann::json()).is_string() ? err["message"].get<std::string>() : "";
    if (a->status == 401) {
      if (!msg.empty()) none.message = msg;  // "expired" says more than "not found"
    } else if (!other) {
      other = Error{a->status == 429   ? ErrorCode::kRateLimited
                    : a->status >= 500 ? ErrorCode::kUpstreamError
                                       : ErrorCode::kInvalidRequest,
                    msg.empty() ? "node " + n.id + " refused the signed URL (HTTP " + std::to_string(a->status) + ")" : msg, 0};
    }
  }
  if (other) return send_e2b_error(ex, *other);
  if (unreachable)
    return send_e2b_error(ex, {ErrorCode::kUpstreamError, "no live node knows this URL's signer, and a node is not answering", 0});
  send_e2b_error(ex, none);
}

void Router::handle_preview(http::Exchange& ex) {
  ex.set_route("preview");
  // Host: {port}-{host_id}.{domain}[:port], host_id being the sandbox's id with '-' for '_'.
  std::string host(ex.header("Host"));
  if (auto colon = host.rfind(':'); colon != std::string::npos && host.find(']') == std::string::npos) host.resize(colon);
  std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string suffix = "." + cfg_.preview_domain;
  auto not_preview = [&] {
    send_error(ex, {ErrorCode::kNotFound,
                    "not a preview URL: the host must be {port}-{sandbox host_id}." + cfg_.preview_domain, 0});
  };
  if (host.size() <= suffix.size() || host.compare(host.size() - suffix.size(), suffix.size(), suffix) != 0)
    return not_preview();
  const std::string label = host.substr(0, host.size() - suffix.size());
  const size_t dash = label.find('-');
  // host_id ("sbx-...") or the id itself ("sbx_...", as E2B's SDK builds getHost's name).
  if (dash == std::string::npos || dash == 0 || dash > 5 ||
      (label.compare(dash + 1, 4, "sbx-") != 0 && label.compare(dash + 1, 4, "sbx_") != 0))
    return not_preview();
  std::string id = "sbx_" + label.substr(dash + 5);
  if (id.size() > 64 || !std::all_of(id.begin() + 4, id.end(), [](unsigned char c) { return std::isalnum(c); }))
    return not_preview();
  std::string node;
  if (auto found = sandbox_node(id); !found) {
    return send_error(ex, found.error());
  } else if (found->empty()) {
    return send_error(ex, {ErrorCode::kSandboxNotFound, "no sandbox " + id, 0});
  } else {
    node = *found;
  }
  auto all = nodes();
  if (!all) return send_error(ex, all.error());
  auto n = live_node(*all, node);
  if (!n) return send_error(ex, {ErrorCode::kSandboxNotRunning, "sandbox " + id + " is not running: its node " + node +
                                                                  " is down", 0});
  // Signed as a preview request ("preview:" before the method), so that the route header
  // cannot be added to or taken from a request signed for the API.
  auto adjust = [](http::ProxyOptions& o, const store::NodeRecord&) {
    o.expect_large_bodies = false;  // an app's server may not know Expect
  };
  std::string error;
  if (forward(ex, *n, std::nullopt, &error, adjust, "preview")) {
    m_forwards.with({"preview", "relayed"}).inc();
    return;
  }
  m_forwards.with({"preview", "node_unreachable"}).inc();
  send_error(ex, {ErrorCode::kNodeUnavailable, "the node holding sandbox " + id + " is not answering (" + error +
                                                   "); retry shortly", 0});
}

void Router::handle(http::Exchange& ex) {
  const std::string_view target = ex.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const auto segs = segments_of(path);
  const std::string_view method = ex.method();

  if (path == "/healthz" && method == "GET") {
    auto all = nodes();
    int ready = 0;
    if (all)
      for (const auto& n : *all) ready += n.state == "ready";
    nlohmann::json j = {{"ok", all && ready > 0}, {"status", all ? (ready > 0 ? "ready" : "no_ready_node") : "no_store"},
                        {"nodes_ready", ready}};
    ex.respond(j["ok"].get<bool>() ? 200 : 503, "application/json", j.dump(), {});
    return;
  }
  // E2B's SDK (docs/e2b.md): envd requests carry a sandbox's token, not a key, and name their
  // sandbox in a header; the control plane is /sandboxes, /v2/sandboxes... with a key, and
  // answers errors in E2B's shape, the router's own too.
  if (const std::string envd_id(ex.header("E2b-Sandbox-Id")); !envd_id.empty()) return handle_envd(ex, envd_id);
  const bool e2b = is_e2b_control(segs);
  const auto fail_with = [&](const Error& e) { e2b ? send_e2b_error(ex, e) : send_error(ex, e); };
  if (path == "/files" && target.find("signature=") != std::string_view::npos) return handle_signed_files(ex);
  auto key = authenticate(ex);
  if (!key) return fail_with(key.error());
  if (long_lived(method, segs, ex.header("Content-Type")))
    if (auto h = ex.hold_stream(key->project_id); !h) return fail_with(h.error());
  auto all = nodes();
  if (!all) return fail_with(all.error());

  // Where the request goes: the node holding what the path names; else placement (a
  // create) or the least loaded node (the rest: they read the shared store).
  std::optional<store::NodeRecord> bound;
  std::string bound_what;
  // E2B's paths name the sandbox at [1] (/sandboxes/ID) or [2] (/v2/sandboxes/ID).
  const size_t e2b_at = e2b && (segs[0] == "v2" || segs[0] == "v3") ? 2 : 1;
  const bool e2b_create = e2b && method == "POST" && segs.size() == e2b_at && segs[e2b_at - 1] == "sandboxes";
  const bool create = (method == "POST" && segs.size() == 2 && segs[0] == "v1" && segs[1] == "sandboxes") || e2b_create;
  std::optional<std::string> body;
  std::string place_key;
  int memory_mib = 0, vcpu = 0;
  std::string tpl;
  auto bind_to = [&](const std::string& node_id, const std::string& what) {
    bound_what = what;
    bound = live_node(*all, node_id);  // a down node's sandboxes are failed: any node answers from the record
  };
  if (e2b && segs.size() > e2b_at && segs[e2b_at - 1] == "sandboxes") {
    const std::string id(segs[e2b_at]);
    auto node = node_holding(key->project_id, id, false);
    if (!node) return fail_with(node.error());
    if (!node->empty()) bind_to(*node, "sandbox " + id);
    place_key = "b/" + key->project_id + "/" + id;
  } else if (segs.size() >= 3 && segs[0] == "v1" && (segs[1] == "sandboxes" || segs[1] == "snapshots")) {
    const bool snap = segs[1] == "snapshots";
    const std::string id(segs[2]);
    auto node = node_holding(key->project_id, id, snap);
    if (!node) return fail_with(node.error());
    if (!node->empty()) bind_to(*node, (snap ? "snapshot " : "sandbox ") + id);
    // A node that says "retry" (503 with Retry-After: the sandbox is being moved, or was
    // moved away) makes the router read where it is again for the retry.
    place_key = (snap ? "s/" : "b/") + key->project_id + "/" + id;
  } else if (segs.size() == 6 && segs[0] == "v1" && segs[1] == "templates" && segs[3] == "builds" &&
             (segs[5] == "logs" || segs[5] == "cancel")) {
    // A build's log is a file on the node that runs the build, and only that node can stop it
    // (the node checks the key).
    auto b = store_.get_template_build(std::string(segs[4]));
    if (!b) return fail_with(b.error());
    if (*b && !(*b)->node_id.empty()) bind_to((*b)->node_id, "template build " + (*b)->id);
  } else if (create) {
    memory_mib = 512;
    vcpu = 1;
    if (ex.has_body()) {
      auto raw = ex.read_body(cfg_.max_create_body);
      if (!raw) return fail_with(raw.error());
      body = std::move(*raw);
      // A bad body goes on as it is: the node says what is wrong with it (a body nested past
      // 64 levels is not parsed here at all, as the node refuses it unparsed).
      auto j = json_depth(*body) > 64 ? nlohmann::json() : nlohmann::json::parse(*body, nullptr, false);
      if (j.is_object()) {
        if (auto m = j.find("memory_mib"); m != j.end() && m->is_number_integer()) memory_mib = std::max(1, m->get<int>());
        if (auto v = j.find("vcpu"); v != j.end() && v->is_number_integer()) vcpu = std::clamp(v->get<int>(), 1, 1024);
        if (auto t = j.find(e2b_create ? "templateID" : "template"); t != j.end() && t->is_string()) tpl = t->get<std::string>();
        if (auto s = j.find("snapshot"); s != j.end() && s->is_string()) {
          // A restore goes where the image is (no fetch) while that node is ready; else it is
          // placed like any create, and the node it lands on fetches the image from the
          // object store (docs/cluster.md).
          auto node = node_holding(key->project_id, s->get<std::string>(), true);
          if (!node) return fail_with(node.error());
          if (auto n = live_node(*all, *node); n && n->state == "ready") bind_to(*node, "snapshot " + s->get<std::string>());
        }
      }
    } else {
      body = std::string();
    }
  }

  // /mcp: a session lives on the node that opened it. The router's session id is the node's
  // with ".HEX(node id)" after it, so any router sends its requests there; the node sees its
  // own id. A session whose node is gone goes on as it is, and a node answers that it does not
  // know it (the client opens another).
  std::function<void(http::ProxyOptions&, const store::NodeRecord&)> adjust;
  if (!segs.empty() && segs[0] == "mcp") {
    const std::string sid(ex.header("Mcp-Session-Id"));
    const size_t dot = sid.rfind('.');
    std::string node_id;
    if (dot != std::string::npos && dot > 0) node_id = unhex(std::string_view(sid).substr(dot + 1));
    std::string own_sid = sid;
    if (!node_id.empty()) {
      bind_to(node_id, "MCP session");
      if (bound) own_sid = sid.substr(0, dot);
    }
    adjust = [own_sid](http::ProxyOptions& o, const store::NodeRecord& n) {
      if (!own_sid.empty()) o.request_headers.emplace_back("Mcp-Session-Id", own_sid);
      const std::string suffix = "." + hex(n.id);
      o.rewrite_response_header = [suffix](std::string_view name, std::string_view value) -> std::optional<std::string> {
        if (name.size() != 14 || !starts_with_ci(name, "mcp-session-id")) return std::nullopt;
        return std::string(value) + suffix;
      };
    };
  }

  if (!place_key.empty())
    adjust = [this, place_key](http::ProxyOptions& o, const store::NodeRecord&) {
      o.rewrite_response_header = [this, place_key](std::string_view name, std::string_view) -> std::optional<std::string> {
        if (name.size() == 11 && starts_with_ci(name, "retry-after")) {
          std::lock_guard lk(mu_);
          places_.erase(place_key);
        }
        return std::nullopt;
      };
    };
  const char* kind = create                                                                   ? "create"
                     : !segs.empty() && segs[0] == "mcp"                                        ? "mcp"
                     : segs.size() >= 3 && segs[0] == "v1" && (segs[1] == "sandboxes" || segs[1] == "snapshots") ? "sandbox"
                                                                                                : "other";
  std::vector<std::string> tried;
  std::string last_error;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::optional<store::NodeRecord> n = bound ? bound : least_loaded(*all, tried, !create, create ? memory_mib : 0, tpl, create ? vcpu : 0);
    if (!n) break;
    if (create) {
      std::lock_guard lk(mu_);
      ++creating_[n->id];
    }
    std::string error;
    const bool sent = forward(ex, *n, body, &error, adjust);
    if (create) {
      std::lock_guard lk(mu_);
      if (--creating_[n->id] <= 0) creating_.erase(n->id);
    }
    if (sent) {
      m_forwards.with({kind, "relayed"}).inc();
      return;
    }
    m_forwards.with({kind, "node_unreachable"}).inc();
    spdlog::warn("router: {}", error);
    last_error = error;
    // A node that restarted may listen elsewhere now (a new pod address): the store knows.
    if (auto fresh = nodes(true); fresh) {
      *all = std::move(*fresh);
      if (bound) {
        auto again = live_node(*all, bound->id);
        if (again && again->url != bound->url) {
          bound = again;
          continue;
        }
      }
    }
    if (bound) {
      m_forwards.with({kind, "no_node"}).inc();
      return fail_with({ErrorCode::kNodeUnavailable,
                             "the node holding " + bound_what + " is not answering (" + error + "); retry shortly", 0});
    }
    // Nothing was read from the client yet: another node can take it, or this one where the
    // store says it listens now.
    if (auto again = live_node(*all, n->id); again && again->url != n->url) continue;
    tried.push_back(n->id);
  }
  m_forwards.with({kind, "no_node"}).inc();
  if (create)
    return fail_with({ErrorCode::kCapacityUnavailable,
                           "no node can take this sandbox now (" + std::to_string(all->size()) + " nodes" +
                               (last_error.empty() ? "; none ready with room" : "; " + last_error) + ")",
                           0});
  fail_with({ErrorCode::kNodeUnavailable,
                  "no node is ready" + (last_error.empty() ? std::string() : " (" + last_error + ")") + "; retry shortly",
                  0});
}

}  // namespace b3os::router
