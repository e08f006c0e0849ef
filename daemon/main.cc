// b3osd: the b3os daemon. Serves the sandbox API on one node.

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include "common/file.h"
#include "common/metrics.h"
#include "daemon/api/access.h"
#include "daemon/api/api.h"
#include "daemon/template/service.h"
#include "daemon/api/config.h"
#include "daemon/api/target.h"
#include "daemon/gateway/gateway.h"
#include "daemon/gateway/relay.h"
#include "daemon/http/held_body.h"
#include "daemon/http/metrics_listener.h"
#include "daemon/objstore/objstore.h"
#include "daemon/http/server.h"
#include "daemon/http/tls.h"
#include "daemon/preview/preview.h"
#include "daemon/mcp/server.h"
#include "daemon/mcp/tools.h"
#include "daemon/runtime/runsc.h"
#include "daemon/runtime/shims.h"
#include "daemon/sandbox/config.h"
#include "daemon/net/host_network.h"
#include "daemon/sandbox/service.h"
#include "daemon/logging.h"
#include "daemon/cluster/membership.h"
#include "daemon/cluster/peer.h"
#include "daemon/cluster/signature.h"
#include "daemon/router/relay.h"
#include "daemon/router/router.h"
#include "daemon/sandbox/spec.h"
#include "common/clock.h"
#include "daemon/store/store.h"
#include "daemon/sys/process.h"

namespace fs = std::filesystem;
using namespace b3os;

namespace {

// The largest body a router signs by its digest: what it holds whole (a create's spec, 1 MiB
// by default; an MCP call) with room to spare. Larger ones it streams unsigned.
constexpr size_t kMaxSignedBody = (16u << 20) + (1u << 20);

/// A helper binary: beside b3osd (a build tree), else in ../lib/b3os (the package:
/// /usr/sbin/b3osd and /usr/lib/b3os/b3os-agent).
std::string beside_self(const std::string& name) {
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return name;
  auto beside = self.parent_path() / name;
  if (fs::exists(beside)) return beside.string();
  auto packaged = self.parent_path().parent_path() / "lib" / "b3os" / name;
  return fs::exists(packaged) ? packaged.string() : beside.string();
}

/// The first key of a fresh store: created once, kept in data_dir/admin.key (0600) so every
/// start can print it.
Result<std::string> admin_key(store::Store& store, const std::string& data_dir) {
  const std::string path = data_dir + "/admin.key";
  std::ifstream in(path);
  std::string key;
  if (in >> key && key.rfind("b3os_sk_", 0) == 0) {
    auto found = store.find_api_key(key);
    if (found && *found) return key;
  }
  auto k = store.create_api_key("default");
  if (!k) return fail(k.error());
  ::umask(077);
  std::ofstream(path, std::ios::trunc) << k->key << "\n";
  return k->key;
}

/// What an image of a template's checkpoint was taken with: the runtime's and the agent's
/// binaries (size and time of each). An image from others would not restore.
std::string image_stamp(const std::string& runsc, const std::string& agent) {
  std::string out;
  for (const std::string& p : {runsc, agent}) {
    std::string path = p;
    if (path.find('/') == std::string::npos) {
      for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/usr/sbin/"})
        if (::access((std::string(dir) + p).c_str(), X_OK) == 0) {
          path = std::string(dir) + p;
          break;
        }
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0)
      out += path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + "\n";
  }
  return out;
}

/// Raises the soft limit on open files to the hard one (every idle client connection holds a
/// descriptor) and returns it.
rlim_t raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) ::getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur;
}

/// Client connections may take at most half of the descriptors: the rest are for sandboxes
/// (channels, shims), SQLite and runsc.
int connection_cap(int wanted, rlim_t fd_limit) {
  const auto room = static_cast<int>(std::min<rlim_t>(fd_limit / 2, 1 << 30));
  if (wanted <= room) return wanted;
  spdlog::warn("--max-connections {} lowered to {}: half of the {} open files allowed (RLIMIT_NOFILE)", wanted, room,
               fd_limit);
  return room;
}

/// Seconds from a flag, as the server's milliseconds.
std::chrono::milliseconds ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

/// A number from a /proc file's "Name: value kB" line, or -1.
double proc_status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string want = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(want, 0) == 0) return std::atof(line.c_str() + want.size());
  return -1;
}

/// The gauges read when the node is scraped: what it holds, its pools, templates and itself.
void register_node_metrics(sandbox::SandboxService& sandboxes, gateway::Gateway& gw) {
  using metrics::Collected;
  using metrics::Labels;
  auto& reg = metrics::metrics();
  const double started = static_cast<double>(std::chrono::duration_cast<std::chrono::seconds>(
                                                 std::chrono::system_clock::now().time_since_epoch())
                                                 .count());
  reg.gauge("b3os_build_info", "1, labelled with the running b3osd's version", {"version"}).with({B3OS_VERSION}).set(1);
  reg.gauge("b3os_start_time_seconds", "when this b3osd started (Unix seconds)").with().set(started);
  reg.collect({"b3os_ready", "1 once the sandboxes of the previous run are reattached and the API serves, else 0", {},
               [&sandboxes](auto& out) { out.push_back({Labels{}, sandboxes.ready() ? 1.0 : 0.0}); }});
  reg.collect({"b3os_sandboxes", "live sandboxes by state (running, paused) and template", {"state", "template"},
               [&sandboxes](auto& out) {
                 for (auto& [k, n] : sandboxes.stats().sandboxes) out.push_back({Labels{k.first, k.second}, double(n)});
               }});
  reg.collect({"b3os_node_capacity", "the node's capacity: sandboxes it may hold (max), live, starting, and pool members "
               "waiting (pooled; they count against max)", {"kind"},
               [&sandboxes](auto& out) {
                 const auto u = sandboxes.stats().usage;
                 out.push_back({Labels{"max"}, double(u.max)});
                 out.push_back({Labels{"live"}, double(u.live)});
                 out.push_back({Labels{"starting"}, double(u.starting)});
                 out.push_back({Labels{"pooled"}, double(u.pooled)});
               }});
  // What the sandboxes commit (their limits, live and starting) against what the node admits
  // (docs/configuration.md, "Admission"); a capacity of 0 is no limit.
  reg.collect({"b3os_node_committed", "what live and starting sandboxes commit, by resource (memory_mib, vcpu, disk_gib)",
               {"resource"},
               [&sandboxes](auto& out) {
                 const auto c = sandboxes.stats().usage.committed;
                 out.push_back({Labels{"memory_mib"}, double(c.memory_mib)});
                 out.push_back({Labels{"vcpu"}, double(c.vcpu)});
                 out.push_back({Labels{"disk_gib"}, double(c.disk_gib)});
               }});
  reg.collect({"b3os_node_admits", "what the node admits of each resource: the host's times the overcommit ratio (0: no limit)",
               {"resource"},
               [&sandboxes](auto& out) {
                 const auto c = sandboxes.stats().usage.capacity;
                 out.push_back({Labels{"memory_mib"}, double(c.memory_mib)});
                 out.push_back({Labels{"vcpu"}, double(c.vcpu)});
                 out.push_back({Labels{"disk_gib"}, double(c.disk_gib)});
               }});
  // One sample per pool, from the pools' sizes (members waiting) or targets.
  auto per_pool = [&sandboxes](bool targets) {
    return [&sandboxes, targets](std::vector<std::pair<Labels, double>>& out) {
      const auto p = sandboxes.stats().pools;
      out.push_back({Labels{"warm"}, double(targets ? p.warm_target : p.warm)});
      out.push_back({Labels{"fork"}, double(targets ? p.fork_target : p.fork)});
      out.push_back({Labels{"net_warm"}, double(targets ? p.net_warm_target : p.net_warm)});
      out.push_back({Labels{"net_fork"}, double(targets ? p.net_fork_target : p.net_fork)});
      out.push_back({Labels{"fork_ahead"}, double(targets ? p.fork_ahead_target : p.fork_ahead)});
    };
  };
  reg.collect({"b3os_pool_size", "members waiting in each pool now (warm, fork, net_warm, net_fork, fork_ahead: spares of quiet forkable sandboxes)", {"pool"},
               per_pool(false)});
  reg.collect({"b3os_pool_target", "the size each pool is refilled to (its flag; 0: off)", {"pool"}, per_pool(true)});
  reg.collect({"b3os_template_checkpoint",
               "1 for each template, labelled with its checkpoint's status (off, building, ready, failed, missing) "
               "and whether creates restore it (creates: restore, boot, or none while it has no checkpoint)",
               {"template", "status", "creates"},
               [&sandboxes](auto& out) {
                 auto t = sandboxes.templates();
                 for (auto& row : t["data"]) {
                   std::string status = "none", creates = "none";
                   if (row.contains("checkpoint") && row["checkpoint"].is_object()) {
                     auto& c = row["checkpoint"];
                     if (c.contains("status") && c["status"].is_string()) status = c["status"].get<std::string>();
                     if (c.contains("creates") && c["creates"].is_string()) creates = c["creates"].get<std::string>();
                   }
                   out.push_back({Labels{row.value("name", std::string("?")), status, creates}, 1.0});
                 }
               }});
  reg.collect({"b3os_gateway_models", "models the gateway serves (1 each)", {"model"}, [&gw](auto& out) {
                 for (auto& id : gw.model_ids()) out.push_back({Labels{id}, 1.0});
               }});
  reg.collect({"b3os_budget_used_ratio",
               "spent plus reserved over the cap, for the capped budgets (keys' and sandbox grants') that have spent "
               "since b3osd started; the 200 fullest",
               {"budget"}, [&gw](auto& out) {
                 std::vector<std::pair<double, std::string>> rows;
                 // Only budgets that have spent or hold something: a create with a cap makes a
                 // budget, and unused ones would churn series without telling anything.
                 for (auto& [id, b] : gw.budgets().capped()) {
                   const Micros used = b.spent_micros + b.reserved_micros;
                   if (used <= 0) continue;
                   rows.push_back({*b.cap_micros > 0 ? double(used) / double(*b.cap_micros) : 1.0, id});
                 }
                 std::sort(rows.rbegin(), rows.rend());
                 if (rows.size() > 200) rows.resize(200);
                 for (auto& [ratio, id] : rows) out.push_back({Labels{id}, ratio});
               }});
  reg.collect({"process_open_fds", "open file descriptors of b3osd", {}, [](auto& out) {
                 std::error_code ec;
                 double n = 0;
                 for (auto it = fs::directory_iterator("/proc/self/fd", ec); !ec && it != fs::directory_iterator();
                      it.increment(ec))
                   ++n;
                 out.push_back({Labels{}, n});
               }});
  reg.collect({"process_max_fds", "b3osd's limit of open file descriptors", {}, [](auto& out) {
                 rlimit r{};
                 ::getrlimit(RLIMIT_NOFILE, &r);
                 out.push_back({Labels{}, double(r.rlim_cur)});
               }});
  reg.collect({"process_resident_memory_bytes", "b3osd's resident memory", {}, [](auto& out) {
                 out.push_back({Labels{}, proc_status_kb("VmRSS") * 1024});
               }});
}

