#include "daemon/sandbox/checkpoints.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "daemon/sandbox/remote_images.h"
#include "daemon/sandbox/view.h"

namespace b3os::sandbox {

using nlohmann::json;
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
  /// Concurrent forks and snapshots of one sandbox share the raise, and the last one out sets
  /// the limit back.
  ImageRoom(runtime::Runtime& rt, LiveSandbox& s, int memory_mib)
      : rt_(rt), s_(s), normal_(rt.memory_limit_bytes(memory_mib)) {
    std::lock_guard lk(s_.room_mu);
    ++s_.image_rooms;
    held_ = true;
    if (auto r = rt_.set_memory_limit(s_.id, normal_ * (1 + s_.image_rooms)); !r)
      spdlog::warn("sandbox {}: {}; checkpointing within its own limit", s_.id, r.error().message);
  }
  ImageRoom(const ImageRoom&) = delete;
  ImageRoom& operator=(const ImageRoom&) = delete;
  ~ImageRoom() { release(); }
  /// This image no longer needs room (removed, or written back and dropped from the cache).
  /// The limit is never lowered while another image is charged; the last one out sets it back
  /// and forgets the peak the images made (diagnose_exit reads it to tell an OOM).
  void release() {
    std::lock_guard lk(s_.room_mu);
    if (!held_) return;
    held_ = false;
    if (--s_.image_rooms > 0) return;
    if (auto r = rt_.set_memory_limit(s_.id, normal_); !r) {
      spdlog::warn("sandbox {}: {} (the limit stays raised until b3osd restarts)", s_.id, r.error().message);
      return;
    }
    rt_.reset_memory_peak(s_.id);
  }

 private:
  runtime::Runtime& rt_;
  LiveSandbox& s_;
  int64_t normal_;
  bool held_ = false;
};

// The directory of one image, removed on every path unless kept (a snapshot's, once recorded).
// Declared after the sandbox's ImageRoom, so the image goes before the room is given back.
class ImageDir {
 public:
  explicit ImageDir(std::string path) : path_(std::move(path)) {}
  ImageDir(const ImageDir&) = delete;
  ImageDir& operator=(const ImageDir&) = delete;
  ~ImageDir() {
    std::error_code ec;
    if (!kept_) fs::remove_all(path_, ec);
  }
  Result<void> create() {
    std::error_code ec;
    fs::create_directories(path_, ec);
    if (ec) return fail(ErrorCode::kInternal, "creating " + path_ + ": " + ec.message());
    return {};
  }
  void keep() { kept_ = true; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool kept_ = false;
};

// Writes a finished image to disk (data, then the directory entry) and drops its pages from the
// cache, so they are no longer charged to the source and a snapshot survives a host crash.
Result<void> sync_image(const std::string& dir) {
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec) || ec) continue;
    UniqueFd f(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!f || ::fdatasync(f.get()) != 0)
      return fail(errno_error(ErrorCode::kInternal, "syncing " + it->path().string(), errno));
    (void)::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);
  }
  if (ec) return fail(ErrorCode::kInternal, "listing " + dir + ": " + ec.message());
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) return fail(errno_error(ErrorCode::kInternal, "syncing " + dir, errno));
  return {};
}

// A checkpoint that failed on a full filesystem says so: runsc 20240729 reports a failed image
// write as a Go panic (nil pointer dereference and its stack trace), not as ENOSPC. The image's
// partial files are still there when this runs, so a filesystem with (almost) nothing free is
// what stopped it. 503 capacity_unavailable: the node has no room for the image.
std::optional<Error> out_of_space(const std::string& dir) {
  const auto free_bytes = free_disk_bytes(dir);
  if (!free_bytes || *free_bytes >= (64ull << 20)) return std::nullopt;
  return Error{ErrorCode::kCapacityUnavailable,
               "the node's data disk is full: the checkpoint image could not be written to " +
                   fs::path(dir).parent_path().string() + " (" + std::to_string(*free_bytes >> 10) +
                   " KiB free); the sandbox runs on, nothing was kept",
               ENOSPC};
}

}  // namespace

