#include "daemon/sandbox/service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <spdlog/spdlog.h>

#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "daemon/sys/process.h"
#include "shim/fd_passing.h"

namespace b3os::sandbox {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {
constexpr auto kHelloTimeout = 15s;
constexpr auto kControlTimeout = 5s;
constexpr auto kFileIdleTimeout = 60s;
constexpr auto kExecGrace = 10s;

const std::map<std::string, std::string> kTemplateDescriptions = {
    {"base", "Debian 12 minbase with python3, curl, ca-certificates and procps"},
};

json map_to_json(const std::map<std::string, std::string>& m) {
  json j = json::object();
  for (auto& [k, v] : m) j[k] = v;
  return j;
}

Error agent_error(const json& end) {
  const json& e = end.contains("error") ? end["error"] : json::object();
  Error err;
  err.code = error_code_from_name(e.value("code", "internal"));
  err.message = e.value("message", "the agent reported an error");
  err.err_no = e.value("errno", 0);
  return err;
}

Result<json> parse_end(const protocol::Frame& f) {
  json j = json::parse(f.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(ErrorCode::kInternal, "unreadable answer from the agent");
  if (!j.value("ok", false)) return fail(agent_error(j));
  return j;
}

bool is_shim_process(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return cmd.find("b3os-shim") != std::string::npos;
}

void kill_and_wait(pid_t pid) {
  if (pid <= 0 || !is_shim_process(pid)) return;
  ::kill(pid, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (sys::try_reap(pid) && ::kill(pid, 0) != 0) return;  // reaped, or not our child and gone
    std::this_thread::sleep_for(5ms);
  }
  ::kill(pid, SIGKILL);
  sys::try_reap(pid);
}

pid_t read_pid_file(const std::string& path) {
  std::ifstream f(path);
  pid_t pid = -1;
  f >> pid;
  return f ? pid : -1;
}
}  // namespace

struct SandboxService::Sandbox {
  std::mutex mu;
  std::string id, project_id;
  json doc;
  json secrets = json::object();
  std::shared_ptr<agentlink::AgentChannel> channel;
  pid_t shim_pid = -1;
  std::atomic<int64_t> last_activity_ms{0};
  int64_t persisted_activity_ms = 0;
  bool finished = false;
  std::atomic<int> active_ops{0};  // execs and transfers in flight: the sandbox is not idle
  std::string hostname;
};

namespace {
/// Marks a sandbox busy for the life of one operation.
class ActiveOp {
 public:
  explicit ActiveOp(std::atomic<int>& n) : n_(n) { ++n_; }
  ~ActiveOp() { --n_; }
  ActiveOp(const ActiveOp&) = delete;
  ActiveOp& operator=(const ActiveOp&) = delete;