/// Relays one MCP tools/call (its JSON-RPC message `body`) to `node`'s internal listener,
/// signed for "mcp-call" with the client's key; true once `ex` is answered from there.
/// `unsent_is_false`: a node that could not be reached (nothing sent) is false, not an error.
Result<bool> relay_mcp_call(http::Exchange& ex, const store::NodeRecord& node, const std::string& secret,
                            const std::string& body, const std::function<bool()>& cancelled, const std::string& what,
                            bool unsent_is_false = false) {
  http::ProxyOptions o;
  o.target = "/mcp";
  o.body = body;
  o.idle_timeout = std::chrono::milliseconds(3'700'000);  // a command may run quietly up to its timeout
  o.abandon = cancelled;
  auto r = router::relay_signed(ex, node.url, secret, "mcp-call", std::move(o), std::chrono::seconds(2));
  // As the routers tell it (Router::forward): these two codes mean nothing reached the node.
  if (!r && unsent_is_false && !ex.responded() &&
      (r.error().code == ErrorCode::kNodeUnavailable || r.error().code == ErrorCode::kInvalidRequest))
    return false;
  if (!r && !ex.responded() && !cancelled())
    return fail(ErrorCode::kNodeUnavailable,
                what + " node " + node.id + ", which is not answering (" + r.error().message + "); retry shortly");
  return true;
}

/// An MCP tool call naming a sandbox another live node holds runs on that node: relayed to
/// its internal listener signed for "mcp-call", with the client's key (docs/cluster.md).
std::function<Result<bool>(http::Exchange&, const sandbox::Principal&, const std::string&, const std::string&,
                           const std::function<bool()>&)>
make_mcp_relay(store::Store& store, sandbox::SandboxService& sandboxes, const std::string& node_id,
               const std::string& secret) {
  return [&store, &sandboxes, node_id, &secret](http::Exchange& ex, const sandbox::Principal& p, const std::string& id,
                                                const std::string& body,
                                                const std::function<bool()>& cancelled) -> Result<bool> {
    if (sandboxes.registry().find(p.project_id, id)) return false;
    auto rec = store.get_sandbox(p.project_id, id);
    // Unknown to the store, or another project's, or this node's: answered here.
    if (!rec || !*rec || (*rec)->node_id.empty() || (*rec)->node_id == node_id || (*rec)->ended()) return false;
    auto nodes = store.list_nodes();
    if (!nodes) return fail(nodes.error());
    const store::NodeRecord* holder = nullptr;
    for (auto& n : *nodes)
      if (n.id == (*rec)->node_id && n.state != "down") holder = &n;
    if (!holder) return false;  // its node is down: the record is failed, and says so here
    return relay_mcp_call(ex, *holder, secret, body, cancelled, "sandbox " + id + " is on");
  };
}

/// This node's load as its heartbeat reports it: what the registry holds.
store::NodeRecord node_load(sandbox::SandboxService& sandboxes) {
  store::NodeRecord n;
  const auto& c = sandboxes.config();
  n.max_sandboxes = c.max_sandboxes_per_node;
  // What the node admits, as Registry::reserve judges it: a router places by the same figures.
  const auto cap = sandboxes.stats().usage.capacity;
  n.vcpu = cap.vcpu > 0 ? cap.vcpu : std::thread::hardware_concurrency();
  n.memory_mib = cap.memory_mib > 0 ? cap.memory_mib
                                    : static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) / (1 << 20);
  const auto u = sandboxes.stats().usage;
  n.sandboxes = u.live;
  n.used_memory_mib = u.committed.memory_mib;  // live and starting, as admission counts them
  n.used_vcpu = u.committed.vcpu;
  return n;
}

/// An MCP sandbox_create on a node that is draining, or has no room for it, is relayed to the
/// node the cluster's placement picks (router::pick_node, as a router would place a REST
/// create), where it runs as that node's own. When no other node fits, it is made (or refused)
/// here, as before.
std::function<Result<bool>(http::Exchange&, const sandbox::Principal&, const nlohmann::json&, const std::string&,
                           const std::function<bool()>&)>
make_mcp_create_relay(store::Store& store, sandbox::SandboxService& sandboxes, const std::string& node_id,
                      const std::string& secret, const std::atomic<bool>& draining) {
  return [&store, &sandboxes, node_id, &secret, &draining](
             http::Exchange& ex, const sandbox::Principal&, const nlohmann::json& args, const std::string& body,
             const std::function<bool()>& cancelled) -> Result<bool> {
    int memory_mib = sandbox::SandboxSpec().memory_mib;
    if (auto m = args.find("memory_mib"); m != args.end() && m->is_number_integer()) memory_mib = std::max(1, m->get<int>());
    std::string tpl = "base";
    if (auto t = args.find("template"); t != args.end() && t->is_string()) tpl = t->get<std::string>();
    const store::NodeRecord me = node_load(sandboxes);
    const bool full = (me.max_sandboxes > 0 && me.sandboxes >= me.max_sandboxes) ||
                      (me.memory_mib > 0 && me.used_memory_mib + memory_mib > me.memory_mib);
    if (!draining.load() && !full) return false;
    auto nodes = store.list_nodes();
    if (!nodes) return false;  // the store is away: the create here says so if it needs it
    router::PlaceRequest req;
    req.skip = {node_id};
    req.memory_mib = memory_mib;
    req.tpl = tpl;
    const store::NodeRecord* to = router::pick_node(*nodes, req);
    if (!to) return false;
    spdlog::info("mcp: a sandbox_create on this {} node goes to node {}", draining.load() ? "draining" : "full", to->id);
    // A node that cannot be reached took nothing: the create is made here after all.
    return relay_mcp_call(ex, *to, secret, body, cancelled, "the create was placed on", true);
  };
}

// The answer of an internal route: its JSON, or the error in b3os's shape.
void answer_json(http::Exchange& ex, const Result<nlohmann::json>& r) {
  api::Reply reply = r ? api::Reply{200, *r, {}} : api::error_reply(r.error());
  ex.respond(reply.status, "application/json", api::dump_json(reply.body), reply.headers);
}