Result<void> Checkpoints::write_image(LiveSandbox& s, const std::string& dir, Timing& t, Stopwatch& sw) {
  auto quiet = s.channel->quiesce();
  if (!quiet) return fail(quiet.error());
  t.lap("pause", sw);
  // The spec names four phases while the source is held: pause, base, snapshot, export. One
  // checkpoint writes everything here (memory, and the root overlay inside it), so there is no
  // base image to write first and no disk to export after; both are reported as taking no
  // time, so that the four phases still add up to the time the source was held.
  t.add("base", 0);
  if (auto r = rt_.checkpoint(s.id, dir); !r) {
    if (auto full = out_of_space(dir)) {
      const std::string& m = r.error().message;
      spdlog::warn("sandbox {}: {} (the runtime said: {})", s.id, full->message, m.substr(0, m.find('\n')));
      return fail(*full);
    }
    return r;
  }
  t.lap("snapshot", sw);
  t.add("export", 0);
  return {};
}

Result<void> Checkpoints::checkpoint_into(LiveSandbox& s, const std::string& dir, Timing& t, Stopwatch& sw,
                                          bool spare) {
  {
    std::lock_guard lk(s.mu);
    auto next = next_state(s.rec.state, Transition::kBeginCheckpoint, s.id);
    if (!next) return fail(next.error());
    s.rec.state = *next;
    ++s.checkpoints;
    if (spare) ++s.spare_checkpoints;
  }
  ScopeExit end([&] {
    std::lock_guard lk(s.mu);
    if (spare) --s.spare_checkpoints;
    if (--s.checkpoints == 0)
      if (auto next = next_state(s.rec.state, Transition::kEndCheckpoint, s.id)) s.rec.state = *next;
  });
  return write_image(s, dir, t, sw);
}

LaunchRequest Checkpoints::fork_launch(const store::SandboxRecord& base, const std::string& image) const {
  LaunchRequest l;
  l.id = new_id("sbx");
  l.rootfs = base.rootfs.empty() ? lifecycle_.template_rootfs(base.template_name) + "/rootfs" : base.rootfs;
  l.vcpu = base.vcpu;
  l.memory_mib = base.memory_mib;
  l.disk_gib = base.disk_gib;  // its own disk, as large as the source's, filled by the restore
  l.image = image;
  l.network = base.egress_mode != "deny";  // a namespace of its own, same inner addresses
  return l;
}

