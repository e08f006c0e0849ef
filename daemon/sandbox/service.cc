// SandboxService: lifecycle (create, get, list, delete), limits, timeouts and recovery.
#include "daemon/sandbox/service_internal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <set>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "shim/fd_passing.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace detail;
namespace fs = std::filesystem;
void compute_usage(json& doc, int64_t now_ms) {
  const json& in = doc["_b3os"];
  int64_t start = in.value("started_ms", now_ms);
  int64_t end = in.contains("stopped_ms") && !in["stopped_ms"].is_null() ? in["stopped_ms"].get<int64_t>() : now_ms;
  int64_t paused = in.value("paused_total_ms", int64_t{0});
  if (in.contains("paused_since_ms") && in["paused_since_ms"].is_number()) paused += end - in["paused_since_ms"].get<int64_t>();
  // vCPU is metered while running only; memory is held, and metered, while paused too.
  int64_t alive = std::max<int64_t>(0, end - start);
  int64_t ran = std::max<int64_t>(0, alive - paused);
  int64_t vcpu = doc.value("vcpu", 1);
  int64_t mib = doc.value("memory_mib", 512);
  doc["usage"] = {{"vcpu_ms", vcpu * ran}, {"gib_ms", alive * mib / 1024}};
}

SandboxService::SandboxService(config::Config cfg, store::Store& store, gateway::Gateway* gw)
    : cfg_(std::move(cfg)), store_(store), gw_(gw), runsc_(cfg_.runtime) {}

SandboxService::~SandboxService() { stop(); }

void SandboxService::stop() {
  {
    std::lock_guard lk(reaper_mu_);
    stopping_ = true;
  }
  reaper_cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
  {
    std::lock_guard lk(pool_mu_);
    stopping_pool_ = true;
  }
  pool_cv_.notify_all();
  if (pool_thread_.joinable()) pool_thread_.join();
  // Pool sandboxes belong to no one: remove them (a restart would sweep them anyway).
  std::deque<std::shared_ptr<Sandbox>> pooled;
  std::deque<Precreated> created;
  {
    std::lock_guard lk(pool_mu_);
    pooled.swap(warm_);
    created.swap(precreated_);
  }
  for (auto& s : pooled) discard(*s);
  for (auto& pc : created) discard(*pc.sandbox);
}

std::string SandboxService::template_rootfs(const std::string& name) const {
  std::string n = name.rfind("tpl_", 0) == 0 ? name.substr(4) : name;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return {};
  return cfg_.templates_dir() + "/" + n;
}

json SandboxService::templates() const {
  json data = json::array();
  std::map<std::string, std::string> names = kTemplateDescriptions;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(cfg_.templates_dir(), ec)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && fs::exists(e.path() / ".b3os-ready") && !names.count(n)) names[n] = "";
  }
  for (auto& [n, desc] : names) {
    bool ready = fs::exists(cfg_.templates_dir() + "/" + n + "/.b3os-ready");
    json item = {{"id", "tpl_" + n}, {"object", "template"}, {"name", n}, {"status", ready ? "ready" : "missing"},
                 {"description", desc}};
    // b3os extension: the template's checkpoint, and whether creates restore it or boot.
    json ck = {{"status", cfg_.template_checkpoints == "off" ? "off" : "building"}};
    {
      std::lock_guard lk(pool_mu_);
      if (auto it = images_.find(n); it != images_.end()) {
        const TemplateImage& img = it->second;
        ck = {{"status", img.dir.empty() ? "failed" : "ready"},
              {"boot_ms", img.boot_ms},
              {"restore_ms", img.restore_ms},
              {"creates", img.use ? "restore" : "boot"}};
        if (!img.error.empty()) ck["error"] = img.error;
      }
    }
    if (!ready) ck = {{"status", "missing"}};
    item["checkpoint"] = ck;
    data.push_back(item);
  }
  return {{"object", "list"}, {"data", data}, {"next_cursor", nullptr}};
}

// ---- views and persistence ----