 private:
  std::atomic<int>& n_;
};
}  // namespace

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

SandboxService::SandboxService(config::Config cfg, store::Store& store)
    : cfg_(std::move(cfg)), store_(store), runsc_(cfg_.runtime) {}

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
    data.push_back({{"id", "tpl_" + n}, {"object", "template"}, {"name", n}, {"status", ready ? "ready" : "missing"},
                    {"description", desc}});
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

Result<std::shared_ptr<SandboxService::Sandbox>> SandboxService::launch(const Launch& l, Timing& t, Stopwatch& sw) {
  // A restore into the base template's shape can take a container created ahead of time.
  std::optional<Precreated> pc;
  if (!l.image.empty() && l.rootfs == cfg_.templates_dir() + "/base/rootfs") {
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
    t.lap("claim", sw);
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
  s->channel = agentlink::AgentChannel::start(std::move(pc->daemon_end), id,
                                              [this, id](const std::string& why) { on_channel_closed(id, why); });
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
  // A container from the pool was created with the default memory limit.
  if (from_pool) {
    if (auto r = runsc_.limit_memory(id, l.memory_mib); !r) return undo(r.error());
  }
  t.lap("limits", sw);
  return s;
}

std::shared_ptr<SandboxService::Sandbox> SandboxService::claim_warm(const SandboxSpec& spec, const std::string& tname) {
  // Forkable sandboxes are restored for themselves, never claimed; the pool holds `base`.
  if (spec.forkable || tname != "base" || cfg_.warm_pool_size <= 0) return nullptr;
  std::shared_ptr<Sandbox> s;
  {
    std::lock_guard lk(pool_mu_);
    while (!warm_.empty() && !s) {
      s = warm_.front();
      warm_.pop_front();
      runsc_.set_frozen(s->id, false);
      if (s->channel->closed()) {
        discard(*s);  // died while waiting; take the next
        s.reset();
      }
    }
  }
  pool_cv_.notify_all();  // refill
  return s;
}

void SandboxService::pool_loop() {
  const std::string rootfs = cfg_.templates_dir() + "/base/rootfs";
  for (;;) {
    bool want_warm = false, want_precreated = false;
    {
      std::unique_lock lk(pool_mu_);
      auto short_of = [&] {
        want_warm = static_cast<int>(warm_.size()) < cfg_.warm_pool_size;
        want_precreated = static_cast<int>(precreated_.size()) < cfg_.fork_pool_size;
        return want_warm || want_precreated;
      };
      pool_cv_.wait_for(lk, 2s, [&] { return stopping_pool_ || short_of(); });
      if (stopping_pool_) return;
      if (!want_warm && !want_precreated) continue;
    }
    const bool template_ready = fs::exists(cfg_.templates_dir() + "/base/.b3os-ready");
    // Pool members count against the node's capacity while they wait; each waits frozen,
    // since an idle sentry still ticks (~40 ms of CPU a second) and slows everything else.
    bool added = false;
    if (template_ready && reserve("", 1)) {
      Launch l;
      l.id = new_id("sbx");
      l.rootfs = rootfs;
      Timing t;
      Stopwatch sw;
      if (want_warm) {
        // Booted, agent ready: a non-forkable create claims it.
        if (auto s = launch(l, t, sw)) {
          runsc_.set_frozen((*s)->id, true);
          std::lock_guard lk(pool_mu_);
          warm_.push_back(*s);
          added = true;
        } else {
          spdlog::warn("warm pool: {}", s.error().message);
        }
      } else {
        // Created, not started: a fork or snapshot restore skips `runsc create`.
        if (auto pc = precreate(l, t, sw)) {
          runsc_.set_frozen(pc->sandbox->id, true);
          std::lock_guard lk(pool_mu_);
          precreated_.push_back(std::move(*pc));
          added = true;
        } else {
          spdlog::warn("fork pool: {}", pc.error().message);
        }
      }
      unreserve("", 1);
    }
    if (!added) {
      // No template yet, a full node or a broken runtime: wait rather than spin.
      std::unique_lock lk(pool_mu_);
      pool_cv_.wait_for(lk, 5s, [&] { return stopping_pool_; });
    }
  }
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

Result<json> SandboxService::create_from_snapshot(const Principal& p, const SandboxSpec& request, Timing& t) {
  Stopwatch sw;
  auto row = store_.get_snapshot(p.project_id, *request.snapshot);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSnapshotNotFound, "no snapshot " + *request.snapshot + " in this project");
  const json& d = (*row)->doc;
  // The snapshot fixes what its memory image holds (size, environment, grant, egress);
  // the request chooses the lifetime and the labels.
  SandboxSpec spec = request;
  spec.vcpu = d.value("vcpu", 1);
  spec.memory_mib = d.value("memory_mib", 512);
  spec.disk_gib = d.value("disk_gib", 1);
  spec.forkable = d.value("forkable", false);
  spec.env.clear();
  for (auto& [k, v] : d["env"].items()) spec.env[k] = v.get<std::string>();
  spec.secrets.clear();
  for (auto& [k, v] : (*row)->secrets.items()) spec.secrets[k] = v.get<std::string>();
  spec.egress.mode = d["egress"].value("mode", "deny");
  spec.egress.allow = d["egress"].value("allow", std::vector<std::string>{});
  spec.api.scopes = d["api"].value("scopes", std::vector<std::string>{});
  if (d["api"].contains("spend_cap_usd") && d["api"]["spend_cap_usd"].is_number())
    spec.api.spend_cap_usd = d["api"]["spend_cap_usd"].get<double>();
  const std::string image = cfg_.snapshots_dir() + "/" + (*row)->id;
  if (!fs::exists(image + "/checkpoint.img"))
    return fail(ErrorCode::kInternal, "snapshot " + (*row)->id + " has no image on disk at " + image);
  return create_launched(p, spec, d["template"].value("name", "base"), d["_b3os"].value("rootfs", ""), (*row)->id, t, sw);
}

Result<json> SandboxService::create_launched(const Principal& p, const SandboxSpec& spec, const std::string& tname,
                                             const std::string& rootfs, const std::string& snapshot_id, Timing& t,
                                             Stopwatch& sw) {
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
                 {"rootfs", rootfs}}},
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

Result<json> SandboxService::fork(const Principal& p, const std::string& id, int count,
                                  const std::optional<std::map<std::string, std::string>>& metadata, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto src = *sr;
  json src_doc;
  json src_secrets;
  {
    std::lock_guard lk(src->mu);
    src_doc = src->doc;
    src_secrets = src->secrets;
  }
  if (src_doc["status"] == "paused")
    return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is paused; resume it before forking");
  if (!src_doc.value("forkable", false))
    return fail(ErrorCode::kForkUnavailable, "sandbox " + id + " was not created with forkable: true");
  if (auto r = reserve(p.project_id, count); !r) return fail(r.error());
  ScopeExit unreserve_later([&] { unreserve(p.project_id, count); });
  ActiveOp busy(src->active_ops);
  t.lap("validate", sw);

  // One checkpoint of the source, restored into each fork; the image is removed at the end.
  const std::string image = cfg_.run_dir + "/images/" + new_id("img");
  std::error_code ec;
  fs::create_directories(image, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + image + ": " + ec.message());
  ScopeExit remove_image([&] {
    std::error_code e;
    fs::remove_all(image, e);
  });
  if (auto r = checkpoint_into(*src, image, t, sw); !r) return fail(r.error().wrap("forking " + id));

  struct Outcome {
    Result<std::shared_ptr<Sandbox>> sandbox = fail(ErrorCode::kInternal, "not started");
    Timing timing;
  };
  std::vector<Outcome> outcomes(count);
  {
    std::vector<std::thread> workers;
    for (int i = 0; i < count; ++i) {
      workers.emplace_back([&, i] {
        Launch l;
        l.id = new_id("sbx");
        l.project_id = p.project_id;
        l.rootfs = src_doc["_b3os"].value("rootfs", template_rootfs(src_doc["template"]["name"]) + "/rootfs");
        l.vcpu = src_doc.value("vcpu", 1);
        l.memory_mib = src_doc.value("memory_mib", 512);
        l.image = image;
        Stopwatch w;
        outcomes[i].sandbox = launch(l, outcomes[i].timing, w);
      });
    }
    for (auto& w : workers) w.join();
  }
  // All or nothing: one failed fork undoes the others.
  for (auto& o : outcomes) {
    if (o.sandbox) continue;
    Error e = o.sandbox.error();
    for (auto& other : outcomes)
      if (other.sandbox) discard(**other.sandbox);
    return fail(e.wrap("forking " + id));
  }
  // The slowest fork's launch phases, under their own names ("restore" among them).
  const Timing* slowest = &outcomes[0].timing;
  auto sum = [](const Timing& x) {
    double total = 0;
    for (auto& [n, ms] : x.phases) total += ms;
    return total;
  };
  for (auto& o : outcomes)
    if (sum(o.timing) > sum(*slowest)) slowest = &o.timing;
  for (auto& ph : slowest->phases) t.add(ph.first == "create" ? "precreate" : ph.first, ph.second);
  sw.reset();

  const int64_t now = now_unix_ms();
  json data = json::array();
  std::vector<std::shared_ptr<Sandbox>> made;
  for (auto& o : outcomes) {
    auto s = *o.sandbox;
    s->last_activity_ms = now;
    s->secrets = src_secrets;
    s->doc = src_doc;
    s->doc["id"] = s->id;
    s->doc["host_id"] = "sbx-" + s->id.substr(4);
    s->doc["created_at"] = format_rfc3339(now);
    s->doc["started_at"] = format_rfc3339(now);
    s->doc["paused_at"] = nullptr;
    if (metadata) s->doc["metadata"] = map_to_json(*metadata);
    s->doc["_b3os"] = {{"started_ms", now}, {"stopped_ms", nullptr}, {"paused_total_ms", 0},
                       {"hostname", s->hostname}, {"rootfs", src_doc["_b3os"].value("rootfs", "")},
                       {"forked_from", id}};
    if (auto r = persist(*s); !r) {
      for (auto& o2 : outcomes) discard(**o2.sandbox);
      return fail(r.error());
    }
    made.push_back(s);
  }
  {
    std::lock_guard lk(mu_);
    for (auto& s : made) live_[s->id] = s;
  }
  for (auto& s : made) {
    std::lock_guard lk(s->mu);
    data.push_back(view(*s));
  }
  t.lap("store", sw);
  touch(*src);
  spdlog::info("sandbox {}: forked into {}", id, count);
  return json{{"object", "list"}, {"data", data}, {"next_cursor", nullptr}};
}

Result<void> SandboxService::pause_locked(Sandbox& s, const char* why) {
  if (s.finished) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is " + s.doc["status"].get<std::string>());
  if (s.doc["status"] == "paused") return {};
  if (auto r = runsc_.pause(s.id); !r) return r;
  const int64_t now = now_unix_ms();
  s.doc["status"] = "paused";
  s.doc["paused_at"] = format_rfc3339(now);
  s.doc["_b3os"]["paused_since_ms"] = now;
  if (auto r = persist(s); !r) return r;
  spdlog::info("sandbox {}: paused ({})", s.id, why);
  return {};
}

Result<json> SandboxService::pause(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  std::lock_guard lk(s.mu);
  if (auto r = pause_locked(s, "requested"); !r) return fail(r.error());
  t.lap("pause", sw);
  return view(s);
}

Result<json> SandboxService::resume(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  {
    std::lock_guard lk(s.mu);
    if (s.finished) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is " + s.doc["status"].get<std::string>());
    if (s.doc["status"] == "paused") {
      if (auto r = runsc_.resume(id); !r) return fail(r.error());
      const int64_t now = now_unix_ms();
      auto& in = s.doc["_b3os"];
      in["paused_total_ms"] = in.value("paused_total_ms", int64_t{0}) + (now - in.value("paused_since_ms", now));
      in.erase("paused_since_ms");
      s.doc["status"] = "running";
      s.doc["paused_at"] = nullptr;
      s.last_activity_ms = now;
      if (auto r = persist(s); !r) return fail(r.error());
      spdlog::info("sandbox {}: resumed", id);
    }
  }
  touch(s);
  t.lap("resume", sw);
  std::lock_guard lk(s.mu);
  return view(s);
}

Result<void> SandboxService::checkpoint_into(Sandbox& s, const std::string& dir, Timing& t, Stopwatch& sw) {
  auto quiet = s.channel->quiesce();
  t.lap("pause", sw);
  if (auto r = runsc_.checkpoint(s.id, dir); !r) return r;
  t.lap("snapshot", sw);
  return {};
}

Result<json> SandboxService::snapshot(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto src = *sr;
  json src_doc, src_secrets;
  {
    std::lock_guard lk(src->mu);
    if (src->doc["status"] != "running")
      return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is " + src->doc["status"].get<std::string>() +
                                                     "; snapshots are taken of running sandboxes");
    src_doc = src->doc;
    src_secrets = src->secrets;
  }
  ActiveOp busy(src->active_ops);
  const std::string snap_id = new_id("snp");
  const std::string dir = cfg_.snapshots_dir() + "/" + snap_id;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + dir + ": " + ec.message());
  ScopeExit remove_dir([&] {
    std::error_code e;
    fs::remove_all(dir, e);
  });
  if (auto r = checkpoint_into(*src, dir, t, sw); !r) return fail(r.error().wrap("snapshotting " + id));
  uint64_t size = 0;
  for (auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) size += e.file_size();
  const int64_t now = now_unix_ms();
  json doc = {{"id", snap_id},
              {"object", "snapshot"},
              {"sandbox_id", id},
              {"template", src_doc["template"]},
              {"vcpu", src_doc["vcpu"]},
              {"memory_mib", src_doc["memory_mib"]},
              {"disk_gib", src_doc["disk_gib"]},
              {"env", src_doc["env"]},
              {"secret_names", src_doc["secret_names"]},
              {"egress", src_doc["egress"]},
              {"api", src_doc["api"]},
              {"forkable", src_doc["forkable"]},
              {"size_bytes", size},
              {"created_at", format_rfc3339(now)},
              {"_b3os", {{"rootfs", src_doc["_b3os"].value("rootfs", "")}}}};
  if (auto r = store_.put_snapshot({snap_id, p.project_id, doc, src_secrets}); !r) return fail(r.error());
  remove_dir.dismiss();
  t.lap("store", sw);
  touch(*src);
  spdlog::info("sandbox {}: snapshot {} ({} MB)", id, snap_id, size >> 20);
  doc.erase("_b3os");
  return doc;
}