Result<json> Checkpoints::fork(const Principal& p, const std::string& id, int count,
                               const std::optional<std::map<std::string, std::string>>& metadata, Timing& t) {
  Pools::Hold hold_refills(pools_);
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto src = *sr;
  store::SandboxRecord base;
  {
    std::lock_guard lk(src->mu);
    base = src->rec;
  }
  if (base.state == State::kPaused || base.state == State::kResuming)
    return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is paused; resume it before forking");
  if (!base.forkable) return fail(ErrorCode::kForkUnavailable, "sandbox " + id + " was not created with forkable: true");
  const Size size{base.memory_mib, base.vcpu, base.disk_gib};
  if (auto r = registry_.reserve(p.project_id, count, size); !r) return fail(r.error());
  Reservation reserved(registry_, p.project_id, count, size);
  ActiveOp busy(*src);
  Awake awake = lifecycle_.awake(*src, false);  // a fork leaves its source as it was
  t.lap("validate", sw);

  std::vector<std::shared_ptr<LiveSandbox>> made;
  // A quiet source's fork claims spares made ahead (fork_ahead.h): the source is not held at
  // all, so the spec's four phases while it is held take no time.
  if (auto spares = claim_spares(src, base, count); !spares.empty()) {
    for (const char* ph : {"pause", "base", "snapshot", "export"}) t.add(ph, 0);
    t.lap("claim", sw);
    made = std::move(spares);
  } else {
  // One checkpoint of the source, restored into each fork; the image is removed at the end,
  // and then the source's memory limit is set back (the room outlives the image).
  ImageRoom room(rt_, *src, base.memory_mib);
  ImageDir image(cfg_.fork_images_dir() + "/" + new_id("img"));
  if (auto r = image.create(); !r) return fail(r.error());
  if (auto r = checkpoint_into(*src, image.path(), t, sw); !r) return fail(r.error().wrap("forking " + id));

  struct Outcome {
    Result<std::shared_ptr<LiveSandbox>> sandbox = fail(ErrorCode::kInternal, "not started");
    Timing timing;
  };
  std::vector<Outcome> outcomes(count);
  {
    std::vector<std::thread> workers;
    for (int i = 0; i < count; ++i) {
      workers.emplace_back([&, i] {
        LaunchRequest l = fork_launch(base, image.path());
        l.project_id = p.project_id;
        Stopwatch w;
        outcomes[i].sandbox = pools_.launch(l, outcomes[i].timing, w);
        // The source's egress, in the fork's own namespace, before anyone can reach it.
        if (outcomes[i].sandbox && l.network) {
          if (auto r = lifecycle_.apply_egress(**outcomes[i].sandbox, {base.egress_mode, base.egress_allow}); !r) {
            lifecycle_.discard(**outcomes[i].sandbox);
            outcomes[i].sandbox = fail(r.error());
          } else {
            outcomes[i].timing.lap("egress", w);
          }
        }
      });
    }
    for (auto& w : workers) w.join();
  }
  // All or nothing: one failed fork undoes the others.
  for (auto& o : outcomes) {
    if (o.sandbox) continue;
    Error e = o.sandbox.error();
    for (auto& other : outcomes)
      if (other.sandbox) lifecycle_.discard(**other.sandbox);
    return fail(e.wrap("forking " + id));
  }
  // The slowest fork's launch phases, under their own names ("restore" among them).
  const Timing* slowest = &outcomes[0].timing;
  for (auto& o : outcomes)
    if (o.timing.total() > slowest->total()) slowest = &o.timing;
  for (auto& ph : slowest->phases) t.add(ph.first == "create" ? "precreate" : ph.first, ph.second);
  for (auto& o : outcomes) made.push_back(*o.sandbox);
  }
  sw.reset();

  const int64_t now = now_unix_ms();
  for (auto& s : made) {
    s->last_activity_ms = now;
    std::lock_guard lk(s->mu);
    store::SandboxRecord r = base;
    r.id = s->id;
    r.state = State::kCreating;
    r.created_ms = r.started_ms = r.last_activity_ms = now;
    r.paused_since_ms.reset();
    r.paused_total_ms = 0;
    r.stopped_ms.reset();
    r.stop_reason.reset();
    r.stop_message.clear();
    r.hostname = s->hostname;
    r.forked_from = id;
    if (metadata) r.metadata = *metadata;
    s->rec = std::move(r);
  }
  if (auto r = lifecycle_.publish(made); !r) return fail(r.error());
  json data = json::array();
  for (auto& s : made) data.push_back(lifecycle_.view(*s));
  t.lap("store", sw);
  lifecycle_.touch(*src);
  spdlog::info("sandbox {}: forked into {}", id, count);
  return json{{"object", "list"}, {"data", data}, {"next_cursor", nullptr}};
}

namespace {

// A spare's first exec would pay the restored sentry's cold paths (the exec path's pages,
// the agent's spawn): paid here, in the background, by running the agent's own binary with
// --exit (never a program of the sandbox's disk, which its owner could make act differently).
Result<void> warm_up(LiveSandbox& s) {
  auto st = s.channel->open({{"op", "exec"},
                             {"argv", {"/.b3os/agent", "--exit"}},
                             {"env", json::object()},
                             {"cwd", "/"},
                             {"timeout_ms", 2000},
                             {"stdin", false},
                             {"max_output", 0}});
  if (!st) return fail(st.error());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto f = (*st)->next(deadline);
    if (!f) return fail(f.error().wrap("warming the spare up"));
    if (f->type == protocol::FrameType::kEnd) return {};
  }
}

}  // namespace