json SandboxService::view(const Sandbox& s) const {
  json d = s.doc;
  const int64_t now = now_unix_ms();
  if (d["status"] == "running" || d["status"] == "paused") {
    d["expires_at"] = format_rfc3339(s.last_activity_ms.load() + int64_t(d.value("timeout_s", 300)) * 1000);
  }
  compute_usage(d, now);
  // What the grant's budget has spent (shared by a sandbox, its forks and its snapshots).
  const std::string budget = d["_b3os"].value("budget_id", "");
  if (!budget.empty() && gw_) {
    if (auto b = gw_->budgets().look(budget)) d["api"]["spent_usd"] = micros_to_usd(b->spent_micros);
    d["api"]["budget_id"] = budget;  // `b3os keys spend ID` shows its ledger
  } else if (d.contains("api") && d["api"].is_object()) {
    d["api"]["spent_usd"] = 0;
  }
  d.erase("_b3os");
  return d;
}

Result<void> SandboxService::persist(Sandbox& s) {
  json d = s.doc;
  if (d["status"] == "running" || d["status"] == "paused") {
    d["expires_at"] = format_rfc3339(s.last_activity_ms.load() + int64_t(d.value("timeout_s", 300)) * 1000);
    d["_b3os"]["last_activity_ms"] = s.last_activity_ms.load();
  }
  s.persisted_activity_ms = s.last_activity_ms.load();
  return store_.put_sandbox({s.id, s.project_id, d["status"].get<std::string>(), d, s.secrets});
}

void SandboxService::touch(Sandbox& s) {
  // Written through at once (a small WAL write, well under a millisecond) so that a restart
  // never moves expires_at backwards and stops a sandbox that was in use.
  s.last_activity_ms = now_unix_ms();
  std::lock_guard lk(s.mu);
  if (!s.finished && s.last_activity_ms.load() != s.persisted_activity_ms) {
    if (auto r = persist(s); !r) spdlog::warn("sandbox {}: {}", s.id, r.error().message);
  }
}

std::shared_ptr<SandboxService::Sandbox> SandboxService::find_live(const Principal& p, const std::string& id) {
  std::lock_guard lk(mu_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second->project_id != p.project_id) return nullptr;
  return it->second;
}

Result<std::shared_ptr<SandboxService::Sandbox>> SandboxService::running(const Principal& p, const std::string& id) {
  if (auto s = find_live(p, id)) return s;
  auto row = store_.get_sandbox(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSandboxNotFound, "no sandbox " + id + " in this project");
  return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is " + (*row)->status + ", not running");
}

// ---- lifecycle ----

Result<pid_t> SandboxService::start_shim(const std::string& dir, int fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail(errno_error(ErrorCode::kInternal, "pipe", errno));
  UniqueFd rd(p[0]), wr(p[1]);
  auto pid = sys::spawn({{cfg_.shim_path, dir + "/shim.sock"}, {-1, wr.get(), -1, fd}, true});
  if (!pid) return fail(pid.error().wrap("starting b3os-shim"));
  wr.reset();
  pollfd pfd{rd.get(), POLLIN, 0};
  char buf[16] = {};
  if (::poll(&pfd, 1, 5000) != 1 || ::read(rd.get(), buf, sizeof buf - 1) <= 0 || std::string(buf) != "ready\n") {
    ::kill(*pid, SIGKILL);
    (void)sys::wait_exit(*pid);
    return fail(ErrorCode::kInternal, "b3os-shim did not start (" + cfg_.shim_path + ")");
  }
  std::ofstream(dir + "/shim.pid") << *pid << "\n";
  return *pid;
}

void SandboxService::release(const std::string& id, pid_t shim_pid) {
  if (auto r = runsc_.destroy(id); !r) spdlog::warn("sandbox {}: {}", id, r.error().message);
  const std::string dir = cfg_.sandboxes_dir() + "/" + id;
  if (shim_pid <= 0) shim_pid = read_pid_file(dir + "/shim.pid");
  kill_and_wait(shim_pid);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) spdlog::warn("sandbox {}: removing {}: {}", id, dir, ec.message());
}