Result<json> SandboxService::get_snapshot(const Principal& p, const std::string& id) {
  auto row = store_.get_snapshot(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSnapshotNotFound, "no snapshot " + id + " in this project");
  json d = (*row)->doc;
  d.erase("_b3os");
  return d;
}

Result<json> SandboxService::list_snapshots(const Principal& p, const std::optional<std::string>& after_id, int limit) {
  auto rows = store_.list_snapshots(p.project_id, after_id, limit);
  if (!rows) return fail(rows.error());
  const bool more = static_cast<int>(rows->size()) > limit;
  if (more) rows->pop_back();
  json data = json::array();
  for (auto& r : *rows) {
    json d = r.doc;
    d.erase("_b3os");
    data.push_back(std::move(d));
  }
  return json{{"object", "list"}, {"data", data}, {"next_cursor", more ? json(rows->back().id) : json(nullptr)}};
}

Result<json> SandboxService::delete_snapshot(const Principal& p, const std::string& id) {
  auto d = get_snapshot(p, id);
  if (!d) return fail(d.error());
  if (auto r = store_.delete_snapshot(p.project_id, id); !r) return fail(r.error());
  std::error_code ec;
  fs::remove_all(cfg_.snapshots_dir() + "/" + id, ec);
  (*d)["deleted"] = true;
  return *d;
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
  std::ifstream usage("/sys/fs/cgroup/memory/b3os/" + id + "/memory.max_usage_in_bytes");
  std::ifstream limit("/sys/fs/cgroup/memory/b3os/" + id + "/memory.limit_in_bytes");
  int64_t u = 0, l = 0;
  if ((usage >> u) && (limit >> l) && l > 0 && u >= l - (4 << 20)) {
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
      s->channel = agentlink::AgentChannel::start(std::move(*fd), id,
                                                  [this, id](const std::string& w) { on_channel_closed(id, w); });
      if (auto r = s->channel->resync(3s); !r) {
        why = "its agent did not answer after b3osd restarted (" + r.error().message + ")";
      } else if (paused && !runsc_.pause(row.id)) {
        why = "its container could not be paused again after b3osd restarted";
      }
    }
    if (why.empty()) {
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
  if (cfg_.warm_pool_size > 0 || cfg_.fork_pool_size > 0) pool_thread_ = std::thread([this] { pool_loop(); });
  return {};
}

// ---- exec and files ----

Error SandboxService::explain(Sandbox& s, Error e) {
  if (!s.channel || !s.channel->closed()) return e;
  // The reader thread is recording why the sandbox died; give it a moment.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lk(s.mu);
      if (s.finished) {
        std::string why = s.doc["stop_message"].is_string() ? s.doc["stop_message"].get<std::string>()
                          : s.doc["stop_reason"] == "deleted" ? std::string("it was deleted")
                                                              : "its timeout passed with no API activity";
        return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + why, 0};
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + e.message, 0};
}