// The JSON object an internal route takes: POST `path`, at most 64 KiB.
Result<nlohmann::json> internal_body(http::Exchange& ex, std::string_view route, std::string_view path) {
  if (ex.method() != "POST" || ex.target() != path)
    return fail(ErrorCode::kNotFound, "the " + std::string(route) + " route is POST " + std::string(path));
  auto body = ex.read_body(64 * 1024);
  if (!body) return fail(body.error());
  // The signature covers this body's digest (cluster::post_to_node signs it): a body changed
  // on the way, or one sent where the signer signed none, is refused.
  const std::string_view signed_digest = ex.header(cluster::kBodyHeader);
  if (signed_digest == cluster::kUnsignedBody || signed_digest != cluster::sha256_hex(*body))
    return fail(ErrorCode::kUnauthorized, std::string(route) + ": the body is not the one the cluster signature covers");
  auto j = nlohmann::json::parse(*body, nullptr, false);
  if (!j.is_object()) return fail(ErrorCode::kInvalidRequest, std::string(route) + ": the body is a JSON object");
  return j;
}

// The cluster route "e2b-signer" (b3os-router asks each node): which live sandbox of this node
// signed a /files URL that names none. POST /internal/e2b-signer {"method", "target"}: 200
// {"sandbox"}, 401 when none of this node's did (docs/e2b.md, "Signed URLs through a router").
void e2b_signer(http::Exchange& ex, e2b::Server& e2b) {
  auto j = internal_body(ex, "e2b-signer", "/internal/e2b-signer");
  if (!j) return answer_json(ex, fail(j.error()));
  if (!j->value("method", nlohmann::json()).is_string() || !j->value("target", nlohmann::json()).is_string())
    return answer_json(ex, fail(ErrorCode::kInvalidRequest, "e2b-signer: method and target are required"));
  auto target = api::parse_target((*j)["target"].get<std::string>());
  if (!target) return answer_json(ex, fail(target.error()));
  if (target->path != "/files" || !target->query.count("signature"))
    return answer_json(ex, fail(ErrorCode::kInvalidRequest, "e2b-signer: the target is a signed /files URL"));
  auto id = e2b.signer_for((*j)["method"] == "GET", target->query);
  if (!id) return answer_json(ex, fail(id.error()));
  answer_json(ex, nlohmann::json{{"sandbox", *id}});
}

/// POST /internal/adopt on the internal listener (signed for the route "adopt", no API key):
/// a draining node hands this one a sandbox (docs/cluster.md, "A drain moves sandboxes").
void adopt_moved(http::Exchange& ex, sandbox::SandboxService& sandboxes, const std::string& this_node) {
  auto answer = [&ex](const Result<nlohmann::json>& r) { answer_json(ex, r); };
  auto body = internal_body(ex, "adopt", "/internal/adopt");
  if (!body) return answer(fail(body.error()));
  const auto& j = *body;
  if (!j.is_object() || !j.value("sandbox_id", nlohmann::json()).is_string() ||
      !j.value("project_id", nlohmann::json()).is_string() || !j.value("move_id", nlohmann::json()).is_string() ||
      !j.value("from_node", nlohmann::json()).is_string() || !j.value("deadline_ms", nlohmann::json()).is_number_integer())
    return answer(fail(ErrorCode::kInvalidRequest, "adopt: sandbox_id, project_id, move_id, from_node and deadline_ms are required"));
  // The signed body names the node it is for: the same request replayed to another node (the
  // target is the same on every node) is refused there.
  if (j.value("to_node", nlohmann::json()) != this_node)
    return answer(fail(ErrorCode::kConflict, "adopt: this move is for node " + j.value("to_node", std::string("?")).substr(0, 64) +
                                                 ", not " + this_node));
  sandbox::Timing t;
  answer(sandboxes.adopt(j["project_id"], j["sandbox_id"], j["move_id"], j["from_node"], j["deadline_ms"].get<int64_t>(), t));
}

/// A draining node moves out the sandboxes whose owners allowed it (forkable: true), each to
/// the ready node with the fewest sandboxes; the others run on here until they end. Returns
/// whether every one that could go went.
bool move_sandboxes_out(sandbox::SandboxService& sandboxes, store::Store& store, const std::string& node_id,
                        const std::string& secret) {
  bool all = true;
  std::map<std::string, int> sent;  // this pass's moves per node (its heartbeat shows them later)
  for (auto& s : sandboxes.registry().all()) {
    std::string project, tpl;
    int memory_mib = 0;
    {
      std::lock_guard lk(s->mu);
      if (!s->rec.forkable || s->rec.state != store::State::kRunning) continue;
      project = s->rec.project_id;
      memory_mib = std::max(1, s->rec.memory_mib);
      tpl = s->rec.template_name;
    }
    auto nodes = store.list_nodes();
    if (!nodes) return false;
    router::PlaceRequest req;
    req.skip = {node_id};
    req.memory_mib = memory_mib;
    req.tpl = tpl;
    req.pending = [&sent](const std::string& id) -> int64_t { return sent[id]; };
    const store::NodeRecord* to = router::pick_node(*nodes, req);
    if (!to) {
      spdlog::warn("drain: no ready node to move sandbox {} to; it stays for now", s->id);
      return false;
    }
    const auto t0 = std::chrono::steady_clock::now();
    sandbox::Timing t;
    auto moved = sandboxes.move_out(s, [&](const std::string& move_id) -> Result<bool> {
      // The target gives up a minute before this node does, so no answer lost on the way
      // leaves the sandbox on both.
      const int64_t deadline = now_unix_ms() + 4 * 60'000;
      const nlohmann::json body = {{"sandbox_id", s->id}, {"project_id", project}, {"move_id", move_id},
                                   {"from_node", node_id}, {"to_node", to->id}, {"deadline_ms", deadline}};
      auto a = cluster::post_to_node(to->url, secret, "adopt", "/internal/adopt", body.dump(), std::chrono::minutes(5));
      if (a && a->status == 200) return true;
      // No answer, or an error: the store says whether it took it (its record names it).
      if (auto rec = store.get_sandbox(project, s->id); rec && *rec && (*rec)->node_id == to->id) return true;
      return fail(ErrorCode::kNodeUnavailable,
                  "node " + to->id + (a ? " answered " + std::to_string(a->status) + ": " + a->body.substr(0, 300)
                                        : ": " + a.error().message));
    }, t);
    const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
    if (moved) {
      ++sent[to->id];
      spdlog::info("drain: sandbox {} moved to node {} in {} ms", s->id, to->id, ms);
    } else {
      spdlog::warn("drain: sandbox {}: {}", s->id, moved.error().message);
      all = false;
    }
  }
  return all;
}
}  // namespace

