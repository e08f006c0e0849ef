#include "daemon/sandbox/lifecycle.h"

#include <sys/wait.h>

#include <cstring>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/ids.h"
#include "common/metrics.h"
#include "common/scope_exit.h"
#include "daemon/objstore/transfer.h"
#include "daemon/sandbox/remote_images.h"
#include "daemon/sandbox/view.h"

namespace b3os::sandbox {

using nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::map<std::string, std::string>& builtin_templates() {
  static const std::map<std::string, std::string> kTemplates = {
      {"base", "Debian 12 minbase with python3, curl, ca-certificates and procps"},
  };
  return kTemplates;
}

namespace {

Error not_found(const std::string& id) {
  return Error{ErrorCode::kSandboxNotFound, "no sandbox " + id + " in this project", 0};
}
}  // namespace

// ---- helpers for every part ----

Result<State> Lifecycle::transition(LiveSandbox& s, Transition t) {
  std::lock_guard lk(s.mu);
  auto next = next_state(s.rec.state, t, s.id);
  if (next) s.rec.state = *next;
  return next;
}

// The record as it is to be written, its last activity included (the caller holds
// persist_mu, which orders this record's writes).
static store::SandboxRecord record_to_save(LiveSandbox& s) {
  store::SandboxRecord copy;
  {
    std::lock_guard lk(s.mu);
    copy = s.rec;
  }
  copy.last_activity_ms = s.last_activity_ms.load();
  s.persisted_activity_ms = copy.last_activity_ms;
  return copy;
}

Result<void> Lifecycle::persist(LiveSandbox& s) {
  std::lock_guard order(s.persist_mu);
  return store_.put_sandbox(record_to_save(s));
}

void Lifecycle::touch(LiveSandbox& s) {
  // Written through at once (a small WAL write, well under a millisecond) so that a restart
  // never moves expires_at backwards and stops a sandbox that was in use.
  s.last_activity_ms = now_unix_ms();
  {
    std::lock_guard lk(s.mu);
    if (!is_live(s.rec.state)) return;
  }
  {
    std::lock_guard order(s.persist_mu);
    if (s.last_activity_ms.load() == s.persisted_activity_ms) return;
  }
  if (auto r = persist(s); !r) spdlog::warn("sandbox {}: {}", s.id, r.error().message);
}

json Lifecycle::view(LiveSandbox& s) {
  store::SandboxRecord copy;
  {
    std::lock_guard lk(s.mu);
    copy = s.rec;
  }
  if (is_live(copy.state)) copy.last_activity_ms = s.last_activity_ms.load();
  std::optional<double> spent;
  if (!copy.budget_id.empty() && spent_) spent = spent_(copy.budget_id);
  return sandbox_object(copy, now_unix_ms(), spent, port_urls_);
}

Result<std::shared_ptr<LiveSandbox>> Lifecycle::running(const Principal& p, const std::string& id) {
  auto being_moved = [&id] {
    return Error{ErrorCode::kNodeUnavailable, "sandbox " + id + " is being moved to another node (this one drains); "
                                                                "retry in a moment", 0};
  };
  if (auto s = registry_.find(p.project_id, id)) {
    if (s->moving) return fail(being_moved());  // its image is being taken
    return s;
  }
  {
    // Out of the registry while its image travels (Lifecycle::begin_move): looked at only
    // when the registry does not have it, so the common path takes no extra lock.
    std::lock_guard lk(moving_mu_);
    if (moving_.count(id)) return fail(being_moved());
  }
  auto row = store_.get_sandbox(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(not_found(id));
  // In a cluster: another node holds it now (it was moved there). A router that sees the 503
  // reads where it is again.
  if (!(*row)->ended() && !(*row)->node_id.empty() && (*row)->node_id != cfg_.node_id)
    return fail(ErrorCode::kNodeUnavailable, "sandbox " + id + " is on node " + (*row)->node_id + " now; retry there");
  return fail(ErrorCode::kSandboxNotRunning,
              "sandbox " + id + " is " + std::string(api_status((*row)->state)) + ", not running");
}

Error Lifecycle::explain(LiveSandbox& s, Error e) {
  if (!s.channel) return e;
  // A write that found the agent's end gone (EPIPE, ECONNRESET) races the reader, which is
  // about to see the channel close and record why the sandbox died.
  if (e.err_no == EPIPE || e.err_no == ECONNRESET)
    for (int i = 0; i < 300 && !s.channel->closed(); ++i) std::this_thread::sleep_for(10ms);
  if (!s.channel->closed()) return e;
  // The reader thread is recording why the sandbox died (which may take a second); give it
  // the time.
  for (int i = 0; i < 300; ++i) {
    {
      std::lock_guard lk(s.mu);
      if (s.rec.ended()) {
        std::string why = !s.rec.stop_message.empty()                   ? s.rec.stop_message
                          : s.rec.stop_reason == store::StopReason::kDeleted ? std::string("it was deleted")
                                                                          : "its timeout passed with no API activity";
        return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + why, 0};
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  return Error{ErrorCode::kSandboxNotRunning, "sandbox " + s.id + " stopped: " + e.message, 0};
}

bool Lifecycle::finish(const std::shared_ptr<LiveSandbox>& s, Transition end, store::StopReason reason,
                       const std::string& message) {
  std::string project;
  {
    std::lock_guard lk(s->mu);
    auto next = next_state(s->rec.state, end, s->id);
    if (!next) return false;  // already ended (a delete racing a failure, say)
    const int64_t now = now_unix_ms();
    s->rec.state = *next;
    s->rec.stop_reason = reason;
    s->rec.stop_message = message;
    s->rec.stopped_ms = now;
    // Nothing runs with them again; the store keeps none of an ended record's (row_codec.h).
    s->rec.env.clear();
    s->rec.secrets.clear();
    project = s->rec.project_id;
  }
  // Recorded before anything is released: a crash mid-release leaves a stopped record, and the
  // next start sweeps what is left of it. The end is decided, so a store locked by another
  // process (503 after its busy timeout) is waited out, up to a minute: given up at once, a
  // deleted sandbox's record would still read "running" (and "failed" after a restart).
  auto saved = persist(*s);
  for (auto until = std::chrono::steady_clock::now() + 60s;
       !saved && saved.error().code == ErrorCode::kNodeUnavailable && std::chrono::steady_clock::now() < until;
       saved = persist(*s)) {
    spdlog::warn("sandbox {}: {}; trying again", s->id, saved.error().message);
    std::this_thread::sleep_for(200ms);
  }
  if (!saved) spdlog::error("sandbox {}: {}", s->id, saved.error().message);
  note_ended(project);
  registry_.remove(s->id);
  // Its minted preview URLs die with it (public ones are derived, and the host is gone).
  if (auto r = store_.delete_port_tokens(s->id); !r) spdlog::warn("sandbox {}: {}", s->id, r.error().message);
  launcher_.end(*s);
  if (templates_) {
    std::string template_id;
    {
      std::lock_guard lk(s->mu);
      template_id = s->rec.template_id;
    }
    if (!template_id.empty()) templates_->released(template_id);
  }
  spdlog::info("sandbox {}: {} ({}){}", s->id, end == Transition::kStop ? "stopped" : "failed",
               store::stop_reason_name(reason), message.empty() ? "" : ": " + message);
  return true;
}

Result<void> Lifecycle::pause_live(LiveSandbox& s, const char* why) {
  // runsc pause talks to the sandbox: thawed first. Once paused the freezer leaves it alone
  // (it freezes running sandboxes only), and resume thaws it as for any pause.
  Awake a = awake(s);
  {
    std::lock_guard lk(s.mu);
    if (s.rec.state == State::kPaused) return {};
  }
  // A checkpoint of fork-ahead's (fork_ahead.h) ends in a fraction of a second: a pause
  // that meets one waits it out (up to 10 s) rather than refusing what the user cannot see.
  for (int waited = 0;; ++waited) {
    auto r = transition(s, Transition::kBeginPause);
    if (r) break;
    bool spares_only = false;
    {
      std::lock_guard lk(s.mu);
      spares_only = s.rec.state == State::kCheckpointing && s.checkpoints > 0 && s.checkpoints == s.spare_checkpoints;
    }
    if (!spares_only || waited >= 1000) return fail(r.error());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto r = rt_.pause(s.id); !r) {
    (void)transition(s, Transition::kPauseFailed);
    return r;
  }
  {
    std::lock_guard lk(s.mu);
    auto next = next_state(s.rec.state, Transition::kPaused, s.id);
    if (!next) return fail(next.error());  // it ended while the runtime paused it
    s.rec.state = *next;
    s.rec.paused_since_ms = now_unix_ms();
  }
  if (auto r = persist(s); !r) return r;
  spdlog::info("sandbox {}: paused ({})", s.id, why);
  return {};
}

Result<void> Lifecycle::publish(const std::vector<std::shared_ptr<LiveSandbox>>& made) {
  // Every record in one write: a b3osd killed mid-way, or a write that fails, leaves all of a
  // fork's sandboxes or none (saved one by one, a crash between two kept a partial set, and a
  // failed second write left the first record "running" with its container discarded).
  std::vector<store::SandboxRecord> recs;
  Result<void> saved;
  for (auto& s : made) {
    auto up = transition(*s, Transition::kLaunched);
    if (!up) {
      saved = fail(up.error());
      break;
    }
    std::lock_guard order(s->persist_mu);  // not shared yet: never waits
    recs.push_back(record_to_save(*s));
  }
  if (saved) saved = store_.put_sandboxes(recs);
  if (!saved) {
    for (auto& m : made) launcher_.discard(*m);
    return saved;
  }
  for (auto& s : made) {
    {
      // Its creation is activity: the grace before an idle freeze starts now.
      std::lock_guard lk(s->freeze_mu);
      s->quiet_since_ms = steady_ms();
    }
    registry_.add(s);
  }
  return {};
}

std::string Lifecycle::template_rootfs(const std::string& name) const {
  std::string n = name.rfind("tpl_", 0) == 0 ? name.substr(4) : name;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return {};
  return cfg_.templates_dir() + "/" + n;
}

// ---- create ----

Result<json> Lifecycle::create(const Principal& p, const SandboxSpec& spec, Timing& t) {
  Stopwatch sw;
  if (auto r = check_supported(spec); !r) return fail(r.error());
  if (spec.snapshot) return create_from_snapshot(p, spec, t);
  // A template users built (daemon/template): the newest ready version this project may use.
  if (templates_ && !builtin_templates().count(spec.template_name)) {
    auto found = templates_->resolve(p.project_id, spec.template_name);
    if (!found) return fail(found.error());
    if (*found) {
      const TemplateChoice& c = **found;
      SandboxSpec s = spec;
      if (!s.vcpu_given && c.vcpu) s.vcpu = *c.vcpu;
      if (!s.memory_given && c.memory_mib) s.memory_mib = *c.memory_mib;
      if (!s.disk_given && c.disk_gib) s.disk_gib = *c.disk_gib;
      for (auto& [k, v] : c.env) s.env.emplace(k, v);  // the sandbox's own env wins
      return create_launched(p, s, c.name, c.rootfs, std::nullopt, t, sw, "", &c);
    }
  }
  const std::string tdir = template_rootfs(spec.template_name);
  if (tdir.empty() || (!fs::exists(tdir) && !builtin_templates().count(fs::path(tdir).filename().string())))
    return fail(ErrorCode::kTemplateNotFound, "no template \"" + spec.template_name + "\" (see GET /v1/templates)");
  if (!fs::exists(tdir + "/.b3os-ready"))
    return fail(ErrorCode::kProductUnavailable, "template \"" + spec.template_name +
                                                    "\" is not built on this node; run templates/" +
                                                    fs::path(tdir).filename().string() + "/build.sh " + tdir);
  const std::string tname = fs::path(tdir).filename().string();
  return create_launched(p, spec, tname, tdir + "/rootfs", std::nullopt, t, sw, "");
}

Result<json> Lifecycle::create_from_snapshot(const Principal& p, const SandboxSpec& request, Timing& t) {
  Stopwatch sw;
  auto row = store_.get_snapshot(p.project_id, *request.snapshot);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSnapshotNotFound, "no snapshot " + *request.snapshot + " in this project");
  const store::SnapshotRecord& snap = **row;
  // The snapshot fixes what its memory image holds (size, environment, grant, egress);
  // the request chooses the lifetime and the labels.
  SandboxSpec spec = request;
  spec.vcpu = snap.vcpu;
  spec.memory_mib = snap.memory_mib;
  spec.disk_gib = snap.disk_gib;
  spec.forkable = snap.forkable;
  spec.env = snap.env;
  spec.secrets = snap.secrets;
  spec.egress.mode = snap.egress_mode;
  spec.egress.allow = snap.egress_allow;
  spec.api.scopes = snap.api_scopes;
  spec.api.spend_cap_usd.reset();
  if (snap.spend_cap_micros) spec.api.spend_cap_usd = micros_to_usd(*snap.spend_cap_micros);
  const std::string image = cfg_.snapshots_dir() + "/" + snap.id;
  TemplateChoice from;  // only its id (and a fetched image): a snapshot's image holds everything else
  from.id = snap.template_id;
  std::string rootfs = snap.rootfs;
  std::optional<FetchedSnapshot> fetched;
  if (!fs::exists(image + "/checkpoint.img")) {
    if (snap.node_id == cfg_.node_id || snap.node_id.empty())
      return fail(ErrorCode::kInternal, "snapshot " + snap.id + " has no image on disk at " + image);
    // Another node's snapshot (docs/cluster.md): its image, and its root unless cached here,
    // from the object store; the image goes once the restore has read it.
    auto got = fetch_snapshot(cfg_, snap.id, snap.node_id);
    if (!got) return fail(got.error());
    fetched = *got;
    from.image = fetched->image_dir;
    rootfs = fetched->rootfs;
    t.lap("fetch", sw);
  }
  ScopeExit drop_fetched([&] {
    std::error_code ec;
    if (fetched) fs::remove_all(fetched->image_dir, ec);
  });
  return create_launched(p, spec, snap.template_name, rootfs, snap.id, t, sw, snap.budget_id, &from);
}

Result<json> Lifecycle::create_launched(const Principal& p, const SandboxSpec& spec, const std::string& tname,
                                        const std::string& rootfs, const std::optional<std::string>& snapshot_id,
                                        Timing& t, Stopwatch& sw, const std::string& inherited_budget,
                                        const TemplateChoice* tpl) {
  auto budget = grant_budget(p, spec, inherited_budget);
  if (!budget) return fail(budget.error());
  const Size size{spec.memory_mib, spec.vcpu, spec.disk_gib};
  if (auto r = registry_.reserve(p.project_id, 1, size); !r) return fail(r.error());
  Reservation reserved(registry_, p.project_id, 1, size);
  t.lap("validate", sw);

  const bool network = spec.egress.mode != "deny";
  if (network && !launcher_.network())
    return fail(ErrorCode::kProductUnavailable, "egress \"" + spec.egress.mode +
                                                    "\" needs sandbox networks, which this b3osd runs without "
                                                    "(--network off); egress \"deny\" works");
  std::shared_ptr<LiveSandbox> s;
  if (!snapshot_id && tpl && !tpl->pool_key.empty() && !spec.forkable && !network)
    s = pools_.claim_template(tpl->pool_key, spec.memory_mib, spec.disk_gib);
  else if (!snapshot_id)
    s = pools_.claim_warm(tname, spec.forkable, spec.disk_gib, network);
  if (s) {
    t.lap("claim", sw);
    auto limited = rt_.limit_cpu(s->id, spec.vcpu);
    if (limited) limited = rt_.limit_memory(s->id, spec.memory_mib);
    if (!limited) {
      launcher_.discard(*s);
      return fail(limited.error());
    }
    t.lap("limits", sw);
  } else {
    LaunchRequest l;
    l.id = new_id("sbx");
    l.project_id = p.project_id;
    l.rootfs = rootfs;
    // A snapshot's image: on this node's disk, or fetched for this restore (tpl->image).
    if (snapshot_id) l.image = tpl && !tpl->image.empty() ? tpl->image : cfg_.snapshots_dir() + "/" + *snapshot_id;
    l.vcpu = spec.vcpu;
    l.memory_mib = spec.memory_mib;
    l.disk_gib = spec.disk_gib;
    l.network = network;
    // A template with a `start` command: its checkpoint holds the command already running.
    if (tpl && !snapshot_id) {
      const std::string& image = network ? tpl->net_image : tpl->image;
      if (!image.empty() && tpl->image_memory_mib == spec.memory_mib) l.image = image;
    }
    auto launched = pools_.launch(l, t, sw);
    if (!launched) return fail(launched.error());
    s = *launched;
    if (tpl && !snapshot_id && l.image.empty() && tpl->start) {
      if (auto r = tpl->start(*s); !r) {
        launcher_.discard(*s);
        // The request was fine; the template's start is what failed.
        return fail(ErrorCode::kInternal, "template " + tname + ": its start command did not come up: " + r.error().message);
      }
      t.lap("template_start", sw);
    }
  }
  // Its egress before anyone can run a command in it (a public pool member has it already).
  if (network) {
    if (auto r = launcher_.apply_egress(*s, {spec.egress.mode, spec.egress.allow}); !r) {
      launcher_.discard(*s);
      return fail(r.error());
    }
    t.lap("egress", sw);
  }
  const int64_t now = now_unix_ms();
  s->last_activity_ms = now;
  {
    std::lock_guard lk(s->mu);
    store::SandboxRecord& r = s->rec;
    r.id = s->id;
    r.project_id = p.project_id;
    r.template_name = tname;
    r.template_id = tpl ? tpl->id : "";
    r.snapshot_id = snapshot_id;
    r.vcpu = spec.vcpu;
    r.memory_mib = spec.memory_mib;
    r.disk_gib = spec.disk_gib;
    r.timeout_s = spec.timeout_s;
    r.on_idle = spec.on_idle;
    r.env = spec.env;
    r.secrets = spec.secrets;
    r.metadata = spec.metadata;
    r.ports.clear();
    for (auto& pt : spec.ports) r.ports.push_back({pt.port, pt.is_public});
    r.api_scopes = spec.api.scopes;
    r.spend_cap_micros.reset();
    if (spec.api.spend_cap_usd) r.spend_cap_micros = usd_to_micros(*spec.api.spend_cap_usd);
    r.egress_mode = spec.egress.mode;
    r.egress_allow = spec.egress.allow;
    r.forkable = spec.forkable;
    r.open_ports = spec.open_ports;
    r.created_ms = r.started_ms = r.last_activity_ms = now;
    r.hostname = s->hostname;
    r.rootfs = rootfs;
    r.budget_id = *budget;
  }
  if (auto r = publish({s}); !r) return fail(r.error());
  t.lap("store", sw);
  spdlog::info("sandbox {}: running (project {}, template {})", s->id, p.project_id, tname);
  return view(*s);
}

// ---- update ----

Result<json> Lifecycle::update(const Principal& p, const std::string& id, const UpdateRequest& u, Timing& t) {
  Stopwatch sw;
  auto found = running(p, id);  // running or paused: a live sandbox
  if (!found) return fail(found.error());
  auto s = *found;
  if (u.timeout_s) {
    // From now: the sandbox lives timeout_s more seconds without API activity.
    int before_timeout = 0;
    {
      std::lock_guard lk(s->mu);
      if (s->rec.ended()) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is stopped, not running");
      before_timeout = s->rec.timeout_s;
      s->rec.timeout_s = *u.timeout_s;
    }
    s->last_activity_ms = now_unix_ms();
    if (auto r = persist(*s); !r) {
      std::lock_guard lk(s->mu);
      s->rec.timeout_s = before_timeout;
      return fail(r.error());
    }
    t.lap("store", sw);
  }
  if (!u.egress) return view(*s);
  // One change of this sandbox's egress at a time, each stored, then applied, in order.
  std::lock_guard change(s->egress_change_mu);
  store::SandboxRecord before;
  {
    std::lock_guard lk(s->mu);
    if (s->rec.ended()) return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is stopped, not running");
    before = s->rec;
  }
  if (!s->networked || before.egress_mode == "deny")
    return fail(ErrorCode::kConflict, "sandbox " + id +
                                          " was created with egress deny: it has no network, and deny is fixed at "
                                          "create (create it with public or allowlist to change its egress later)");
  auto set_egress = [&](const std::string& mode, const std::vector<std::string>& allow) {
    std::lock_guard lk(s->mu);
    s->rec.egress_mode = mode;
    s->rec.egress_allow = allow;
  };
  set_egress(u.egress->mode, u.egress->allow);
  if (auto r = persist(*s); !r) {
    set_egress(before.egress_mode, before.egress_allow);
    return fail(r.error());
  }
  t.lap("store", sw);
  if (auto r = launcher_.apply_egress(*s, {u.egress->mode, u.egress->allow}); !r) {
    // The old policy is still the one in force: the record says so again.
    set_egress(before.egress_mode, before.egress_allow);
    if (auto back = persist(*s); !back) spdlog::error("sandbox {}: {}", id, back.error().message);
    return fail(r.error().wrap("changing the egress of " + id));
  }
  t.lap("egress", sw);
  spdlog::info("sandbox {}: egress now {} ({} entries)", id, u.egress->mode, u.egress->allow.size());
  return view(*s);
}

// ---- read ----

Result<json> Lifecycle::get(const Principal& p, const std::string& id) {
  if (auto s = registry_.find(p.project_id, id)) return view(*s);
  auto row = store_.get_sandbox(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(not_found(id));
  std::optional<double> spent;
  if (!(*row)->budget_id.empty() && spent_) spent = spent_((*row)->budget_id);
  return sandbox_object(**row, now_unix_ms(), spent, port_urls_);
}

Result<json> Lifecycle::list(const Principal& p, store::SandboxQuery q) {
  q.project_id = p.project_id;
  auto rows = store_.list_sandboxes(q);
  if (!rows) return fail(rows.error());
  json data = json::array();
  const bool more = static_cast<int>(rows->size()) > q.limit;
  if (more) rows->pop_back();
  const int64_t now = now_unix_ms();
  for (auto& r : *rows) {
    if (auto s = registry_.find(p.project_id, r.id)) {
      data.push_back(view(*s));
      continue;
    }
    std::optional<double> spent;
    if (!r.budget_id.empty() && spent_) spent = spent_(r.budget_id);
    data.push_back(sandbox_object(r, now, spent, port_urls_));
  }
  return json{{"object", "list"}, {"data", data}, {"next_cursor", more ? json(rows->back().id) : json(nullptr)}};
}

// ---- delete, pause, resume ----

Result<json> Lifecycle::remove(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  if (auto s = registry_.find(p.project_id, id)) {
    finish(s, Transition::kStop, store::StopReason::kDeleted, "");
    t.lap("stop", sw);
    return view(*s);
  }
  auto r = get(p, id);  // already stopped: answer with the record as it is
  t.lap("lookup", sw);
  return r;
}

Result<json> Lifecycle::pause(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto s = running(p, id);
  if (!s) return fail(s.error());
  if (auto r = pause_live(**s, "requested"); !r) return fail(r.error());
  t.lap("pause", sw);
  return view(**s);
}

Result<json> Lifecycle::resume(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto sr = running(p, id);
  if (!sr) return fail(sr.error());
  LiveSandbox& s = **sr;
  Awake a = awake(s);
  bool resumed = false;
  {
    std::lock_guard lk(s.mu);
    // Resuming a running sandbox changes nothing, also while it is being saved (it runs on).
    if (s.rec.state != State::kRunning && s.rec.state != State::kCheckpointing) {
      auto next = next_state(s.rec.state, Transition::kBeginResume, s.id);
      if (!next) return fail(next.error());
      s.rec.state = *next;
      resumed = true;
    }
  }
  if (resumed) {
    if (auto r = rt_.resume(id); !r) {
      (void)transition(s, Transition::kResumeFailed);
      return fail(r.error());
    }
    const int64_t now = now_unix_ms();
    {
      std::lock_guard lk(s.mu);
      auto next = next_state(s.rec.state, Transition::kResumed, s.id);
      if (!next) return fail(next.error());
      s.rec.state = *next;
      s.rec.paused_total_ms += now - s.rec.paused_since_ms.value_or(now);
      s.rec.paused_since_ms.reset();
    }
    s.last_activity_ms = now;
    if (auto r = persist(s); !r) return fail(r.error());
    spdlog::info("sandbox {}: resumed", id);
  }
  touch(s);
  t.lap("resume", sw);
  return view(s);
}

// ---- failures and restarts ----

// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_failures = metrics::metrics().counter(
    "b3os_sandbox_failures_total",
    "sandboxes that failed, by kind: out_of_memory, pids_limit, agent_protocol, agent_killed, agent_exited, agent_unresponsive, gofer_killed, "
    "runtime_killed, runtime_exited, not_recovered (after a restart)",
    {"kind"});

void count_failure(std::string_view kind) {
  m_failures.with({std::string(kind)}).inc();
}

// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_reconnects = metrics::metrics().counter(
    "b3os_channel_reconnects_total",
    "agent channels taken back from their shims after b3osd restarted, by outcome (ok: the sandbox was reattached; "
    "failed: it was failed)",
    {"outcome"});

void count_reconnect(bool ok) {
  m_reconnects.with({ok ? "ok" : "failed"}).inc();
}

static auto& m_shim_restarts = metrics::metrics().counter(
    "b3os_shim_restarts_total",
    "shims (the holders of a sandbox's agent channel and drains of its log) found gone and started again, by "
    "outcome (ok; failed: tried again 5 s later)",
    {"outcome"});

void count_shim_restart(bool ok) {
  m_shim_restarts.with({ok ? "ok" : "failed"}).inc();
}

namespace {
// "Killed" for 9; thread-safe, unlike strsignal, and never null.
std::string signal_text(int sig) {
  const char* d = sigdescr_np(sig);
  return d ? d : "unknown signal";
}
}  // namespace

std::string Lifecycle::diagnose_exit(const std::string& id, std::string* kind) {
  std::string ignored;
  if (!kind) kind = &ignored;
  // A cgroup that hit its memory limit is the common cause; say so plainly.
  const runtime::MemoryUse m = rt_.memory_use(id);
  // The kernel's count of OOM kills when it has one: with file data on disk the cgroup fills
  // to its limit with page cache and reclaims it, so a peak at the limit proves nothing.
  const bool oom = m.oom_kills >= 0 ? m.oom_kills > 0 : m.limit_bytes > 0 && m.peak_bytes >= m.limit_bytes - (4 << 20);
  if (oom) {
    *kind = "out_of_memory";
    return "the sandbox used all of its memory (limit " + std::to_string(m.limit_bytes >> 20) +
           " MiB including the runtime) and was stopped; create it with a larger memory_mib";
  }
  // A sandbox that started processes past its pids cgroup's limit: gVisor cannot make the host
  // threads it needs, and the whole sandbox stops (nothing else on the node is touched).
  if (const runtime::Runtime::PidsUse p = rt_.pids_use(id); p.refused > 0) {
    *kind = "pids_limit";
    return "the sandbox reached its limit of " + std::to_string(p.limit) +
           " host processes and threads (about half as many processes inside; sized by memory_mib) and was stopped";
  }
  // gVisor's sandbox process exits with the agent's status when the agent (PID 1) dies, and
  // is killed by a signal only when something on the host killed it.
  if (auto st = rt_.exit_status(id, 1s)) {
    // When the gofer (the host process serving the root filesystem) dies, the sandbox kills
    // its processes and exits as if the agent had been killed; the gofer ends by itself, after
    // the sandbox, in every other case, so a gofer killed by a signal is the cause.
    if (auto g = WIFEXITED(*st) && WEXITSTATUS(*st) > 128 ? rt_.gofer_exit_status(id, 200ms) : std::optional<int>();
        g && WIFSIGNALED(*g)) {
      *kind = "gofer_killed";
      return "the sandbox's file server (its runsc gofer process) was killed on the host by signal " +
             std::to_string(WTERMSIG(*g)) + " (" + signal_text(WTERMSIG(*g)) + "), which stops the sandbox";
    }
    if (WIFEXITED(*st) && WEXITSTATUS(*st) > 128) {
      *kind = "agent_killed";
      return "the agent (PID 1) was killed by signal " + std::to_string(WEXITSTATUS(*st) - 128) +
             " (" + signal_text(WEXITSTATUS(*st) - 128) + "), which stops the sandbox";
    }
    if (WIFEXITED(*st)) {
      *kind = "agent_exited";
      return "the agent (PID 1) exited with status " + std::to_string(WEXITSTATUS(*st)) + ", which stops the sandbox";
    }
    if (WIFSIGNALED(*st)) {
      *kind = "runtime_killed";
      return "the sandbox's runtime process was killed on the host by signal " + std::to_string(WTERMSIG(*st)) +
             " (" + signal_text(WTERMSIG(*st)) + ")";
    }
  }
  *kind = "runtime_exited";
  return "the sandbox's runtime exited unexpectedly";
}

void Lifecycle::on_channel_closed(const std::string& id, const std::string& why) {
  auto s = registry_.find(id);
  if (!s) return;
  std::string kind;
  // b3osd broke the channel itself because the agent did not follow the protocol (the agent
  // is alive: asking the runtime how it ended would wait and then name the wrong cause).
  constexpr std::string_view kViolation = "protocol violation: ";
  std::string msg = why.rfind(kViolation, 0) == 0
                        ? "the sandbox's agent broke the channel's protocol (" + why.substr(kViolation.size()) +
                              "), so the sandbox was stopped"
                        : diagnose_exit(id, &kind);
  if (why.rfind(kViolation, 0) == 0) kind = "agent_protocol";
  spdlog::warn("sandbox {}: agent channel closed ({}): {}", id, why, msg);
  // Counted only when this ended it (a delete racing the failure ends it first).
  if (finish(s, Transition::kFail, store::StopReason::kFailed, msg)) count_failure(kind);
}

Result<void> Lifecycle::recover() {
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
  sweep_rootfs_cache(cfg_);
  // Snapshot images no record owns: a b3osd killed mid-snapshot (the record is written after
  // the image, so a crash between the two leaves an image nobody can use or delete).
  if (auto ids = store_.snapshot_ids()) {
    std::set<std::string> known(ids->begin(), ids->end());
    for (auto it = fs::directory_iterator(cfg_.snapshots_dir(), ec); !ec && it != fs::directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("snp_", 0) != 0 || known.count(name)) continue;
      std::error_code rm;
      fs::remove_all(it->path(), rm);
      spdlog::warn("removed the snapshot image {} (no record owns it: a snapshot cut short){}", name,
                   rm ? ": " + rm.message() : "");
    }
    ec.clear();
  } else {
    spdlog::warn("not sweeping snapshot images: {}", ids.error().message);
  }
  rt_.prepare();
  auto rows = store_.active_sandboxes();
  if (!rows) return fail(rows.error());
  // Each reattach waits on its own runtime and agent; a few at a time keep a restart with
  // many sandboxes short.
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const size_t n = std::min<size_t>(kReattachThreads, rows->size());
  for (size_t w = 0; w < n; ++w)
    workers.emplace_back([&] {
      for (size_t i = next++; i < rows->size(); i = next++) reattach((*rows)[i]);
    });
  for (auto& t : workers) t.join();
  return {};
}

void Lifecycle::reattach(const store::SandboxRecord& row) {
  auto s = std::make_shared<LiveSandbox>();
  s->id = row.id;
  s->hostname = row.hostname;
  s->rec = row;
  s->last_activity_ms = row.last_activity_ms;
  s->persisted_activity_ms = row.last_activity_ms;
  const std::string dir = launcher_.dir_of(row.id);
  s->shim_pid = shims_.recorded_pid(dir);
  launcher_.adopt(row.id);  // the launcher releases it when it ends, never an orphan sweep
  std::string why;
  // The last b3osd may have left it frozen idle (it knew; this one does not): thawed before
  // anything asks the container or the agent. A paused one is resumed and paused again below,
  // as before; a running one is frozen again once its agent reports idle and the grace passed.
  rt_.set_frozen(row.id, false);
  auto st = rt_.state(row.id);
  const bool paused = st && *st == runtime::ContainerState::kPaused;
  if (!st || (*st != runtime::ContainerState::kRunning && !paused)) {
    why = "its container was gone when b3osd restarted";
  } else if (paused && !rt_.resume(row.id)) {
    why = "its paused container could not be thawed after b3osd restarted";
  } else if (auto held = shims_.reclaim(dir); !held) {
    why = "its agent channel could not be recovered after b3osd restarted (" + held.error().message + ")";
  } else {
    auto watched = shims_.watch(dir);
    if (watched.fd) {  // else it is never replaced, and the pipe stays the shim's alone
      s->shim_pid = watched.pid;
      s->shim_watch = std::move(watched.fd);
      s->log_rd = std::move(held->log);
    }
    s->channel = launcher_.attach(std::move(held->channel), s);
    if (auto r = s->channel->resync(3s, /*cut_frame=*/true); !r) {
      why = "its agent did not answer after b3osd restarted (" + r.error().message + ")";
    } else {
      launcher_.request_idle_reports(*s);
      if (paused && !rt_.pause(row.id)) why = "its container could not be paused again after b3osd restarted";
    }
  }
  // Its namespace outlived b3osd; the firewall table was made anew at start, so its egress
  // is applied again, as stored.
  if (why.empty() && row.egress_mode != "deny") {
    if (!launcher_.network()) {
      why = "it has a network, and b3osd restarted without sandbox networks (--network off)";
    } else if (auto slot = launcher_.network()->recover(row.id); !slot) {
      why = "its network could not be recovered after b3osd restarted (" + slot.error().message + ")";
    } else {
      s->networked = true;
      if (auto r = launcher_.apply_egress(*s, {row.egress_mode, row.egress_allow}); !r)
        why = "its egress could not be applied again after b3osd restarted (" + r.error().message + ")";
    }
  }
  if (why.empty()) {
    // A b3osd that died mid-fork may have left the limit raised for the fork's image.
    if (auto r = rt_.limit_memory(row.id, row.memory_mib); !r) spdlog::warn("sandbox {}: {}", row.id, r.error().message);
    s->quiet_since_ms = steady_ms();  // not shared yet
    registry_.add(s);
    count_reconnect(true);
    spdlog::info("sandbox {}: reattached", row.id);
  } else {
    count_reconnect(false);
    if (finish(s, Transition::kFail, store::StopReason::kFailed, why)) count_failure("not_recovered");
  }
}

std::vector<std::string> Lifecycle::orphans() {
  // Containers, directories and disks that are not the launcher's: a create cut short by a
  // crash, pool members of the b3osd that died. Every live sandbox is the launcher's
  // (launched, or adopted at reattach), as are pool members and launches in flight, so this
  // may run at any time.
  std::set<std::string> found;
  auto take = [&](const std::string& id) {
    if (!launcher_.owns(id)) found.insert(id);
  };
  if (auto ids = rt_.list())
    for (auto& id : *ids) take(id);
  std::error_code ec;
  for (auto& e : fs::directory_iterator(cfg_.sandboxes_dir(), ec)) take(e.path().filename().string());
  if (auto disks = rt_.list_disks())
    for (auto& id : *disks) take(id);
  if (launcher_.network())
    for (auto& id : launcher_.network()->list()) take(id);
  // What the last pass removed, once more: a `runsc create` the dead b3osd started outlives
  // it, and when it was removed mid-way it can still make the container's cgroups after (with
  // no container, directory or disk left for a pass to find them by). Removing a container or
  // cgroups that are gone is a no-op.
  std::lock_guard lk(orphans_mu_);
  for (const auto& id : released_last_) take(id);
  return {found.begin(), found.end()};
}

void Lifecycle::release_orphans(const std::vector<std::string>& ids) {
  {
    // Each orphan is removed by two passes (10 s apart at start), not more.
    std::lock_guard lk(orphans_mu_);
    std::set<std::string> now;
    for (const auto& id : ids)
      if (!released_last_.count(id)) now.insert(id);
    released_last_ = std::move(now);
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (size_t w = 0; w < std::min<size_t>(kReattachThreads, ids.size()); ++w)
    workers.emplace_back([&] {
      for (size_t i = next++; i < ids.size(); i = next++) {
        spdlog::warn("removing orphaned sandbox {} (no record owns it)", ids[i]);
        launcher_.release(ids[i], -1);
      }
    });
  for (auto& t : workers) t.join();
}

void Lifecycle::collect_rootfs_cache() {
  if (!cfg_.object_store) return;
  auto snaps = store_.snapshot_rootfs();
  if (!snaps) return;  // without the snapshots' roots nothing is known to be unused
  std::set<std::string> in_use(snaps->begin(), snaps->end());
  for (auto& s : registry_.all()) {
    std::lock_guard lk(s->mu);
    in_use.insert(s->rec.rootfs);
  }
  ::b3os::sandbox::collect_rootfs_cache(cfg_, in_use, 3600 * 1000);
}

void Lifecycle::keep_shim(LiveSandbox& s) {
  if (auto r = launcher_.keep_shim(s)) count_shim_restart(*r);
}

// Its project's count of ended sandboxes is looked at in forget_ended's next turn (after the
// record is written, so that the turn sees it).
void Lifecycle::note_ended(const std::string& project_id) {
  std::lock_guard lk(ended_mu_);
  ended_in_.insert(project_id);
}

void Lifecycle::forget_ended() {
  // A statement per 5,000 records (the store's lock is held for one), at most 20 a turn: a
  // backlog goes over a few turns, never in one long hold. The count is looked at for the
  // projects a sandbox ended in since the last turn (all of them at the first).
  constexpr int kBatch = 5000, kBatchesPerTurn = 20;
  std::vector<std::string> projects;
  if (!ended_projects_known_) {  // only this thread reads or sets it
    auto all = store_.ended_projects();  // outside ended_mu_: finish() must not wait on the store
    if (!all) {
      spdlog::warn("forgetting ended sandboxes: {}", all.error().message);
      return;
    }
    std::lock_guard lk(ended_mu_);
    ended_in_.insert(all->begin(), all->end());
    ended_projects_known_ = true;
  }
  {
    std::lock_guard lk(ended_mu_);
    projects.assign(ended_in_.begin(), ended_in_.end());
    ended_in_.clear();
  }
  const auto retention_ms = static_cast<int64_t>(cfg_.ended_retention_hours * 3600.0 * 1000.0);
  const int64_t before = now_unix_ms() - retention_ms;
  int64_t total = 0;
  int batches = 0;
  auto run = [&](const std::function<Result<int64_t>()>& statement) {
    while (batches < kBatchesPerTurn) {
      ++batches;
      auto n = statement();
      if (!n) {
        spdlog::warn("forgetting ended sandboxes: {}", n.error().message);
        return false;
      }
      total += *n;
      if (*n < kBatch) return true;
    }
    return false;  // more than a turn's share: the rest next turn
  };
  bool done = run([&] { return store_.forget_ended_before(before, kBatch); });
  for (size_t i = 0; i < projects.size(); ++i) {
    if (!done || !run([&] { return store_.forget_ended_past(projects[i], cfg_.ended_max_per_project, kBatch); })) {
      // Not finished: those projects are looked at again next turn.
      std::lock_guard lk(ended_mu_);
      ended_in_.insert(projects.begin() + static_cast<std::ptrdiff_t>(i), projects.end());
      break;
    }
  }
  if (total > 0)
    spdlog::info("forgot {} ended sandboxes (ended over {:g} h ago, or past their project's newest {})", total,
                 cfg_.ended_retention_hours, cfg_.ended_max_per_project);
}

void Lifecycle::collect_object_store() {
  if (!cfg_.object_store) return;
  auto stale = store_.stale_object_roots(cfg_.object_root_grace_ms);
  if (!stale) {
    spdlog::warn("object store: cannot list its roots to collect: {}", stale.error().message);
    return;
  }
  // Every node runs this; the store's lock per root makes one of them remove it.
  for (const auto& key : *stale) {
    auto r = store_.collect_object_root(key, cfg_.object_root_grace_ms, [&]() -> Result<void> {
      return objstore::remove_set(*cfg_.object_store, key, cfg_.fork_images_dir());
    });
    if (!r)
      spdlog::warn("object store: collecting {}: {}", key, r.error().message);
    else if (*r)
      spdlog::info("object store: removed {} (no snapshot or template refers to it, no node asked for it in {} min)", key,
                   cfg_.object_root_grace_ms / 60000);
  }
}

void Lifecycle::begin_move(const std::shared_ptr<LiveSandbox>& s) {
  {
    std::lock_guard lk(moving_mu_);
    moving_.insert(s->id);
  }
  // Out of the registry before its channel closes: the close is not a failure of the sandbox.
  registry_.remove(s->id);
  launcher_.discard(*s);
}

void Lifecycle::end_move(const std::string& id) {
  std::lock_guard lk(moving_mu_);
  moving_.erase(id);
}

Result<std::shared_ptr<LiveSandbox>> Lifecycle::relaunch(const store::SandboxRecord& rec, const std::string& rootfs,
                                                         const std::string& image, Timing& t,
                                                         const std::function<Result<void>()>& last_check) {
  Stopwatch sw;
  const Size size{rec.memory_mib, rec.vcpu, rec.disk_gib};
  if (auto r = registry_.reserve(rec.project_id, 1, size); !r) return fail(r.error());
  Reservation reserved(registry_, rec.project_id, 1, size);
  LaunchRequest l;
  l.id = rec.id;  // the same sandbox: its id, its record and everything in its image
  l.project_id = rec.project_id;
  l.rootfs = rootfs;
  l.image = image;
  l.vcpu = rec.vcpu;
  l.memory_mib = rec.memory_mib;
  l.disk_gib = rec.disk_gib;
  l.from_pool = false;  // a pooled container has an id of its own
  l.network = rec.egress_mode != "deny";
  if (l.network && !launcher_.network())
    return fail(ErrorCode::kProductUnavailable, "sandbox " + rec.id + " has egress \"" + rec.egress_mode +
                                                    "\" and this node runs without sandbox networks");
  auto launched = pools_.launch(l, t, sw);
  if (!launched) return fail(launched.error());
  auto s = *launched;
  if (l.network)
    if (auto r = launcher_.apply_egress(*s, {rec.egress_mode, rec.egress_allow}); !r) {
      launcher_.discard(*s);
      return fail(r.error());
    }
  if (last_check)
    if (auto r = last_check(); !r) {
      launcher_.discard(*s);
      return fail(r.error());
    }
  {
    std::lock_guard lk(s->mu);
    const State launched_state = s->rec.state;
    s->rec = rec;
    s->rec.state = launched_state;
    s->rec.rootfs = rootfs;
    s->rec.node_id.clear();  // this node's (the store names it)
  }
  s->last_activity_ms = now_unix_ms();
  if (auto r = publish({s}); !r) return fail(r.error());
  return s;
}

Result<void> Lifecycle::restore_moved(const store::SandboxRecord& rec, const std::string& rootfs, const std::string& image,
                                      Timing& t) {
  auto s = relaunch(rec, rootfs, image, t);
  if (s) return {};
  store::SandboxRecord ended = rec;
  ended.state = State::kFailed;
  ended.stop_reason = store::StopReason::kFailed;
  ended.stopped_ms = now_unix_ms();
  ended.stop_message = "moving it to another node failed, and so did restoring it here: " + s.error().message;
  if (auto r = store_.put_sandbox(ended); !r) spdlog::error("sandbox {}: {}", rec.id, r.error().message);
  note_ended(rec.project_id);
  // Its minted preview URLs end with it, as finish() does for every sandbox.
  if (auto r = store_.delete_port_tokens(rec.id); !r) spdlog::warn("sandbox {}: {}", rec.id, r.error().message);
  return fail(s.error());
}

}  // namespace b3os::sandbox