Result<SandboxService::Precreated> SandboxService::precreate(const Launch& l, Timing& t, Stopwatch& sw) {
  Precreated pc;
  pc.sandbox = std::make_shared<Sandbox>();
  auto& s = pc.sandbox;
  s->id = l.id;
  s->project_id = l.project_id;
  const std::string dir = cfg_.sandboxes_dir() + "/" + s->id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);

  // From here every failure must undo what was done: no container, shim or file may stay.
  auto undo = [&](Error e) -> Result<Precreated> {
    discard(*s);
    return fail(std::move(e));
  };

  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
    return undo(errno_error(ErrorCode::kInternal, "socketpair", errno));
  UniqueFd agent_end(sp[1]);
  pc.daemon_end.reset(sp[0]);
  auto shim = start_shim(dir, pc.daemon_end.get());
  if (!shim) return undo(shim.error());
  s->shim_pid = *shim;
  t.lap("prepare", sw);

  runtime::ContainerSpec cs;
  cs.id = s->id;
  cs.bundle_dir = dir;
  cs.rootfs = l.rootfs;
  cs.agent_path = cfg_.agent_path;
  cs.hostname = "sbx-" + s->id.substr(4, 12);
  cs.vcpu = l.vcpu;
  cs.memory_mib = l.memory_mib;
  cs.log_path = dir + "/sandbox.log";
  s->hostname = cs.hostname;
  if (auto r = runsc_.create(cs, agent_end.get()); !r) return undo(r.error());
  t.lap("create", sw);
  return pc;
}

Result<std::shared_ptr<SandboxService::Sandbox>> SandboxService::launch(const Launch& request, Timing& t,
                                                                         Stopwatch& sw) {
  std::optional<Busy> busy;
  if (request.from_pool) busy.emplace(*this);
  Launch l = request;
  if (l.image.empty()) l.image = template_image_for(l);
  // A launch of the base template's shape can take a container created ahead of time: any
  // restore (the image fixes the memory), or a boot with the pool's default memory size.
  std::optional<Precreated> pc;
  if (l.from_pool && l.rootfs == cfg_.templates_dir() + "/base/rootfs" &&
      (!l.image.empty() || l.memory_mib == Launch{}.memory_mib)) {
    std::lock_guard lk(pool_mu_);
    if (!precreated_.empty()) {
      pc = std::move(precreated_.front());
      precreated_.pop_front();
    }
  }
  const bool from_pool = pc.has_value();
  if (from_pool) {
    pool_cv_.notify_all();  // refill
    runsc_.set_frozen(pc->sandbox->id, false);
    pc->sandbox->project_id = l.project_id;
    // The pool created it with the default memory limit; a restore fills the cgroup with the
    // image's memory at once, so the sandbox's own limit is set before, not after.
    if (auto r = runsc_.limit_memory(pc->sandbox->id, l.memory_mib); !r) {
      discard(*pc->sandbox);
      return fail(r.error());
    }
    t.lap("pooled_container", sw);
  } else {
    auto made = precreate(l, t, sw);
    if (!made) return fail(made.error());
    pc = std::move(*made);
  }
  auto s = pc->sandbox;
  auto undo = [&](Error e) -> Result<std::shared_ptr<Sandbox>> {
    discard(*s);
    return fail(std::move(e));
  };
  if (l.image.empty()) {
    if (auto r = runsc_.start(s->id); !r) return undo(r.error());
    t.lap("start", sw);
  } else {
    if (auto r = runsc_.restore(s->id, cfg_.sandboxes_dir() + "/" + s->id, l.image); !r) return undo(r.error());
    t.lap("restore", sw);
  }

  const std::string id = s->id;
  s->channel = start_channel(std::move(pc->daemon_end), id);
  if (l.image.empty()) {
    if (auto h = s->channel->wait_hello(kHelloTimeout); !h) return undo(h.error().wrap("starting the agent"));
  } else {
    // A restored agent is mid-conversation with the source's daemon; start afresh.
    if (auto r = s->channel->resync(kControlTimeout); !r) return undo(r.error().wrap("reaching the restored agent"));
  }
  json identity = {{"sandbox_id", id},
                   {"hostname", s->hostname},
                   {"machine_id", to_hex(random_bytes(16))},
                   {"seed", to_hex(random_bytes(32))},
                   {"time_ns", now_unix_ms() * 1000000}};
  if (auto r = s->channel->send_identity(identity, kControlTimeout); !r) return undo(r.error());
  t.lap("agent", sw);
  if (auto r = runsc_.limit_cpu(id, l.vcpu); !r) return undo(r.error());
  t.lap("limits", sw);
  return s;
}