Result<Spare> Checkpoints::make_spare(const std::shared_ptr<LiveSandbox>& src) {
  uint64_t changes = 0;
  Awake awake = lifecycle_.freezer().hold_quiet(*src, changes);
  if (!awake) return fail(ErrorCode::kConflict, "sandbox " + src->id + " is in use");
  store::SandboxRecord base;
  {
    std::lock_guard lk(src->mu);
    base = src->rec;
  }
  if (!base.forkable || base.state != State::kRunning || src->moving.load())
    return fail(ErrorCode::kConflict, "sandbox " + src->id + " is not a running forkable sandbox");
  Timing t;
  Stopwatch sw;
  std::shared_ptr<LiveSandbox> spare;
  {
    ImageRoom room(rt_, *src, base.memory_mib);
    ImageDir image(cfg_.fork_images_dir() + "/" + new_id("img"));
    if (auto r = image.create(); !r) return fail(r.error());
    if (auto r = checkpoint_into(*src, image.path(), t, sw, true); !r)
      return fail(r.error().wrap("checkpointing " + src->id + " for a spare"));
    awake.release();  // the source may freeze again: the spare is restored from the image
    if (src->changes.load() != changes) return fail(ErrorCode::kConflict, "sandbox " + src->id + " changed meanwhile");
    LaunchRequest l = fork_launch(base, image.path());
    l.from_pool = false;  // the fork pool's containers are for users' forks
    l.defer_identity = true;
    auto launched = pools_.launch(l, t, sw);
    if (!launched) return fail(launched.error().wrap("restoring a spare of " + src->id));
    spare = *launched;
  }
  auto undo = [&](Error e) -> Result<Spare> {
    lifecycle_.discard(*spare);
    return fail(std::move(e));
  };
  if (spare->networked)
    if (auto r = lifecycle_.apply_egress(*spare, {base.egress_mode, base.egress_allow}); !r) return undo(r.error());
  if (auto r = warm_up(*spare); !r) return undo(r.error());
  rt_.set_frozen(spare->id, true);
  if (src->changes.load() != changes)
    return undo(Error{ErrorCode::kConflict, "sandbox " + src->id + " changed meanwhile"});
  spdlog::debug("sandbox {}: spare {} made ({:.1f} ms)", src->id, spare->id, t.total());
  return Spare{src, changes, spare};
}

std::vector<std::shared_ptr<LiveSandbox>> Checkpoints::claim_spares(const std::shared_ptr<LiveSandbox>& src,
                                                                    const store::SandboxRecord& base, int count) {
  if (!fork_ahead_) return {};
  auto spares = fork_ahead_->take(src, count);
  if (spares.empty()) return {};
  auto drop = [&](const std::string& why) {
    spdlog::warn("sandbox {}: a spare could not be claimed ({}); forking it the usual way", src->id, why);
    for (auto& s : spares) lifecycle_.discard(*s);
    return std::vector<std::shared_ptr<LiveSandbox>>{};
  };
  for (auto& s : spares) {
    {
      std::lock_guard lk(s->mu);
      s->rec.project_id = base.project_id;
    }
    // The source's egress as it is now (a PATCH may have changed it), before anything in the
    // spare runs again.
    if (s->networked)
      if (auto r = lifecycle_.apply_egress(*s, {base.egress_mode, base.egress_allow}); !r) return drop(r.error().message);
    rt_.set_frozen(s->id, false);
    if (auto r = lifecycle_.identify(*s); !r) return drop(r.error().message);
  }
  pools_.settle();  // the caller's next request (an exec in the fork) before the next spare
  return spares;
}

class Checkpoints::SnapshotSlot {
 public:
  SnapshotSlot(Checkpoints& c, std::string project, uint64_t bytes) : c_(c), project_(std::move(project)), bytes_(bytes) {}
  ~SnapshotSlot() {
    std::lock_guard lk(c_.quota_mu_);
    UnderWay& mine = c_.snapshots_under_way_[project_];
    mine.bytes -= bytes_;
    if (--mine.count == 0) c_.snapshots_under_way_.erase(project_);
  }
  SnapshotSlot(const SnapshotSlot&) = delete;
  SnapshotSlot& operator=(const SnapshotSlot&) = delete;

 private:
  Checkpoints& c_;
  std::string project_;
  uint64_t bytes_;
};