Result<std::shared_ptr<agentlink::Stream>> SandboxService::open_stream(Sandbox& s, const json& request) {
  std::shared_ptr<agentlink::AgentChannel> ch;
  {
    std::lock_guard lk(s.mu);
    if (s.finished) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is " + s.doc["status"].get<std::string>());
    if (s.doc["status"] == "paused")
      return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " is paused; resume it first (POST /v1/sandboxes/" + s.id + "/resume)");
    ch = s.channel;
  }
  touch(s);
  return ch->open(request);
}

Result<ExecResult> SandboxService::exec(const Principal& p, const std::string& id, const ExecSpec& spec, Timing& t,
                                        const CancelCheck& cancelled) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  auto& s = **sr;
  ActiveOp busy(s.active_ops);
  json env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
              {"HOME", "/root"},
              {"LANG", "C.UTF-8"},
              {"B3OS_SANDBOX_ID", s.id}};
  {
    std::lock_guard lk(s.mu);
    for (auto& [k, v] : s.doc["env"].items()) env[k] = v;
    for (auto& [k, v] : s.secrets.items()) env[k] = v;
  }
  for (auto& [k, v] : spec.env) env[k] = v;
  json req = {{"op", "exec"},
              {"argv", spec.argv},
              {"env", env},
              {"cwd", spec.cwd},
              {"timeout_ms", spec.timeout_ms},
              {"stdin", spec.stdin_data.has_value()},
              {"max_output", cfg_.max_exec_output}};
  auto stream = open_stream(s, req);
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  const auto deadline = Clock::now() + std::chrono::milliseconds(spec.timeout_ms) + kExecGrace;
  if (spec.stdin_data) {
    if (auto r = st.send_data(*spec.stdin_data, deadline); !r && r.error().code != ErrorCode::kConflict)
      return fail(explain(s, r.error()));
    (void)st.send_eof();
  }
  ExecResult res;
  for (;;) {
    auto f = st.next(std::min(deadline, Clock::now() + 250ms));
    if (!f) {
      if (Clock::now() >= deadline) return fail(explain(s, f.error()));
      if (cancelled && cancelled()) {
        st.cancel();
        return fail(ErrorCode::kInternal, "the client went away; the command was cancelled");
      }
      if (s.channel->closed()) return fail(explain(s, f.error()));
      continue;
    }
    if (f->type == protocol::FrameType::kStdout || f->type == protocol::FrameType::kStderr) {
      auto& out = f->type == protocol::FrameType::kStdout ? res.stdout_data : res.stderr_data;
      size_t room = cfg_.max_exec_output > out.size() ? cfg_.max_exec_output - out.size() : 0;
      out.append(f->payload.data(), std::min(room, f->payload.size()));
      st.grant(static_cast<uint32_t>(f->payload.size()));
    } else if (f->type == protocol::FrameType::kEnd) {
      auto end = parse_end(*f);
      if (!end) return fail(end.error());
      res.exit_code = end->value("exit_code", -1);
      res.timed_out = end->value("timed_out", false);
      res.duration_ms = end->value("duration_ms", 0.0);
      res.stdout_truncated = end->value("stdout_truncated", false);
      res.stderr_truncated = end->value("stderr_truncated", false);
      break;
    }
  }
  touch(s);
  t.lap("exec", sw);
  return res;
}