Result<void> SandboxService::reserve(const std::string& project_id, int n) {
  std::lock_guard lk(mu_);
  int mine = starting_by_project_[project_id];
  for (auto& [id, s] : live_) mine += s->project_id == project_id;
  if (mine + n > cfg_.max_sandboxes_per_project)
    return fail(ErrorCode::kConcurrencyLimited, "this project has " + std::to_string(mine) + " sandboxes running and " +
                                                    std::to_string(n) + " more would pass its limit of " +
                                                    std::to_string(cfg_.max_sandboxes_per_project) +
                                                    "; delete some first");
  int pooled;
  {
    std::lock_guard pl(pool_mu_);
    pooled = static_cast<int>(warm_.size() + precreated_.size());
  }
  if (static_cast<int>(live_.size()) + starting_ + pooled + n > cfg_.max_sandboxes_per_node)
    return fail(ErrorCode::kCapacityUnavailable, "this node is at its limit of " +
                                                     std::to_string(cfg_.max_sandboxes_per_node) + " sandboxes");
  starting_ += n;
  starting_by_project_[project_id] += n;
  return {};
}

void SandboxService::unreserve(const std::string& project_id, int n) {
  std::lock_guard lk(mu_);
  starting_ -= n;
  if ((starting_by_project_[project_id] -= n) <= 0) starting_by_project_.erase(project_id);
}

void SandboxService::discard(Sandbox& s) {
  if (s.channel) s.channel->shutdown();
  release(s.id, s.shim_pid);
}

Result<json> SandboxService::create(const Principal& p, const SandboxSpec& spec, Timing& t) {
  Stopwatch sw;
  if (auto r = check_supported(spec); !r) return fail(r.error());
  if (spec.snapshot) return create_from_snapshot(p, spec, t);
  const std::string tdir = template_rootfs(spec.template_name);
  if (tdir.empty() || (!fs::exists(tdir) && !kTemplateDescriptions.count(fs::path(tdir).filename().string())))
    return fail(ErrorCode::kTemplateNotFound, "no template \"" + spec.template_name + "\" (see GET /v1/templates)");
  if (!fs::exists(tdir + "/.b3os-ready"))
    return fail(ErrorCode::kProductUnavailable, "template \"" + spec.template_name +
                                                    "\" is not built on this node; run templates/" +
                                                    fs::path(tdir).filename().string() + "/build.sh " + tdir);
  const std::string tname = fs::path(tdir).filename().string();
  return create_launched(p, spec, tname, tdir + "/rootfs", "", t, sw);
}