// What a snapshot may add: the project's count and bytes under their limits (429
// quota_exceeded), and room for its image on the data disk beyond the reserve kept for running
// sandboxes, whose disks grow as they write (503 capacity_unavailable). An image's size is
// known once written: until then it counts as the sandbox's memory_mib (what its memory file
// holds at most), so snapshots taken at once cannot all pass the limit; one written larger
// than that may take the project past it by the difference. Snapshots under way are this
// node's (in a cluster, each node counts its own besides every node's recorded ones).
Result<std::unique_ptr<Checkpoints::SnapshotSlot>> Checkpoints::snapshot_slot(const std::string& project_id,
                                                                               int memory_mib) {
  const uint64_t estimate = static_cast<uint64_t>(std::max(memory_mib, 0)) << 20;
  const std::string dir = cfg_.snapshots_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (auto full = disk_reserve_error(dir, cfg_.disk_reserve_gib, "no snapshot was taken, the sandbox runs on", estimate))
    return fail(*full);
  // The recorded snapshots are read under the lock, so that one recorded meanwhile is seen
  // either there or still under way (its slot is given back after its record is written).
  std::lock_guard lk(quota_mu_);
  auto used = store_.snapshot_usage(project_id);
  if (!used) return fail(used.error());
  const auto it = snapshots_under_way_.find(project_id);
  const UnderWay pending = it == snapshots_under_way_.end() ? UnderWay{} : it->second;
  if (used->bytes + pending.bytes + estimate > gib_bytes(cfg_.snapshots_max_gib_per_project)) {
    return fail(ErrorCode::kQuotaExceeded,
                "this project's snapshots hold " + std::to_string(used->bytes >> 20) + " MiB" +
                    (pending.bytes ? " and " + std::to_string(pending.bytes >> 20) + " MiB more are being taken"
                                   : std::string()) +
                    "; this one of up to " + std::to_string(estimate >> 20) + " MiB would pass its limit of " +
                    gib_text(cfg_.snapshots_max_gib_per_project) +
                    " (--snapshots-max-gib-per-project); delete some (DELETE /v1/snapshots/{id}) to take more");
  }
  if (used->count + pending.count >= cfg_.snapshots_max_per_project) {
    return fail(ErrorCode::kQuotaExceeded,
                "this project keeps " + std::to_string(used->count) + " snapshots" +
                    (pending.count ? " and takes " + std::to_string(pending.count) + " more" : std::string()) +
                    ", its limit is " + std::to_string(cfg_.snapshots_max_per_project) +
                    " (--snapshots-max-per-project); delete some (DELETE /v1/snapshots/{id}) to take more");
  }
  UnderWay& mine = snapshots_under_way_[project_id];
  ++mine.count;
  mine.bytes += estimate;
  return std::make_unique<SnapshotSlot>(*this, project_id, estimate);
}

Result<json> Checkpoints::snapshot(const Principal& p, const std::string& id, Timing& t) {
  Stopwatch sw;
  auto sr = lifecycle_.running(p, id);
  if (!sr) return fail(sr.error());
  auto src = *sr;
  store::SandboxRecord base;
  {
    std::lock_guard lk(src->mu);
    base = src->rec;
  }
  if (api_status(base.state) != "running")
    return fail(ErrorCode::kSandboxNotRunning, "sandbox " + id + " is " + std::string(api_status(base.state)) +
                                                   "; snapshots are taken of running sandboxes");
  auto slot = snapshot_slot(p.project_id, base.memory_mib);
  if (!slot) return fail(slot.error());
  ActiveOp busy(*src);
  Awake awake = lifecycle_.awake(*src, false);  // a snapshot leaves its source as it was
  const std::string snap_id = new_id("snp");
  ImageRoom room(rt_, *src, base.memory_mib);
  ImageDir dir(cfg_.snapshots_dir() + "/" + snap_id);
  if (auto r = dir.create(); !r) return fail(r.error());
  if (auto r = checkpoint_into(*src, dir.path(), t, sw); !r) return fail(r.error().wrap("snapshotting " + id));
  if (auto r = sync_image(dir.path()); !r) return fail(r.error().wrap("snapshotting " + id));
  room.release();
  t.lap("sync", sw);
  // In a cluster, into the object store before the record: a snapshot any node can list is
  // one any node can restore.
  std::string object_root;
  if (cfg_.object_store) {
    const std::string rootfs =
        base.rootfs.empty() ? lifecycle_.template_rootfs(base.template_name) + "/rootfs" : base.rootfs;
    auto r = publish_snapshot(cfg_, store_, snap_id, dir.path(), rootfs, base.template_name);
    if (!r) return fail(r.error().wrap("snapshotting " + id));
    object_root = *r;
    t.lap("upload", sw);
  }
  uint64_t size = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(dir.path(), ec))
    if (e.is_regular_file()) size += e.file_size();
  store::SnapshotRecord snap;
  snap.id = snap_id;
  snap.project_id = p.project_id;
  snap.sandbox_id = id;
  snap.template_name = base.template_name;
  snap.template_id = base.template_id;
  snap.vcpu = base.vcpu;
  snap.memory_mib = base.memory_mib;
  snap.disk_gib = base.disk_gib;
  snap.env = base.env;
  snap.secrets = base.secrets;
  snap.api_scopes = base.api_scopes;
  snap.spend_cap_micros = base.spend_cap_micros;
  snap.egress_mode = base.egress_mode;
  snap.egress_allow = base.egress_allow;
  snap.forkable = base.forkable;
  snap.size_bytes = size;
  snap.created_ms = now_unix_ms();
  snap.rootfs = base.rootfs;
  snap.budget_id = base.budget_id;
  snap.object_root = object_root;
  if (auto r = store_.put_snapshot(snap); !r) return fail(r.error());
  dir.keep();
  t.lap("store", sw);
  lifecycle_.touch(*src);
  spdlog::info("sandbox {}: snapshot {} ({} MB)", id, snap_id, size >> 20);
  return snapshot_object(snap);
}