Result<json> SandboxService::write_file(const Principal& p, const std::string& id, const std::string& path,
                                        const ChunkSource& source, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
  auto stream = open_stream(**sr, {{"op", "file_write"}, {"path", path}, {"mode", 0644}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  std::vector<char> buf(protocol::kMaxData);
  bool agent_ended = false;
  for (;;) {
    auto n = source(buf.data(), buf.size());
    if (!n) return fail(n.error());
    if (*n == 0) break;
    auto r = st.send_data(std::string_view(buf.data(), *n), Clock::now() + kFileIdleTimeout);
    if (!r) {
      if (r.error().code != ErrorCode::kConflict) return fail(explain(**sr, r.error()));
      agent_ended = true;  // the agent refused the file; its END says why
      break;
    }
  }
  if (!agent_ended) {
    if (auto r = st.send_eof(); !r) return fail(explain(**sr, r.error()));
  }
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
    if (f->type != protocol::FrameType::kEnd) continue;
    auto end = parse_end(*f);
    if (!end) return fail(end.error());
    touch(**sr);
    t.lap("write", sw);
    return json{{"path", path}, {"size", end->value("bytes", uint64_t{0})}};
  }
}

Result<void> SandboxService::read_file(const Principal& p, const std::string& id, const std::string& path,
                                       FileSink& sink, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
  auto stream = open_stream(**sr, {{"op", "file_read"}, {"path", path}});
  if (!stream) return fail(stream.error());
  auto& st = **stream;
  for (;;) {
    auto f = st.next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
    switch (f->type) {
      case protocol::FrameType::kHeader: {
        json h = json::parse(f->payload, nullptr, false);
        if (h.is_discarded()) return fail(ErrorCode::kInternal, "unreadable file header from the agent");
        t.lap("open", sw);
        if (auto r = sink.begin(h.value("size", uint64_t{0})); !r) return r;
        break;
      }
      case protocol::FrameType::kData:
        if (auto r = sink.data(f->payload); !r) return r;
        st.grant(static_cast<uint32_t>(f->payload.size()));
        break;
      case protocol::FrameType::kEnd: {
        auto end = parse_end(*f);
        if (!end) return fail(end.error());
        touch(**sr);
        t.lap("read", sw);
        return {};
      }
      default:
        break;
    }
  }
}

Result<json> SandboxService::call_agent(const Principal& p, const std::string& id, const json& request) {
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  ActiveOp busy((*sr)->active_ops);
  auto stream = open_stream(**sr, request);
  if (!stream) return fail(stream.error());
  for (;;) {
    auto f = (*stream)->next(Clock::now() + kFileIdleTimeout);
    if (!f) return fail(explain(**sr, f.error()));
    if (f->type == protocol::FrameType::kEnd) return parse_end(*f);
  }
}

Result<json> SandboxService::list_dir(const Principal& p, const std::string& id, const std::string& path, Timing& t) {
  Stopwatch sw;
  auto end = call_agent(p, id, {{"op", "list"}, {"path", path}});
  if (!end) return fail(end.error());
  json data = json::array();
  for (auto& e : (*end)["entries"]) {
    std::string name = e.value("name", "");
    data.push_back({{"name", name},
                    {"path", path == "/" ? "/" + name : path + "/" + name},
                    {"type", e.value("type", "other")},
                    {"size", e.value("size", uint64_t{0})},
                    {"mode", e.value("mode", 0)},
                    {"modified_at", format_rfc3339(e.value("mtime_ns", int64_t{0}) / 1000000)}});
  }
  t.lap("list", sw);
  return json{{"object", "list"}, {"path", path}, {"data", data}, {"next_cursor", nullptr}};
}

Result<json> SandboxService::remove_path(const Principal& p, const std::string& id, const std::string& path,
                                         bool recursive, Timing& t) {
  Stopwatch sw;
  auto end = call_agent(p, id, {{"op", "remove"}, {"path", path}, {"recursive", recursive}});
  if (!end) return fail(end.error());
  t.lap("remove", sw);
  return json{{"path", path}, {"deleted", true}};
}

Result<double> SandboxService::ping(const Principal& p, const std::string& id) {
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  return (*sr)->channel->ping(kControlTimeout);
}

}  // namespace b3os::sandbox