Result<json> SandboxService::create_launched(const Principal& p, const SandboxSpec& spec, const std::string& tname,
                                             const std::string& rootfs, const std::string& snapshot_id, Timing& t,
                                             Stopwatch& sw, const std::string& inherited_budget) {
  auto budget = grant_budget(p, spec, inherited_budget);
  if (!budget) return fail(budget.error());
  if (auto r = reserve(p.project_id, 1); !r) return fail(r.error());
  ScopeExit unreserve_later([&] { unreserve(p.project_id, 1); });
  t.lap("validate", sw);

  std::shared_ptr<Sandbox> s = snapshot_id.empty() ? claim_warm(spec, tname) : nullptr;
  if (s) {
    s->project_id = p.project_id;
    t.lap("claim", sw);
    auto limited = runsc_.limit_cpu(s->id, spec.vcpu);
    if (limited) limited = runsc_.limit_memory(s->id, spec.memory_mib);
    if (!limited) {
      discard(*s);
      return fail(limited.error());
    }
    t.lap("limits", sw);
  } else {
    Launch l;
    l.id = new_id("sbx");
    l.project_id = p.project_id;
    l.rootfs = rootfs;
    if (!snapshot_id.empty()) l.image = cfg_.snapshots_dir() + "/" + snapshot_id;
    l.vcpu = spec.vcpu;
    l.memory_mib = spec.memory_mib;
    auto launched = launch(l, t, sw);
    if (!launched) return fail(launched.error());
    s = *launched;
  }
  const std::string& id = s->id;
  auto undo = [&](Error e) -> Result<json> {
    discard(*s);
    return fail(std::move(e));
  };
  const int64_t now = now_unix_ms();
  s->last_activity_ms = now;
  s->secrets = map_to_json(spec.secrets);
  json secret_names = json::array();
  for (auto& [k, v] : spec.secrets) secret_names.push_back(k);
  json ports = json::array();
  for (auto& pt : spec.ports) ports.push_back({{"port", pt.port}, {"public", pt.is_public}, {"url", nullptr}});
  s->doc = {
      {"id", id},
      {"object", "sandbox"},
      {"status", "running"},
      {"host_id", "sbx-" + id.substr(4)},
      {"template", {{"id", "tpl_" + tname}, {"name", tname}}},
      {"snapshot", snapshot_id.empty() ? json(nullptr) : json(snapshot_id)},
      {"vcpu", spec.vcpu},
      {"memory_mib", spec.memory_mib},
      {"disk_gib", spec.disk_gib},
      {"timeout_s", spec.timeout_s},
      {"on_idle", spec.on_idle},
      {"expires_at", format_rfc3339(now + int64_t(spec.timeout_s) * 1000)},
      {"env", map_to_json(spec.env)},
      {"secret_names", secret_names},
      {"ports", ports},
      {"api", {{"scopes", spec.api.scopes}, {"spend_cap_usd", spec.api.spend_cap_usd ? json(*spec.api.spend_cap_usd) : json(nullptr)}, {"connections", json::array()}}},
      {"egress", {{"mode", spec.egress.mode}, {"allow", spec.egress.allow}}},
      {"forkable", spec.forkable},
      {"created_at", format_rfc3339(now)},
      {"started_at", format_rfc3339(now)},
      {"paused_at", nullptr},
      {"stopped_at", nullptr},
      {"stop_reason", nullptr},
      {"stop_message", nullptr},
      {"metadata", map_to_json(spec.metadata)},
      {"_b3os", {{"started_ms", now}, {"stopped_ms", nullptr}, {"paused_total_ms", 0}, {"hostname", s->hostname},
                 {"rootfs", rootfs}, {"budget_id", *budget}}},
  };
  if (auto r = persist(*s); !r) return undo(r.error());
  {
    std::lock_guard lk(mu_);
    live_[id] = s;
  }
  t.lap("store", sw);
  spdlog::info("sandbox {}: running (project {}, template {})", id, p.project_id, tname);
  return view(*s);
}

Result<json> SandboxService::get(const Principal& p, const std::string& id) {
  if (auto s = find_live(p, id)) {
    std::lock_guard lk(s->mu);
    return view(*s);
  }
  auto row = store_.get_sandbox(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSandboxNotFound, "no sandbox " + id + " in this project");
  json d = (*row)->doc;
  compute_usage(d, now_unix_ms());
  d.erase("_b3os");
  return d;
}

Result<json> SandboxService::list(const Principal& p, store::SandboxQuery q) {
  q.project_id = p.project_id;
  auto rows = store_.list_sandboxes(q);
  if (!rows) return fail(rows.error());
  json data = json::array();
  const bool more = static_cast<int>(rows->size()) > q.limit;
  if (more) rows->pop_back();
  for (auto& r : *rows) {
    if (auto s = find_live(p, r.id)) {
      std::lock_guard lk(s->mu);
      data.push_back(view(*s));
      continue;
    }
    json d = r.doc;
    compute_usage(d, now_unix_ms());
    d.erase("_b3os");
    data.push_back(std::move(d));
  }
  return json{{"object", "list"}, {"data", data}, {"next_cursor", more ? json(rows->back().id) : json(nullptr)}};
}