Result<json> Checkpoints::get_snapshot(const Principal& p, const std::string& id) {
  auto row = store_.get_snapshot(p.project_id, id);
  if (!row) return fail(row.error());
  if (!*row) return fail(ErrorCode::kSnapshotNotFound, "no snapshot " + id + " in this project");
  return snapshot_object(**row);
}

Result<json> Checkpoints::list_snapshots(const Principal& p, const std::optional<std::string>& after_id, int limit) {
  auto rows = store_.list_snapshots(p.project_id, after_id, limit);
  if (!rows) return fail(rows.error());
  const bool more = static_cast<int>(rows->size()) > limit;
  if (more) rows->pop_back();
  json data = json::array();
  for (auto& r : *rows) data.push_back(snapshot_object(r));
  return json{{"object", "list"}, {"data", data}, {"next_cursor", more ? json(rows->back().id) : json(nullptr)}};
}

Result<json> Checkpoints::delete_snapshot(const Principal& p, const std::string& id) {
  auto d = get_snapshot(p, id);
  if (!d) return fail(d.error());
  if (auto r = store_.delete_snapshot(p.project_id, id); !r) return fail(r.error());
  std::error_code ec;
  fs::remove_all(cfg_.snapshots_dir() + "/" + id, ec);
  // The record is gone, so no one can restore it; objects left by a store that is down now
  // are said in the log (docs/cluster.md).
  if (auto r = forget_snapshot(cfg_, id); !r)
    spdlog::warn("snapshot {}: deleted, but its objects stay in the object store: {}", id, r.error().message);
  if (auto* c = lifecycle_.templates(); c && d->contains("template") && (*d)["template"].is_object())
    c->released((*d)["template"].value("id", ""));
  (*d)["deleted"] = true;
  return *d;
}

// ---- moves between nodes (a draining node; docs/cluster.md) ----