int main(int argc, char** argv) {
  // Each module owns its configuration; the flags fill them here.
  sandbox::Config cfg;
  api::Config api_cfg;
  std::string listen_host = "127.0.0.1";
  int listen_port = 7070;
  http::Config http_cfg;
  double idle_timeout_s = 60, head_timeout_s = 15, body_timeout_s = 30;
  std::string shim_path;
  CLI::App app{"b3osd: the b3os sandbox daemon"};
  std::string listen = "127.0.0.1:7070";
  bool quiet_key = false;
  app.add_option("--listen", listen, "address:port to serve the API on")->capture_default_str();
  std::string preview_listen = "127.0.0.1:7080";
  preview::Config preview_cfg;
  app.add_option("--preview-listen", preview_listen, "address:port to serve ports' preview URLs on (docs/ports.md)")
      ->capture_default_str();
  app.add_option("--preview-domain", preview_cfg.domain,
                 "domain of preview URLs: http://{port}-{host_id}.DOMAIN:{listen port}/ (*.localhost needs no DNS)")
      ->capture_default_str();
  int preview_url_port = 0;
  app.add_option("--preview-url-port", preview_url_port,
                 "the port preview URLs name (default: the port of --preview-listen); in a cluster, the port of "
                 "the routers' preview listener (docs/cluster.md)")
      ->envname("B3OS_PREVIEW_URL_PORT")
      ->check(CLI::Range(0, 65535));
  app.add_option("--preview-max-requests", preview_cfg.max_requests,
                 "preview requests handled at once on the node, a thread each (503 above); 7/8 of them may be in "
                 "flight in sandboxes, shared fairly (docs/ports.md)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--preview-max-per-sandbox", preview_cfg.max_per_sandbox,
                 "preview requests of one sandbox in flight at once (429 concurrency_limited above)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--preview-sandbox-floor", preview_cfg.sandbox_floor,
                 "preview requests of a sandbox that other sandboxes' requests can never take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--data-dir", cfg.data_dir, "database and templates")->capture_default_str();
  std::string store_spec, node_id;
  app.add_option("--store", store_spec,
                 "where state lives: empty (DATA_DIR/b3os.db, the default), sqlite:PATH, or a postgres:// URL "
                 "(a cluster's shared store, docs/cluster.md; put a password in ~/.pgpass or PGPASSFILE, not here)")
      ->envname("B3OS_STORE");
  app.add_option("--node-id", node_id, "this node's name in a shared store (default: the host name)");
  std::string cluster_url, cluster_listen, cluster_secret_file;
  app.add_option("--cluster-listen", cluster_listen,
                 "with a shared store: HOST:PORT of the internal listener routers relay requests to, signed with "
                 "the cluster secret (docs/cluster.md); empty: none")
      ->envname("B3OS_CLUSTER_LISTEN");
  app.add_option("--cluster-secret-file", cluster_secret_file,
                 "the cluster secret the internal listener checks (at least 32 bytes, mode 0600)")
      ->envname("B3OS_CLUSTER_SECRET_FILE");
  app.add_option("--cluster-url", cluster_url,
                 "the URL routers reach the internal listener at (default: http(s)://HOST:PORT of --cluster-listen)")
      ->envname("B3OS_CLUSTER_URL");
  std::string cluster_tls_cert, cluster_tls_key, cluster_tls_ca;
  app.add_option("--cluster-tls-cert", cluster_tls_cert,
                 "the internal listener speaks TLS with this certificate chain (PEM; with --cluster-tls-key)")
      ->envname("B3OS_CLUSTER_TLS_CERT");
  app.add_option("--cluster-tls-key", cluster_tls_key, "the key of --cluster-tls-cert (PEM)")
      ->envname("B3OS_CLUSTER_TLS_KEY");
  app.add_option("--cluster-tls-ca", cluster_tls_ca,
                 "the CA other nodes' https:// internal listeners are checked against (PEM)")
      ->envname("B3OS_CLUSTER_TLS_CA");
  int drain_move_after_s = 30;
  int64_t collect_every_s = 600, object_root_grace_s = 3600;
  app.add_option("--object-store-collect-every", collect_every_s,
                 "in a cluster with an object store: seconds between passes of the collectors of roots fetched from "
                 "it and of its own shared roots (docs/cluster.md)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--object-store-grace", object_root_grace_s,
                 "in a cluster with an object store: seconds a root in it (a snapshot's or a template's) stays after "
                 "a node last asked for it, once no record refers to it")
      ->check(CLI::Range(1, 30 * 86400))
      ->capture_default_str();
  app.add_option("--drain-move-after", drain_move_after_s,
                 "in a cluster with an object store: seconds a node drains before it moves its forkable sandboxes to "
                 "other nodes (docs/cluster.md); -1: never moves them")
      ->check(CLI::Range(-1, 86400))
      ->capture_default_str();
  std::string object_store_spec;
  app.add_option("--object-store", object_store_spec,
                 "with a shared store: where snapshots go so that any node can restore them, dir:/PATH (a directory "
                 "every node mounts) or s3://BUCKET[/PREFIX][?endpoint=URL&region=R] (credentials from "
                 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); empty: snapshots stay on the node that took them")
      ->envname("B3OS_OBJECT_STORE");
  app.add_option("--run-dir", cfg.run_dir, "per-sandbox runtime files")->capture_default_str();
  app.add_option("--templates-dir", cfg.templates_dir_override, "template root filesystems (default: DATA_DIR/templates)");
  app.add_option("--agent", cfg.agent_path, "path of b3os-agent (default: beside b3osd)");
  app.add_option("--shim", shim_path, "path of b3os-shim (default: beside b3osd)");
  app.add_option("--runsc", cfg.runtime.runsc, "runsc binary")->capture_default_str();
  app.add_option("--runsc-root", cfg.runtime.root_dir, "runsc state directory")->capture_default_str();
  app.add_option("--platform", cfg.runtime.platform, "gVisor platform")->capture_default_str();
  app.add_flag("--runsc-debug", cfg.runtime.debug, "keep runsc debug logs in each sandbox directory");
  app.add_option("--runsc-control", cfg.runtime.control,
                 "how start, checkpoint and restore reach a sandbox: direct (its control socket), cli (the runsc "
                 "CLI), auto (direct for runsc versions whose messages are known)")
      ->check(CLI::IsMember({"auto", "direct", "cli"}))
      ->capture_default_str();
  app.add_option("--root-overlay", cfg.runtime.root_overlay,
                 "where a sandbox's root filesystem writes go: disk (a filesystem of disk_gib of its own under "
                 "DISKS_DIR, the limit enforced) or memory (the sandbox's memory; disk_gib not enforced)")
      ->check(CLI::IsMember({"disk", "memory"}))
      ->capture_default_str();
  app.add_option("--disks-dir", cfg.runtime.disks.dir, "per-sandbox disk images and mounts (default: DATA_DIR/disks)");
  app.add_option("--mkfs", cfg.runtime.disks.mkfs, "mkfs of the sandboxes' disks (ext4)")->capture_default_str();
  app.add_option("--memory-overhead-mib", cfg.runtime.memory_overhead_mib, "cgroup memory added to memory_mib for the runtime")->capture_default_str();
  app.add_option("--max-upload-bytes", api_cfg.max_upload_bytes, "largest file upload")->capture_default_str();
  app.add_option("--process-output-bytes", api_cfg.process_output_bytes,
                 "output a background process keeps (its ring) when its start does not say; 4096 to 64 MiB")
      ->check(CLI::Range(uint64_t{4096}, sandbox::kMaxProcessOutputBytes))
      ->capture_default_str();
  app.add_option("--max-exec-output", cfg.max_exec_output, "bytes of stdout and of stderr kept per exec")->capture_default_str();
  store::IdempotencyLimits idem_limits;
  app.add_option("--idempotency-max-keys", idem_limits.max_records,
                 "Idempotency-Keys a project holds (24 hours each); a new one past it is 429 quota_exceeded")
      ->check(CLI::Range(int64_t{1}, int64_t{10'000'000}))
      ->capture_default_str();
  app.add_option("--idempotency-max-reply-bytes", idem_limits.max_reply_bytes,
                 "largest answer kept for replay; a larger one runs once and its replay is 409")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{16} << 20))
      ->capture_default_str();
  app.add_option("--idempotency-max-bytes", idem_limits.max_bytes,
                 "answers a project's Idempotency-Keys keep in all (bytes); past it, as for a larger answer")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--memory-overcommit", cfg.memory_overcommit,
                 "the sandboxes' memory_mib together may reach the host's memory (less --memory-reserve-mib) times this")
      ->check(CLI::Range(0.1, 100.0))
      ->capture_default_str();
  app.add_option("--vcpu-overcommit", cfg.vcpu_overcommit, "the sandboxes' vcpu together may reach the host's CPUs times this")
      ->check(CLI::Range(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--disk-overcommit", cfg.disk_overcommit,
                 "the sandboxes' disk_gib together may reach the data disk (less --disk-reserve-gib) times this")
      ->check(CLI::Range(0.1, 1000.0))
      ->capture_default_str();
  app.add_option("--memory-reserve-mib", cfg.runtime.memory_reserve_mib,
                 "host memory no sandbox takes: all sandboxes together are bounded to the rest (their parent cgroup)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--project-max-memory-mib", cfg.project_max_memory_mib,
                 "a project's sandboxes' memory_mib together on this node (0: no quota; 429 quota_exceeded past it)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--project-max-vcpu", cfg.project_max_vcpu, "a project's sandboxes' vcpu together (0: no quota)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--project-max-disk-gib", cfg.project_max_disk_gib, "a project's sandboxes' disk_gib together (0: no quota)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-sandboxes-per-project", cfg.max_sandboxes_per_project)->capture_default_str();
  app.add_option("--max-sandboxes-per-node", cfg.max_sandboxes_per_node)->capture_default_str();
  app.add_option("--snapshots-max-per-project", cfg.snapshots_max_per_project,
                 "snapshots a project may keep (429 quota_exceeded at the limit)")
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  app.add_option("--snapshots-max-gib-per-project", cfg.snapshots_max_gib_per_project,
                 "GiB of snapshot images a project may keep: a snapshot is refused (429 quota_exceeded) once its "
                 "project's images hold this much")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  app.add_option("--ended-retention-hours", cfg.ended_retention_hours,
                 "hours an ended (stopped or failed) sandbox stays listed and readable before its record is forgotten")
      ->check(CLI::Range(0.0001, 1e6))
      ->capture_default_str();
  app.add_option("--ended-max-per-project", cfg.ended_max_per_project,
                 "ended sandboxes a project keeps listed at most (its newest; older records are forgotten)")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_option("--disk-reserve-gib", cfg.disk_reserve_gib,
                 "free space on the data disk kept for running sandboxes: a snapshot, a template build or a "
                 "template upload is refused (503 capacity_unavailable) when no more than this is free (0: none)")
      ->check(CLI::Range(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--warm-pool", cfg.warm_pool_size, "booted base sandboxes kept ready for non-forkable creates (0: none)")->capture_default_str();
  app.add_option("--template-checkpoints", cfg.template_checkpoints,
                 "auto: creates restore the template's checkpoint when that measured faster than a boot; on: always; off: never build one")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--fork-pool", cfg.fork_pool_size, "created, not started containers kept for forks and snapshot restores (0: none)")->capture_default_str();
  app.add_option("--fork-ahead", cfg.fork_ahead,
                 "spares made ahead of each quiet forkable sandbox (checkpointed once, restored, frozen), so that its "
                 "next fork is a claim (0: off)")
      ->check(CLI::Range(0, 8))
      ->capture_default_str();
  app.add_option("--fork-ahead-node", cfg.fork_ahead_node, "fork-ahead spares of all sandboxes together, at most")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  app.add_option("--refill-settle-ms", cfg.refill_settle_ms,
                 "pool refills and fork-ahead spares start only this long after a create, fork or claim ended, so that "
                 "the caller's next request has the CPU (a refill waits at most 1 s for such a pause; 0: at once)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  app.add_option("--fork-ahead-min-free-mib", cfg.fork_ahead_min_free_mib,
                 "no spare is made unless the host's MemAvailable stays above this plus the source's memory; below it "
                 "every spare is dropped")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--idle-freeze-ms", cfg.idle_freeze_ms,
                 "freeze a running sandbox (cgroup freezer) this long after its agent reported nothing but itself alive and no call is in flight; thawed before anything reaches it (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  // Templates users build (docs/templates.md).
  tpl::Config tcfg;
  std::string templates_mode = "on", apt_sources_file, setuid_mode = "allow", publishers = "default";
  std::vector<std::string> image_paths;
  app.add_option("--templates", templates_mode, "on: users build templates (POST /v1/templates); off: only those on disk")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--template-builds", tcfg.max_concurrent_builds, "template builds run at once on this node")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--template-build-timeout", tcfg.build_timeout_s,
                 "a build's time limit in seconds when its spec gives none (at most --template-build-max-timeout)")
      ->check(CLI::Range(10, 86400))
      ->capture_default_str();
  app.add_option("--template-build-max-timeout", tcfg.max_build_timeout_s,
                 "the longest build.timeout_s a spec may ask, in seconds (a longer one is 400)")
      ->check(CLI::Range(10, 86400))
      ->capture_default_str();
  app.add_option("--template-build-disk-gib", tcfg.build_disk_gib, "a build's size limit (its disk), unless its spec asks another")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--template-max-upload-bytes", tcfg.max_upload_bytes, "largest image or context tarball upload")
      ->capture_default_str();
  app.add_option("--template-image-paths", image_paths,
                 "directories on this node whose image tarballs a spec may name (image.path); repeatable; none by default");
  app.add_option("--template-apt-sources", apt_sources_file,
                 "a sources.list written into builds that install packages (default: the parent's own)");
  app.add_option("--template-debian-mirror", tcfg.debian_mirror, "mirror mmdebstrap uses for from: debian:bookworm")
      ->capture_default_str();
  app.add_option("--template-publishers", publishers,
                 "projects whose keys may publish node-wide templates (\"public\": true), comma-separated")
      ->capture_default_str();
  app.add_option("--template-max-per-project", tcfg.max_templates_per_project,
                 "templates a project may hold (429 quota_exceeded above)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--template-max-gib-per-project", tcfg.max_gib_per_project,
                 "GiB the roots of a project's templates may hold on the node: a new build is refused (429 "
                 "quota_exceeded) once they hold this much")
      ->check(CLI::Range(0.001, 1e9))
      ->capture_default_str();
  app.add_option("--template-max-versions", tcfg.max_versions,
                 "builds kept per template, its newest ready one besides; older ones are deleted")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--template-warm-pool-max", tcfg.max_warm_pool, "a template spec's warm_pool at most")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--template-warm-pool-node", tcfg.warm_pool_node_cap,
                 "sandboxes kept warm for all templates' pools together on this node")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--template-setuid", setuid_mode, "setuid and setgid files in imported images: allow, strip or refuse")
      ->check(CLI::IsMember({"allow", "strip", "refuse"}))
      ->capture_default_str();
  mcp::Config mcp_cfg;
  mcp::ToolsConfig mcp_tools_cfg;
  app.add_option("--mcp-allowed-origin", mcp_cfg.allowed_origins,
                 "an Origin (scheme://host[:port]) whose browser pages may call /mcp, besides loopback pages (repeatable)");
  app.add_option("--mcp-max-file-bytes", mcp_tools_cfg.max_file_bytes,
                 "largest file the MCP tools sandbox_write_file and sandbox_read_file move (bytes)")
      ->check(CLI::Range(size_t{1}, size_t{64} << 20))
      ->capture_default_str();
  app.add_option("--rate", api_cfg.rate_per_second, "requests per second per API key")->capture_default_str();
  app.add_option("--burst", api_cfg.rate_burst, "burst of requests per API key")->capture_default_str();
  app.add_option("--max-requests-per-key", api_cfg.max_requests_per_key,
                 "requests of one API key in flight at once (429 concurrency_limited above)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-requests-per-project", api_cfg.max_requests_per_project,
                 "requests of one project in flight at once (429 concurrency_limited above)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-connections", http_cfg.max_connections,
                 "open client connections, idle ones included (at the cap the longest wait for a request is closed)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-requests", http_cfg.max_requests, "requests handled at once on the node (503 above)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  http_cfg.max_streams = 256;
  http_cfg.max_streams_per_tenant = 128;
  app.add_option("--max-streams", http_cfg.max_streams,
                 "long-lived requests (terminals, watches, follows, commands, model calls) open at once on the node, "
                 "apart from --max-requests; 503 above")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--max-streams-per-project", http_cfg.max_streams_per_tenant,
                 "long-lived requests of one project, within --max-streams (429 concurrency_limited above); "
                 "each project can count on 8 whatever the others hold")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--http-idle-timeout", idle_timeout_s, "seconds a connection may wait for its next request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--http-head-timeout", head_timeout_s, "seconds a request head may take once its first byte came")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--http-body-timeout", body_timeout_s,
                 "seconds a request body may go without a byte (408 request_timeout)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--quiet-key", quiet_key, "do not print the admin API key at start");
  std::vector<std::string> model_flags;
  std::string models_file;
  app.add_option("--model", model_flags,
                 "a model for the gateway (repeatable): ID=http://HOST:PORT/v1[,upstream=NAME][,in=USD_PER_M]"
                 "[,out=USD_PER_M][,key-env=VAR][,key-file=PATH][,max-output=N][,timeout=S][,default]");
  app.add_option("--models-file", models_file, "JSON file of models: {\"models\": [{\"id\", \"base_url\", ...}]}");
  std::string network_mode = "on";
  std::string net_uplinks = "10.201.0.0/16";
  std::vector<std::string> dns_upstreams;
  app.add_option("--network", network_mode,
                 "sandbox networks for egress public and allowlist: on (a namespace, firewall, resolver and proxy "
                 "per sandbox), off (only egress deny works; others answer 503)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--net-uplinks", net_uplinks,
                 "IPv4 range for sandboxes' uplinks, a /30 each (its first /30: the resolver and proxy); one per b3osd on a host")
      ->capture_default_str();
  app.add_option("--dns-upstream", dns_upstreams,
                 "resolver b3osd asks for sandboxes, IPv4[:port] (repeatable; default: the host's /etc/resolv.conf)");
  int net_max_flows = 2048;
  app.add_option("--net-max-flows", net_max_flows,
                 "connections (conntrack entries, DNS included) one networked sandbox may hold at once; new ones "
                 "beyond are refused. b3osd raises the host's nf_conntrack_max to hold every sandbox's")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  size_t net_proxy_max = net::EgressProxy::kMaxTotal, net_dns_max = net::Resolver::kMaxPending;
  app.add_option("--net-proxy-max-connections", net_proxy_max,
                 "egress proxy connections on the node, shared fairly: half kept for sandboxes' floors "
                 "(docs/network.md); each costs two sockets and 64 KiB")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  app.add_option("--net-dns-max-pending", net_dns_max,
                 "sandboxes' DNS questions in flight on the node, shared fairly: half kept for sandboxes' floors")
      ->check(CLI::Range(64, 1 << 20))
      ->capture_default_str();
  std::vector<std::string> deny_cidrs;
  app.add_option("--deny-cidr", deny_cidrs,
                 "IPv4 address or CIDR no sandbox may reach, in any egress mode, on top of the built-in private, "
                 "link-local and cloud platform ranges (repeatable)");
  app.add_option("--net-warm-pool", cfg.net_warm_pool_size, "booted base sandboxes with a network kept ready (0: none)")
      ->capture_default_str();
  app.add_option("--net-fork-pool", cfg.net_fork_pool_size,
                 "created containers with a network kept for forks of networked sandboxes (0: none)")
      ->capture_default_str();
  // Operations (docs/operations.md): the configuration file, logs, metrics.
  app.set_version_flag("--version", "b3osd " B3OS_VERSION);
  app.set_config("--config", "/etc/b3os/b3osd.conf",
                 "configuration file: one `flag = value` line per long flag, without its dashes (TOML); read "
                 "when it exists; flags on the command line win over it")
      ->capture_default_str();
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error, not ignored
  bool check_config = false;
  app.add_flag("--check-config", check_config,
               "validate the configuration file and flags, print what is wrong (exit 2) or that it is OK (exit 0), "
               "and start nothing");
  bool print_access = false;
  app.add_flag("--print-access", print_access,
               "print which credentials each route accepts (JSON: docs/api.md's table) and start nothing");
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text (for a person) or json (one object per line: time, level, msg, request_id, thread)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "least severe level logged")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical"}))
      ->capture_default_str();
  app.add_flag("--access-log", http_cfg.access_log,
               "log one line per API request (method, route, status, milliseconds, request id); off by default, "
               "since it grows the log with every request");
  std::string metrics_listen = "127.0.0.1:7071";
  app.add_option("--metrics-listen", metrics_listen,
                 "address:port serving GET /metrics (Prometheus text format, no auth: keep it on loopback or a "
                 "monitoring network), or off")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  if (print_access) {
    std::cout << api::access::to_json() << "\n";
    return 0;
  }

  // Everything below up to the end of the checks reads the configuration only: --check-config
  // stops after it, with nothing started, created or bound.
  auto bad = [](const std::string& message) {
    std::cerr << "b3osd: " << message << "\n";
    return 2;
  };
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) return bad("--listen must be address:port");
  if (auto pc = preview_listen.rfind(':'); pc == std::string::npos || pc == 0) {
    std::cerr << "b3osd: --preview-listen must be address:port\n";
    return 2;
  } else {
    preview_cfg.host = preview_listen.substr(0, pc);
    preview_cfg.port = std::atoi(preview_listen.c_str() + pc + 1);
    if (preview_cfg.port < 1 || preview_cfg.port > 65535) {
      std::cerr << "b3osd: --preview-listen needs a port from 1 to 65535 (it is part of every preview URL)\n";
      return 2;
    }
  }
  if (const int admitted = preview_cfg.max_requests - preview_cfg.max_requests / 8;
      preview_cfg.max_per_sandbox > admitted)
    return bad("--preview-max-per-sandbox " + std::to_string(preview_cfg.max_per_sandbox) + " is above " +
               std::to_string(admitted) + ", the 7/8 of --preview-max-requests " +
               std::to_string(preview_cfg.max_requests) + " that may be in flight in sandboxes");
  if (preview_cfg.sandbox_floor > preview_cfg.max_per_sandbox)
    return bad("--preview-sandbox-floor " + std::to_string(preview_cfg.sandbox_floor) +
               " is above --preview-max-per-sandbox " + std::to_string(preview_cfg.max_per_sandbox));
  if (!http::split_address(listen, listen_host, listen_port)) return bad("--listen must be address:port, port 0-65535");
  std::string metrics_host;
  int metrics_port = 0;
  const bool metrics_on = metrics_listen != "off";
  if (metrics_on && !http::split_address(metrics_listen, metrics_host, metrics_port))
    return bad("--metrics-listen must be address:port (port 0-65535) or off, got \"" + metrics_listen + "\"");
  http_cfg.idle_timeout = ms(idle_timeout_s);
  http_cfg.head_timeout = ms(head_timeout_s);
  http_cfg.body_timeout = ms(body_timeout_s);
  preview_cfg.idle_timeout = http_cfg.idle_timeout;
  preview_cfg.head_timeout = http_cfg.head_timeout;
  preview_cfg.body_timeout = http_cfg.body_timeout;
  if (cfg.agent_path.empty()) cfg.agent_path = beside_self("b3os-agent");
  if (shim_path.empty()) shim_path = beside_self("b3os-shim");
  for (auto* p : {&cfg.agent_path, &shim_path}) {
    if (!fs::exists(*p)) {
      std::cerr << "b3osd: " << *p << " not found (build it, or pass --agent/--shim)\n";
      return check_config ? 2 : 1;
    }
  }
  // The gateway's models and the network's ranges are part of the configuration too.
  std::vector<gateway::ModelConfig> models;
  if (!models_file.empty()) {
    auto m = gateway::load_models_file(models_file);
    if (!m) return bad(m.error().message);
    models = std::move(*m);
  }
  for (auto& f : model_flags) {
    auto m = gateway::parse_model_flag(f);
    if (!m) return bad("--model: " + m.error().message);
    models.push_back(std::move(*m));
  }
  auto checked = gateway::finalize_models(std::move(models));
  if (!checked) return bad(checked.error().message);
  net::HostNetworkConfig ncfg;
  if (network_mode == "on") {
    auto range = net::parse_cidr(net_uplinks);
    if (!range || range->prefix > 28 || range->prefix < 8)
      return bad("--net-uplinks must be an IPv4 network from /8 to /28 (e.g. 10.201.0.0/16), got " + net_uplinks);
    ncfg.layout.uplinks = *range;
    ncfg.layout.max_flows = static_cast<uint32_t>(net_max_flows);
    ncfg.max_sandboxes = cfg.max_sandboxes_per_node;
    ncfg.proxy_max_connections = net_proxy_max;
    ncfg.dns_max_pending = net_dns_max;
    for (auto& d : deny_cidrs) {
      auto c = net::parse_cidr(d);
      if (!c) return bad("--deny-cidr: \"" + d + "\" is not an IPv4 address or a CIDR with its host bits zero");
      net::add_denied_range(*c);
    }
    for (auto& u : dns_upstreams) {
      auto up = net::parse_dns_upstream(u);
      if (!up) return bad("--dns-upstream: " + up.error().message);
      ncfg.dns_upstreams.push_back(*up);
    }
  }
  if (check_config) {
    // CLI11 skips the default file silently when it cannot be read (a 0600 file and a check
    // run by another user): an OK would then be about the defaults, not the file.
    if (auto* c = app.get_config_ptr(); c && c->count() == 0) {
      const std::string path = "/etc/b3os/b3osd.conf";
      if (::access(path.c_str(), F_OK) == 0 && ::access(path.c_str(), R_OK) != 0)
        return bad(path + " exists but cannot be read by this user: run the check as root");
    }
    std::cout << "b3osd: configuration OK" << std::endl;
    return 0;
  }
  if (geteuid() != 0) {
    std::cerr << "b3osd: must run as root (runsc needs it)\n";
    return 1;
  }
  if (cfg.runtime.disks.dir.empty()) cfg.runtime.disks.dir = cfg.data_dir + "/disks";
  if (cfg.runtime.root_overlay == "disk" && ::access("/dev/loop-control", R_OK | W_OK) != 0) {
    std::cerr << "b3osd: --root-overlay disk needs loop devices (/dev/loop-control: " << std::strerror(errno)
              << "; modprobe loop), or pass --root-overlay memory\n";
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  // Blocked before any thread starts, so every thread inherits the mask and only the
  // waiter below sees SIGTERM/SIGINT. Children get a clean mask from spawn().
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigset_t blocked = stop_signals;
  sigaddset(&blocked, SIGCHLD);  // taken by the orphan reaper's thread
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  sys::start_orphan_reaper();
  set_log_format(log_format);
  spdlog::set_level(spdlog::level::from_str(log_level));
  http_cfg.max_connections = connection_cap(http_cfg.max_connections, raise_fd_limit());

  std::error_code ec;
  fs::create_directories(cfg.data_dir, ec);
  fs::create_directories(cfg.templates_dir(), ec);
  if (node_id.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    node_id = host;
  }
  auto store = store::open_store(store_spec, cfg.data_dir, node_id);
  if (!store) {
    std::cerr << "b3osd: " << store.error().message << "\n";
    return 1;
  }
  cfg.node_id = node_id;
  std::unique_ptr<objstore::ObjectStore> object_store;
  if (!object_store_spec.empty()) {
    if (!(*store)->shared()) return bad("--object-store needs a shared store (--store postgres://...): a single node "
                                        "restores its snapshots from its own disk");
    auto os = objstore::open_object_store(object_store_spec);
    if (!os) return bad(os.error().message);
    object_store = std::move(*os);
    cfg.object_store = object_store.get();
    cfg.collect_every_ms = collect_every_s * 1000;
    cfg.object_root_grace_ms = object_root_grace_s * 1000;
  }
  (*store)->set_idempotency_limits(idem_limits);
  if (auto r = (*store)->idempotency_clear_pending(); !r) {
    std::cerr << "b3osd: " << r.error().message << "\n";
    return 1;
  }
  auto key = admin_key(**store, cfg.data_dir);
  if (!key) {
    std::cerr << "b3osd: " << key.error().message << "\n";
    return 1;
  }

  // In a cluster, model calls settled while the shared store is away wait in this journal.
  gateway::Budgets budgets(**store, cfg.data_dir + "/pending-settles.json");
  gateway::Gateway gw(std::move(*checked), budgets);
  for (auto& id : {gw.default_model()})
    if (!id.empty()) spdlog::info("gateway: default model {}", id);
  cfg.default_model = gw.default_model();
  runtime::Runsc runsc(cfg.runtime);
  runtime::ShimProcesses shims(shim_path);
  // The sandbox module and the gateway do not know each other: calls from inside a sandbox
  // reach the gateway through the relay, and the sandbox object reads spend through a hook.
  gateway::Relay* relay_ptr = nullptr;
  sandbox::ModelHooks hooks;
  hooks.incoming = [&relay_ptr](const std::string& id, std::shared_ptr<agentlink::Stream> st) {
    relay_ptr->serve(id, std::move(st));
  };
  hooks.spent_usd = [&gw](const std::string& budget_id) -> std::optional<double> {
    if (auto b = gw.budgets().look(budget_id)) return micros_to_usd(b->spent_micros);
    return std::nullopt;
  };
  // Sandbox networks: set up before any sandbox is recovered (their egress is applied again).
  std::unique_ptr<net::HostNetwork> network;
  if (network_mode == "on") {
    ncfg.run_dir = cfg.run_dir;
    network = std::make_unique<net::HostNetwork>(std::move(ncfg));
    if (auto r = network->start(); !r) {
      std::cerr << "b3osd: sandbox networks: " << r.error().message << "\n";
      return 1;
    }
  }
  // Public ports' URLs name the preview listener's port; their tokens come from a key kept
  // beside the database.
  cfg.preview.domain = preview_cfg.domain;
  cfg.preview.listen_port = preview_url_port > 0 ? preview_url_port : preview_cfg.port;
  cfg.preview.key_file = cfg.data_dir + "/preview.key";
  sandbox::SandboxService sandboxes(cfg, runsc, shims, **store, hooks, network.get());
  gateway::Relay relay(&gw, [&sandboxes](const std::string& id) -> std::optional<gateway::SandboxGrant> {
    auto g = sandboxes.model_grant(id);
    if (!g) return std::nullopt;
    return gateway::SandboxGrant{g->project_id, g->budget_id, g->infer};
  });
  relay_ptr = &relay;  // before recover(): no channel exists until then
  mcp_tools_cfg.limits = api_cfg.limits;
  mcp_cfg.max_body = std::max<size_t>(mcp_cfg.max_body, mcp_tools_cfg.max_file_bytes / 3 * 4 + (1u << 20));

  std::unique_ptr<tpl::TemplateService> templates;
  if (templates_mode == "on") {
    if (tcfg.build_timeout_s > tcfg.max_build_timeout_s) {
      std::cerr << "b3osd: --template-build-timeout " << tcfg.build_timeout_s << " is past --template-build-max-timeout "
                << tcfg.max_build_timeout_s << "\n";
      return 2;
    }
    tcfg.data_dir = cfg.data_dir;
    tcfg.disk_reserve_gib = cfg.disk_reserve_gib;
    tcfg.templates_dir = cfg.templates_dir();
    tcfg.image_paths = image_paths;
    if (!apt_sources_file.empty()) {
      auto text = read_small_file(apt_sources_file, 1 << 20);
      if (!text) {
        std::cerr << "b3osd: --template-apt-sources " << apt_sources_file << ": cannot read it\n";
        return 1;
      }
      tcfg.apt_sources = *text;
    }
    for (size_t i = 0; i <= publishers.size();) {
      size_t j = publishers.find(',', i);
      if (j == std::string::npos) j = publishers.size();
      if (j > i) tcfg.publisher_projects.insert(publishers.substr(i, j - i));
      i = j + 1;
    }
    tcfg.image_limits.setuid = setuid_mode == "refuse" ? image::Setuid::kRefuse
                               : setuid_mode == "strip" ? image::Setuid::kStrip
                                                        : image::Setuid::kAllow;
    tcfg.image_stamp = image_stamp(cfg.runtime.runsc, cfg.agent_path);
    tcfg.shared = (*store)->shared();
    tcfg.node_id = node_id;
    tcfg.object_store = object_store.get();
    templates = std::make_unique<tpl::TemplateService>(tcfg, sandboxes, **store);
    if (auto r = templates->start(); !r) {
      std::cerr << "b3osd: templates: " << r.error().message << "\n";
      return 1;
    }
    sandboxes.set_templates(templates.get());
  }
  mcp::Tools mcp_tools(sandboxes, mcp_tools_cfg, templates.get());
  // Read below, with --cluster-listen; the MCP relay needs it first.
  std::string cluster_secret;
  // This node's state as its last heartbeat read it from the store (b3os nodes drain).
  std::atomic<bool> node_draining{false};
  if (!cluster_listen.empty()) {
    mcp_cfg.peer_relay = make_mcp_relay(**store, sandboxes, node_id, cluster_secret);
    mcp_cfg.create_relay = make_mcp_create_relay(**store, sandboxes, node_id, cluster_secret, node_draining);
  }
  mcp::Server mcp_server(mcp_cfg, mcp_tools);
  // E2B's API on the same listener (docs/e2b.md): sandbox.getHost(port) names the preview host.
  e2b::Config e2b_cfg;
  e2b_cfg.limits = api_cfg.limits;
  e2b_cfg.process_output_bytes = api_cfg.process_output_bytes;
  e2b_cfg.max_upload_bytes = api_cfg.max_upload_bytes;
  e2b_cfg.domain = cfg.preview.domain + ":" + std::to_string(cfg.preview.listen_port);
  e2b::Server e2b_server(e2b_cfg, sandboxes);
  api::Api api(api_cfg, **store, sandboxes, gw, &mcp_server, templates.get(), &e2b_server);
  http::Server server(listen_host, listen_port, http_cfg, [&](http::Exchange& ex) { api.handle(ex); });
  if (auto r = server.listen(); !r) {
    std::cerr << "b3osd: " << r.error().message << "\n";
    return 1;
  }
  // The internal listener of a cluster node: the same API, for requests a router signed with
  // the cluster secret (daemon/cluster/signature.h); anything unsigned is refused before the
  // API sees it.
  std::unique_ptr<http::Server> cluster_server;
  std::unique_ptr<http::TlsFront> cluster_tls_front;  // --cluster-tls-cert: TLS in front of it
  // The preview server, once made (below): the internal listener hands it the preview
  // requests a router relays (X-B3os-Route: preview).
  std::atomic<preview::PreviewServer*> cluster_previews{nullptr};
  if (!cluster_listen.empty()) {
    if (!(*store)->shared()) {
      std::cerr << "b3osd: --cluster-listen needs a shared store (--store postgres://...)\n";
      return 2;
    }
    auto secret = cluster::read_cluster_secret(cluster_secret_file);
    if (cluster_secret_file.empty() || !secret) {
      std::cerr << "b3osd: --cluster-listen needs --cluster-secret-file"
                << (cluster_secret_file.empty() ? std::string() : ": " + secret.error().message) << "\n";
      return 2;
    }
    cluster_secret = *secret;
    // Other nodes' https:// internal listeners (MCP relays, moves) are checked against it.
    router::set_cluster_ca(cluster_tls_ca);
    cluster::set_tls_ca(cluster_tls_ca);
    const size_t colon = cluster_listen.rfind(':');
    int cport = 0;
    if (colon == std::string::npos || colon == 0 || !CLI::detail::lexical_cast(cluster_listen.substr(colon + 1), cport) ||
        cport < 0 || cport > 65535) {
      std::cerr << "b3osd: --cluster-listen " << cluster_listen << ": not HOST:PORT\n";
      return 2;
    }
    if (cluster_tls_cert.empty() != cluster_tls_key.empty()) {
      std::cerr << "b3osd: --cluster-tls-cert and --cluster-tls-key go together\n";
      return 2;
    }
    const bool cluster_tls = !cluster_tls_cert.empty();
    http::Config ccfg = http_cfg;
    ccfg.name = "cluster";
    static cluster::ReplayGuard cluster_replays;  // each signed request served once
    // With TLS, the plain listener is on loopback only and the TLS front takes the address.
    cluster_server = std::make_unique<http::Server>(
        cluster_tls ? std::string("127.0.0.1") : cluster_listen.substr(0, colon), cluster_tls ? 0 : cport, ccfg,
        [&api, &cluster_secret, &cluster_previews, &sandboxes, &e2b_server, &node_id](http::Exchange& ex) {
          // The route is inside what the signature covers ("ROUTE:" before the method).
          const std::string route(ex.header(cluster::kRouteHeader));
          const std::string method = (route.empty() ? "" : route + ":") + std::string(ex.method());
          auto refuse = [&ex](const Error& e) {
            auto r = api::error_reply(e);
            ex.respond(r.status, "application/json", api::dump_json(r.body), r.headers);
          };
          if (auto v = cluster::verify_request(
                  cluster_secret, method, ex.target(), [&ex](std::string_view n) { return ex.header(n); }, now_unix_ms(),
                  &cluster_replays);
              !v)
            return refuse(v.error());
          // A body the signature covers by its digest is read whole and checked before
          // anything acts on it: a byte changed on the way is refused, never half-applied.
          // Only a router holding it whole signs one (at most a create's spec or an MCP call).
          const std::string_view digest = ex.header(cluster::kBodyHeader);
          std::optional<http::HeldBodyExchange> held;
          if (digest != cluster::kUnsignedBody) {
            auto body = ex.read_body(kMaxSignedBody);
            if (!body) return refuse(body.error());
            if (cluster::sha256_hex(*body) != digest)
              return refuse({ErrorCode::kUnauthorized, "the body is not the one the cluster signature covers", 0});
            held.emplace(ex, std::move(*body));
          }
          http::Exchange& x = held ? static_cast<http::Exchange&>(*held) : ex;
          if (route == "mcp-call") return api.handle(x, true);
          if (route == "adopt") return adopt_moved(x, sandboxes, node_id);
          if (route == "e2b-signer") return e2b_signer(x, e2b_server);
          if (!route.empty() && route != "preview")
            return refuse({ErrorCode::kInvalidRequest, "unknown cluster route \"" + route.substr(0, 40) + "\"", 0});
          if (route == "preview") {
            if (auto* pv = cluster_previews.load()) return pv->handle(x);
            return refuse({ErrorCode::kNodeUnavailable, "this node is starting; retry shortly", 0});
          }
          api.handle(x);
        });
    if (auto r = cluster_server->listen(); !r) {
      std::cerr << "b3osd: --cluster-listen: " << r.error().message << "\n";
      return 1;
    }
    int public_port = cluster_server->port();
    if (cluster_tls) {
      auto front = http::TlsFront::start(cluster_listen.substr(0, colon), cport, cluster_tls_cert, cluster_tls_key,
                                         cluster_server->port(), 4096);
      if (!front) {
        std::cerr << "b3osd: --cluster-tls-cert: " << front.error().message << "\n";
        return 1;
      }
      cluster_tls_front = std::move(*front);
      public_port = cluster_tls_front->port();
    }
    if (cluster_url.empty())
      cluster_url = std::string(cluster_tls ? "https://" : "http://") + cluster_listen.substr(0, colon) + ":" +
                    std::to_string(public_port);
    std::thread([&] { cluster_server->run(); }).detach();
  }
  // GET /metrics on a listener of its own, without auth (docs/operations.md, "Metrics").
  register_node_metrics(sandboxes, gw);
  std::unique_ptr<http::Server> metrics_server;
  if (metrics_on) {
    auto m = http::listen_metrics(metrics_listen, http_cfg);
    if (!m) {
      std::cerr << "b3osd: the metrics listener (--metrics-listen " << metrics_listen << "): " << m.error().message << "\n";
      return 1;
    }
    metrics_server = std::move(*m);
  }
  // A node's place in a cluster (a shared store only): its load is what the registry holds.
  cluster::Membership membership(
      **store, cluster::MembershipConfig{cluster_url},
      [&sandboxes] { return node_load(sandboxes); },
      [&sandboxes] {
        // Marked down: its sandboxes are failed in the store. Exit non-zero (the service
        // manager starts it again): the restart reattaches none and sweeps their containers.
        sandboxes.stop();
        std::_Exit(75);
      });
  // Draining (b3os nodes drain): once the node has drained for --drain-move-after seconds
  // (sandboxes about to end get to end here, and a drain undone at once moves nothing), the
  // sandboxes whose owners allowed it move to other nodes, one pass at a time on a thread of
  // its own; a pass that left some waits 30 s to try again.
  std::atomic<bool> mover_busy{false};
  std::atomic<int64_t> next_move_ms{0};
  int64_t draining_since_ms = -1;  // the heartbeat thread's alone
  const bool moves = object_store && !cluster_secret.empty() && drain_move_after_s >= 0;
  membership.set_on_state([&](const std::string& state) {
    node_draining = state == "draining";
    if (!moves) return;
    if (state != "draining") {
      draining_since_ms = -1;
      return;
    }
    if (draining_since_ms < 0) draining_since_ms = steady_ms();
    if (steady_ms() - draining_since_ms < drain_move_after_s * 1000LL || !sandboxes.ready() ||
        steady_ms() < next_move_ms.load() || mover_busy.exchange(true))
      return;
    std::thread([&] {
      const bool all = move_sandboxes_out(sandboxes, **store, node_id, cluster_secret);
      next_move_ms = steady_ms() + (all ? 2'000 : 30'000);
      mover_busy = false;
    }).detach();
  });
  preview::PreviewServer previews(preview_cfg, sandboxes);
  if (auto r = previews.listen(); !r) {
    std::cerr << "b3osd: " << r.error().message << "\n";
    return 1;
  }
  std::thread([&] { previews.run(); }).detach();
  cluster_previews = &previews;
  if (metrics_server) std::thread([&] { metrics_server->run(); }).detach();
  // The API answers from the first moment (503 with Retry-After until the sandboxes of a
  // previous b3osd are reattached), so a restart never looks like a dead node.
  std::thread([&] {
    // In a cluster the node registers first, so that routers reach its internal listener
    // where it is now (its address may have changed with the restart); while it reattaches,
    // it answers 503 with Retry-After there as here. From then on it heartbeats its load.
    if (auto r = membership.start(); !r) {
      spdlog::critical("b3osd: joining the cluster: {}", r.error().message);
      std::_Exit(1);
    }
    if (auto r = sandboxes.recover(); !r) {
      spdlog::critical("b3osd: recovering sandboxes: {}", r.error().message);
      std::_Exit(1);
    }
    if (templates) templates->start_workers();
    spdlog::info("b3osd: ready");
    ::sd_notify(0, "READY=1\nSTATUS=serving");  // Type=notify (b3osd.service); a no-op elsewhere
  }).detach();

  // SIGTERM/SIGINT end the process; sandboxes keep running and a restart reattaches them.
  std::thread([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    spdlog::info("b3osd: signal {}, stopping (sandboxes keep running)", sig);
    ::sd_notify(0, "STOPPING=1");
    sandboxes.stop();
    std::_Exit(0);
  }).detach();

  // The banner a person reads; with --log-format json it goes out as log lines, so that every
  // line of b3osd's output is one JSON object.
  std::vector<std::string> banner = {"b3osd listening on http://" + listen_host + ":" + std::to_string(server.port())};
  if (metrics_server)
    banner.push_back("metrics on http://" + metrics_host + ":" + std::to_string(metrics_server->port()) + "/metrics");
  if (!quiet_key) banner.push_back("API key (project default): " + *key);
  banner.push_back("  export B3OS_API_URL=http://" + listen_host + ":" + std::to_string(server.port()) +
                   " B3OS_API_KEY=$(cat " + cfg.data_dir + "/admin.key)");
  for (auto& line : banner) {
    if (log_format == "json")
      spdlog::info("{}", line);
    else
      std::cout << line << std::endl;
  }
  server.run();
  return 0;
}