void SandboxService::finish(const std::shared_ptr<Sandbox>& s, const std::string& status, const std::string& reason,
                            const std::string& message) {
  {
    std::lock_guard lk(s->mu);
    if (s->finished) return;
    s->finished = true;
    const int64_t now = now_unix_ms();
    s->doc["status"] = status;
    s->doc["stop_reason"] = reason;
    s->doc["stop_message"] = message.empty() ? json(nullptr) : json(message);
    s->doc["stopped_at"] = format_rfc3339(now);
    s->doc["expires_at"] = format_rfc3339(now);
    s->doc["_b3os"]["stopped_ms"] = now;
    if (auto r = persist(*s); !r) spdlog::error("sandbox {}: {}", s->id, r.error().message);
  }
  {
    std::lock_guard lk(mu_);
    live_.erase(s->id);
  }
  if (s->channel) s->channel->shutdown();
  release(s->id, s->shim_pid);
  spdlog::info("sandbox {}: {} ({}){}", s->id, status, reason, message.empty() ? "" : ": " + message);
}

Result<json> SandboxService::remove(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  if (auto s = find_live(p, id)) {
    finish(s, "stopped", "deleted", "");
    t.lap("stop", sw);
    std::lock_guard lk(s->mu);
    return view(*s);
  }
  auto r = get(p, id);  // already stopped: answer with the record as it is
  t.lap("lookup", sw);
  return r;
}

std::string SandboxService::diagnose_exit(const std::string& id) {
  // A cgroup that hit its memory limit is the common cause; say so plainly.
  auto number = [](const std::string& path) -> int64_t {
    auto text = read_small_file(path, 64);
    return text ? std::strtoll(text->c_str(), nullptr, 10) : 0;
  };
  const int64_t u = number("/sys/fs/cgroup/memory/b3os/" + id + "/memory.max_usage_in_bytes");
  const int64_t l = number("/sys/fs/cgroup/memory/b3os/" + id + "/memory.limit_in_bytes");
  if (l > 0 && u >= l - (4 << 20)) {
    return "the sandbox used all of its memory (limit " + std::to_string(l >> 20) +
           " MiB including the runtime) and was stopped; create it with a larger memory_mib";
  }
  return "the sandbox's runtime exited unexpectedly";
}

