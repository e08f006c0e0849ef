// SandboxService: fork, pause/resume and snapshots (everything built on checkpoints).
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

namespace {

// A checkpoint's image is written by the source's own sentry, so its pages (page cache on disk,
// or tmpfs) are charged to the source's memory cgroup on top of the memory they copy, for as
// long as they stay cached. A sandbox near its limit would be killed mid-checkpoint. While
// images are charged to it, its limit gets one more limit's worth per image in flight (an
// image is never larger than the memory it copies), and is set back when the last one is gone.
// The host must have that memory either way: the image has to exist somewhere.
class ImageRoom {
 public:
  /// `mu` and `holders` are the sandbox's: concurrent forks and snapshots of one sandbox share
  /// the raise, and the last one out sets the limit back.
  ImageRoom(runtime::Runsc& runsc, std::mutex& mu, int& holders, const std::string& id, int memory_mib)
      : runsc_(runsc), mu_(mu), holders_(holders), id_(id), normal_(runsc.memory_limit_bytes(memory_mib)) {
    std::lock_guard lk(mu_);
    ++holders_;
    held_ = true;
    if (auto r = runsc_.set_memory_limit(id_, normal_ * (1 + holders_)); !r)
      spdlog::warn("sandbox {}: {}; checkpointing within its own limit", id_, r.error().message);
  }
  ImageRoom(const ImageRoom&) = delete;
  ImageRoom& operator=(const ImageRoom&) = delete;
  ~ImageRoom() { release(); }
  /// This image no longer needs room (removed, or written back and dropped from the cache).
  /// The limit is never lowered while another image is charged; the last one out sets it back
  /// and forgets the peak the images made (diagnose_exit reads it to tell an OOM).
  void release() {
    std::lock_guard lk(mu_);
    if (!held_) return;
    held_ = false;
    if (--holders_ > 0) return;
    if (auto r = runsc_.set_memory_limit(id_, normal_); !r) {
      spdlog::warn("sandbox {}: {} (the limit stays raised until b3osd restarts)", id_, r.error().message);
      return;
    }
    runsc_.reset_memory_peak(id_);
  }

 private:
  runtime::Runsc& runsc_;
  std::mutex& mu_;
  int& holders_;
  std::string id_;
  int64_t normal_;
  bool held_ = false;
};

// Writes a finished image to disk (data, then the directory entry) and drops its pages from the
// cache, so they are no longer charged to the source and a snapshot survives a host crash.
Result<void> sync_image(const std::string& dir) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || ec) continue;
    UniqueFd f(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!f || ::fdatasync(f.get()) != 0) return fail(errno_error(ErrorCode::kInternal, "syncing " + it->path().string(), errno));
    (void)::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  if (ec) return fail(ErrorCode::kInternal, "listing " + dir + ": " + ec.message());
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) return fail(errno_error(ErrorCode::kInternal, "syncing " + dir, errno));
  return {};
}

}  // namespace

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
  return create_launched(p, spec, d["template"].value("name", "base"), d["_b3os"].value("rootfs", ""), (*row)->id, t, sw,
                         d["_b3os"].value("budget_id", ""));
}

Result<json> SandboxService::fork(const Principal& p, const std::string& id, int count,
                                  const std::optional<std::map<std::string, std::string>>& metadata, Timing& t) {
  Busy hold_refills(*this);
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

  // One checkpoint of the source, restored into each fork; the image is removed at the end,
  // and then the source's memory limit is set back (the room outlives the image).
  const std::string image = cfg_.fork_images_dir() + "/" + new_id("img");
  std::error_code ec;
  fs::create_directories(image, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + image + ": " + ec.message());
  ImageRoom room(runsc_, src->room_mu, src->image_rooms, src->id, src_doc.value("memory_mib", 512));
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
                       {"forked_from", id}, {"budget_id", src_doc["_b3os"].value("budget_id", "")}};
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
  // The spec names four phases while the source is held: pause, base, snapshot, export. One
  // checkpoint writes everything here (memory, and the root overlay inside it), so there is no
  // base image to write first and no disk to export after; both are reported as taking no
  // time, so that the four phases still add up to the time the source was held.
  t.add("base", 0);
  if (auto r = runsc_.checkpoint(s.id, dir); !r) return r;
  t.lap("snapshot", sw);
  t.add("export", 0);
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
  // Declared before the directory's removal, so that on failure the image goes first.
  ImageRoom room(runsc_, src->room_mu, src->image_rooms, src->id, src_doc.value("memory_mib", 512));
  ScopeExit remove_dir([&] {
    std::error_code e;
    fs::remove_all(dir, e);
  });
  if (auto r = checkpoint_into(*src, dir, t, sw); !r) return fail(r.error().wrap("snapshotting " + id));
  if (auto r = sync_image(dir); !r) return fail(r.error().wrap("snapshotting " + id));
  room.release();
  t.lap("sync", sw);
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
              {"_b3os", {{"rootfs", src_doc["_b3os"].value("rootfs", "")},
                         {"budget_id", src_doc["_b3os"].value("budget_id", "")}}}};
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

}  // namespace b3os::sandbox