Result<void> Checkpoints::move_out(const std::shared_ptr<LiveSandbox>& s,
                                   const std::function<Result<bool>(const std::string& move_id)>& adopt, Timing& t) {
  if (!cfg_.object_store) return fail(ErrorCode::kProductUnavailable, "moving a sandbox needs an object store");
  Stopwatch sw;
  store::SandboxRecord base;
  {
    std::lock_guard lk(s->mu);
    base = s->rec;
  }
  if (!base.forkable) return fail(ErrorCode::kForkUnavailable, "sandbox " + s->id + " is not forkable: it stays");
  if (base.state != State::kRunning)
    return fail(ErrorCode::kSandboxNotRunning, "sandbox " + s->id + " is " + std::string(api_status(base.state)));
  if (s->moving.exchange(true)) return fail(ErrorCode::kConflict, "sandbox " + s->id + " is being moved already");
  ScopeExit unmark([&] { s->moving = false; });
  const std::string move_id = new_id("mov");
  ImageDir dir(cfg_.fork_images_dir() + "/" + move_id);
  {
    Awake awake = lifecycle_.awake(*s);
    // Requests in flight finish first (new ones get 503 now), for up to 10 s.
    for (int i = 0; i < 100 && s->active_ops.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    t.lap("drain_requests", sw);
    ImageRoom room(rt_, *s, base.memory_mib);
    if (auto r = dir.create(); !r) return fail(r.error());
    if (auto r = checkpoint_into(*s, dir.path(), t, sw); !r) return fail(r.error().wrap("moving " + s->id));
    if (auto r = lifecycle_.persist(*s); !r) return fail(r.error().wrap("moving " + s->id));
    {
      std::lock_guard lk(s->mu);
      base = s->rec;
    }
  }
  // Its container ends here now, its record untouched: it never runs on two nodes. What it
  // did in the moment after the image is not in it (requests were held off; its own processes
  // ran on).
  lifecycle_.begin_move(s);
  ScopeExit finish([&] { lifecycle_.end_move(s->id); });
  t.lap("stop", sw);
  auto moved = [&]() -> Result<void> {
    if (auto r = sync_image(dir.path()); !r) return r;
    const std::string rootfs =
        base.rootfs.empty() ? lifecycle_.template_rootfs(base.template_name) + "/rootfs" : base.rootfs;
    // The move's manifest names what it moves: the adopting node takes it for that sandbox,
    // project and node only.
    if (auto r = publish_snapshot(cfg_, store_, move_id, dir.path(), rootfs, base.template_name,
                                  {{"move_of", s->id}, {"project", base.project_id}});
        !r)
      return fail(r.error());
    t.lap("upload", sw);
    auto took = adopt(move_id);
    if (auto r = forget_snapshot(cfg_, move_id); !r)
      spdlog::warn("move {}: its objects stay in the object store: {}", move_id, r.error().message);
    if (!took) return fail(took.error());
    if (!*took) return fail(ErrorCode::kNodeUnavailable, "the other node did not take it");
    t.lap("adopt", sw);
    return {};
  }();
  if (moved) return {};
  // Not taken: restored here from the same image, as it was.
  spdlog::warn("sandbox {}: moving it failed ({}); restoring it here", s->id, moved.error().message);
  if (auto r = lifecycle_.restore_moved(base, base.rootfs.empty() ? lifecycle_.template_rootfs(base.template_name) + "/rootfs" : base.rootfs,
                                        dir.path(), t);
      !r)
    spdlog::error("sandbox {}: restoring it after a failed move: {}", s->id, r.error().message);
  return fail(moved.error().wrap("moving " + s->id));
}

Result<json> Checkpoints::adopt(const std::string& project_id, const std::string& id, const std::string& move_id,
                                const std::string& from_node, int64_t deadline_ms, Timing& t) {
  Stopwatch sw;
  if (!cfg_.object_store) return fail(ErrorCode::kProductUnavailable, "this node has no object store to take a sandbox from");
  if (registry_.find(id)) return fail(ErrorCode::kConflict, "sandbox " + id + " is here already");
  auto row = store_.get_sandbox(project_id, id);
  if (!row) return fail(row.error());
  if (!*row || (*row)->ended() || (*row)->node_id != from_node)
    return fail(ErrorCode::kConflict, "sandbox " + id + " is not a running sandbox of node " + from_node);
  if (move_id.rfind("mov_", 0) != 0) return fail(ErrorCode::kInvalidRequest, "adopt: " + move_id.substr(0, 40) + " is not a move");
  auto got = fetch_snapshot(cfg_, move_id, from_node);
  if (!got) return fail(got.error());
  ScopeExit drop([&] {
    std::error_code ec;
    fs::remove_all(got->image_dir, ec);
  });
  // Only the move its record says it is: of this sandbox, of this project, from that node.
  const auto& m = got->manifest;
  if (m.value("snapshot", "") != move_id || m.value("move_of", "") != id || m.value("project", "") != project_id ||
      m.value("node", "") != from_node)
    return fail(ErrorCode::kConflict, "move " + move_id + " is not a move of sandbox " + id + " from node " + from_node);
  t.lap("fetch", sw);
  auto s = lifecycle_.relaunch(**row, got->rootfs, got->image_dir, t, [&]() -> Result<void> {
    // The mover stops waiting at the deadline and restores its own copy.
    if (now_unix_ms() > deadline_ms)
      return fail(ErrorCode::kConflict, "move " + move_id + " of sandbox " + id + " came too late; node " + from_node + " kept it");
    return {};
  });
  if (!s) return fail(s.error());
  spdlog::info("sandbox {}: taken over from node {} (move {})", id, from_node, move_id);
  return lifecycle_.view(**s);
}

}  // namespace b3os::sandbox