void SandboxService::on_channel_closed(const std::string& id, const std::string& why) {
  std::shared_ptr<Sandbox> s;
  {
    std::lock_guard lk(mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    s = it->second;
  }
  std::string msg = diagnose_exit(id);
  spdlog::warn("sandbox {}: agent channel closed ({}): {}", id, why, msg);
  finish(s, "failed", "failed", msg);
}

void SandboxService::reaper_loop() {
  std::unique_lock lk(reaper_mu_);
  while (!stopping_) {
    reaper_cv_.wait_for(lk, 500ms);
    if (stopping_) break;
    lk.unlock();
    std::vector<std::shared_ptr<Sandbox>> all;
    {
      std::lock_guard g(mu_);
      for (auto& [id, s] : live_) all.push_back(s);
    }
    const int64_t now = now_unix_ms();
    for (auto& s : all) {
      // The document is only ever read under the sandbox's lock: other threads change it.
      std::unique_lock g(s->mu);
      int64_t timeout_ms = int64_t(s->doc.value("timeout_s", 300)) * 1000;
      if (s->active_ops.load() > 0 || now < s->last_activity_ms.load() + timeout_ms) continue;
      if (s->finished || s->doc["status"] == "paused") continue;  // a paused sandbox does not expire
      if (s->doc.value("on_idle", "stop") == "pause") {
        if (auto r = pause_locked(*s, "idle"); !r) spdlog::warn("sandbox {}: idle pause: {}", s->id, r.error().message);
        continue;
      }
      g.unlock();
      finish(s, "stopped", "timeout", "no API activity for timeout_s (" + std::to_string(timeout_ms / 1000) + " s)");
    }
    lk.lock();
  }
}

Result<void> SandboxService::recover() {
  std::error_code ec;
  fs::create_directories(cfg_.sandboxes_dir(), ec);
  fs::create_directories(cfg_.runtime.root_dir, ec);
  // No fork is running yet: any fork image here was left by a b3osd that died mid-fork (the
  // directory itself stays: it may be a mount point or a link an operator made). RUN_DIR/images
  // held them before.
  fs::create_directories(cfg_.fork_images_dir(), ec);
  for (const auto& dir : {cfg_.fork_images_dir(), cfg_.run_dir + "/images"}) {
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      if (rm) spdlog::warn("removing the leftover fork image {}: {}", it->path().string(), rm.message());
    }
    ec.clear();
  }
  // Decides (and logs) once how runsc is driven, before any request waits on it.
  runsc_.sweep_state_temporaries();
  (void)runsc_.direct_control();
  auto rows = store_.active_sandboxes();
  if (!rows) return fail(rows.error());
  for (auto& row : *rows) {
    auto s = std::make_shared<Sandbox>();
    s->id = row.id;
    s->project_id = row.project_id;
    s->doc = row.doc;
    s->secrets = row.secrets;
    s->last_activity_ms = row.doc["_b3os"].value("last_activity_ms", now_unix_ms());
    s->persisted_activity_ms = s->last_activity_ms;
    const std::string dir = cfg_.sandboxes_dir() + "/" + row.id;
    s->shim_pid = read_pid_file(dir + "/shim.pid");
    std::string why;
    auto st = runsc_.state(row.id);
    const bool paused = st && *st == runtime::ContainerState::kPaused;
    if (!st || (*st != runtime::ContainerState::kRunning && !paused)) {
      why = "its container was gone when b3osd restarted";
    } else if (paused && !runsc_.resume(row.id)) {
      why = "its paused container could not be thawed after b3osd restarted";
    } else if (auto fd = receive_fd(dir + "/shim.sock"); !fd) {
      why = "its agent channel could not be recovered after b3osd restarted (" + fd.error().message + ")";
    } else {
      const std::string id = row.id;
      s->channel = start_channel(std::move(*fd), id);
      if (auto r = s->channel->resync(3s); !r) {
        why = "its agent did not answer after b3osd restarted (" + r.error().message + ")";
      } else if (paused && !runsc_.pause(row.id)) {
        why = "its container could not be paused again after b3osd restarted";
      }
    }
    if (why.empty()) {
      // A b3osd that died mid-fork may have left the limit raised for the fork's image.
      if (auto r = runsc_.limit_memory(row.id, row.doc.value("memory_mib", 512)); !r)
        spdlog::warn("sandbox {}: {}", row.id, r.error().message);
      std::lock_guard lk(mu_);
      live_[row.id] = s;
      spdlog::info("sandbox {}: reattached", row.id);
    } else {
      finish(s, "failed", "failed", why);
    }
  }
  // Containers and directories no record owns (a create cut short by a crash).
  std::set<std::string> keep;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, s] : live_) keep.insert(id);
  }
  if (auto ids = runsc_.list()) {
    for (auto& id : *ids)
      if (!keep.count(id)) {
        spdlog::warn("removing orphaned container {}", id);
        release(id, -1);
      }
  }
  for (auto& e : fs::directory_iterator(cfg_.sandboxes_dir(), ec)) {
    std::string id = e.path().filename().string();
    if (!keep.count(id)) {
      spdlog::warn("removing orphaned sandbox directory {}", id);
      release(id, -1);
    }
  }
  reaper_ = std::thread([this] { reaper_loop(); });
  if (cfg_.warm_pool_size > 0 || cfg_.fork_pool_size > 0 || cfg_.template_checkpoints != "off") pool_thread_ = std::thread([this] { pool_loop(); });
  return {};
}

}  // namespace b3os::sandbox
