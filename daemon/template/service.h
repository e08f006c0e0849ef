#pragma once
// TemplateService: templates users build (docs/templates.md). A build runs every step inside
// a gVisor sandbox of its own (never on the host), on a copy of the parent's root placed on the
// build sandbox's disk (its size limit); the result is copied out as a read-only root, and a
// template with a `start` command gets checkpoints taken once `ready` passed, which creates
// restore. Versions: every build of a name is a new version; creates get the newest ready one,
// sandboxes keep theirs. Builds run on a few worker threads (a node-wide cap); the log of each
// is a capped file that clients follow.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/result.h"
#include "daemon/image/image.h"
#include "daemon/objstore/objstore.h"
#include "daemon/sandbox/service.h"
#include "daemon/sandbox/templates.h"
#include "daemon/store/store.h"
#include "daemon/template/spec.h"

namespace b3os::tpl {

struct Config {
  std::string data_dir;       // template-builds/, -uploads/, -images/, -roots/ (what users built)
  std::string templates_dir;  // the built-in templates on disk (base/rootfs)
  int max_concurrent_builds = 2;
  int max_queued_per_node = 64;
  int max_queued_per_project = 8;
  int build_timeout_s = 1800;  // default; a spec may ask less, or up to max
  int max_build_timeout_s = 1800;  // the operator's bound (--template-build-max-timeout)
  int build_disk_gib = 8;      // the build's size limit (its disk); a spec may ask up to max
  int max_build_disk_gib = 64;
  int build_vcpu = 2;
  int build_memory_mib = 2048;
  uint64_t max_upload_bytes = 8ull << 30;
  int max_uploads_per_project = 4;
  int64_t upload_ttl_ms = 3600 * 1000;
  uint64_t max_log_bytes = 8 << 20;
  /// Image paths on the node a spec may name (`image.path`): prefixes; empty: none allowed.
  std::vector<std::string> image_paths;
  image::Limits image_limits;
  /// Written to /etc/apt/sources.list of a build that installs packages ("" : the parent's own).
  std::string apt_sources;
  /// mmdebstrap's mirror for `from: debian:bookworm`.
  std::string debian_mirror = "http://deb.debian.org/debian";
  /// Projects (names or ids) whose keys may publish node-wide templates (`"public": true`).
  std::set<std::string> publisher_projects;
  int max_templates_per_project = 64;
  /// What a project's ready template roots may hold (429 quota_exceeded for a new build at it),
  /// and the free space on the data disk builds and uploads leave to running sandboxes (503).
  double max_gib_per_project = 256;
  double disk_reserve_gib = 2;
  int max_versions = 20;       // builds kept per template (and its newest ready one)
  int max_warm_pool = 4;       // a spec's warm_pool at most
  int warm_pool_node_cap = 8;  // members of all templates' pools together
  /// Identifies the runtime and agent an image was taken with (an image from others is dropped).
  std::string image_stamp;
  // ---- a cluster (docs/cluster.md, "Templates are the cluster's") ----
  /// The store is shared: other nodes' builds are read from it (at most every refresh_ms).
  bool shared = false;
  std::string node_id;
  int refresh_ms = 1000;
  /// Where a ready build's root and the uploads go, so that every node can use them (null: a
  /// single node, or a cluster without one: templates stay on the node that built them).
  objstore::ObjectStore* object_store = nullptr;
};

class TemplateService : public sandbox::TemplateCatalog {
 public:
  /// What every sandbox's root needs (mount points, the agent's place, /workspace and /tmp
  /// 1777, an etc/resolv.conf), made in a root a tenant wrote, beneath its fd and never through
  /// one of its symlinks (image::TenantRoot).
  static Result<void> prepare_root(const std::string& root);

  TemplateService(Config cfg, sandbox::SandboxService& sandboxes, store::TemplateStore& store);
  ~TemplateService() override;

  /// Loads the builds, fails those a previous b3osd left unfinished and removes their litter
  /// (before the API serves).
  Result<void> start();
  /// Once the sandboxes of a previous b3osd are reattached: removes the files of deleted
  /// templates nothing uses and starts the build workers.
  void start_workers();
  void stop();

  // ---- the API (daemon/api) ----
  /// POST /v1/templates: 202 with the template and its new build.
  Result<nlohmann::json> create(const sandbox::Principal& p, const nlohmann::json& body);
  /// POST /v1/templates/uploads: an image or context tarball, streamed to disk.
  Result<nlohmann::json> upload(const sandbox::Principal& p, const sandbox::ChunkSource& source);
  Result<nlohmann::json> list(const sandbox::Principal& p);
  Result<nlohmann::json> get(const sandbox::Principal& p, const std::string& name_or_id);
  /// DELETE: 409 while sandboxes run it, unless `force`.
  Result<nlohmann::json> remove(const sandbox::Principal& p, const std::string& name_or_id, bool force);
  Result<nlohmann::json> builds(const sandbox::Principal& p, const std::string& name_or_id);
  Result<nlohmann::json> build(const sandbox::Principal& p, const std::string& name_or_id, const std::string& build_id);
  /// Stops a build of the project's: a queued one fails at once (200), a running one has its
  /// step killed and fails within moments (202, "cancelling"); 409 when it ended already.
  Result<std::pair<int, nlohmann::json>> cancel(const sandbox::Principal& p, const std::string& name_or_id,
                                                const std::string& build_id);
  /// The build's log from byte `from`; with `follow`, waits for more until the build ends or
  /// `gone` says the client left.
  Result<void> logs(const sandbox::Principal& p, const std::string& name_or_id, const std::string& build_id,
                    bool follow, const std::function<Result<void>(std::string_view)>& write,
                    const sandbox::CancelCheck& gone);
  // ---- TemplateCatalog ----
  Result<std::optional<sandbox::TemplateChoice>> resolve(const std::string& project_id,
                                                         const std::string& name_or_id) override;
  ExecDefaults exec_defaults(const std::string& template_id, const std::string& rootfs) override;
  void released(const std::string& template_id) override;

  uint64_t max_upload_bytes() const { return cfg_.max_upload_bytes; }
  /// Builds queued, running (metrics).
  std::pair<int, int> load() const;

 private:
  struct Upload {
    std::string id, project_id, path, sha256;
    uint64_t size = 0;
    int64_t created_ms = 0;
    bool used = false;  // a build has read it (it may go first when the project needs room)
  };
  /// Removes an upload's files (not under mu_).
  void drop_upload(const Upload& u);

  // All under mu_.
  std::vector<store::TemplateBuildRecord> visible_builds(const std::string& project_id, const std::string& name_or_id) const;
  const store::TemplateBuildRecord* latest_ready(const std::vector<store::TemplateBuildRecord>& builds) const;
  nlohmann::json template_object(const std::vector<store::TemplateBuildRecord>& builds) const;
  static nlohmann::json build_object(const store::TemplateBuildRecord& b);
  store::TemplateBuildRecord* find_build(const std::string& id);
  std::optional<Upload> find_upload(const std::string& project_id, const std::string& id) const;

  void worker();
  /// One build, start to end; its record is saved at each change.
  void run_build(const std::string& build_id);
  Result<void> build_root(store::TemplateBuildRecord& rec, const TemplateSpec& spec, const std::string& log);
  /// An image's layers into `root` (its config kept in the record's doc).
  Result<void> import_image(store::TemplateBuildRecord& rec, const std::string& root, const std::string& log);
  /// An image with no step: imported straight into the template's root.
  Result<void> import_alone(store::TemplateBuildRecord& rec, const std::string& log);
  Result<void> build_images(store::TemplateBuildRecord& rec, const TemplateSpec& spec, const std::string& log);
  /// Starts `start` in a running sandbox and waits for `ready` (the log gets the story).
  Result<void> start_and_wait(sandbox::LiveSandbox& s, const nlohmann::json& defaults, const std::string& log);
  Result<std::string> ensure_debian_root(const std::string& log);
  void save(const store::TemplateBuildRecord& rec);
  void append_log(const std::string& log, std::string_view bytes);
  std::string log_path(const std::string& build_id) const { return cfg_.data_dir + "/template-builds/" + build_id + ".log"; }
  std::string artifact_rootfs(const std::string& artifact) const;
  /// Roots users built, named by content: DATA_DIR/template-roots/a-HASH (and _debian-bookworm).
  std::string roots_dir() const { return cfg_.data_dir + "/template-roots"; }
  /// Removes the files of deleted templates nothing uses any more.
  void collect_garbage();
  /// Keeps the warm pool of each template's newest ready version (as its spec asks), and none
  /// of the others'. Not under mu_.
  void sync_pools();
  void sweep_uploads();

  // ---- a cluster ----
  /// This node's build (its files and log are here)?
  bool own(const store::TemplateBuildRecord& b) const { return b.node_id.empty() || b.node_id == cfg_.node_id; }
  /// Reads the other nodes' builds from a shared store, and deletes done elsewhere of this
  /// node's; at most every refresh_ms unless `now`. Not under mu_.
  void refresh(bool now = false);
  /// The root of a build another node made, fetched from the object store into roots_dir()
  /// unless here already. Not under mu_.
  Result<void> ensure_artifact(const std::string& artifact);
  /// A ready build's root to the object store (template-roots/ARTIFACT/).
  Result<void> publish_artifact(const std::string& artifact, const std::string& log);
  /// An upload to the object store (template-uploads/ID/), and one from there that another
  /// node took (nullopt: none of that project by that id). Not under mu_.
  Result<void> publish_upload(const Upload& u);
  std::optional<Upload> fetch_upload(const std::string& project_id, const std::string& id);

  Config cfg_;
  sandbox::SandboxService& sandboxes_;
  store::TemplateStore& store_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work queued, or stopping
  std::condition_variable log_cv_;   // a log grew or a build ended
  std::map<std::string, store::TemplateBuildRecord> builds_;  // by id
  std::deque<std::string> queue_;
  int running_ = 0;
  // Fairness (worker()): a project runs one build at a time, and of the projects waiting, the
  // one whose last build started longest ago goes first. Guarded by mu_.
  std::set<std::string> running_projects_;
  std::map<std::string, int64_t> last_started_;  // project -> steady ms its last build started
  /// The queued build a worker takes next, or queue_.end() when none may start now.
  std::deque<std::string>::iterator next_build();
  // Builds asked to stop (cancel()): their running step is killed, the next one never starts.
  std::set<std::string> cancelled_;
  bool cancelled(const std::string& build_id);
  std::map<std::string, Upload> uploads_;
  std::map<std::string, uint64_t> log_sizes_;
  std::mutex debian_mu_;  // one mmdebstrap at a time
  bool stopping_ = false;
  bool gc_wanted_ = false;  // a template was deleted: a worker removes what nothing uses
  std::vector<std::thread> workers_;
  std::mutex refresh_mu_;  // one refresh at a time
  int64_t refreshed_ms_ = 0;
  std::mutex fetch_mu_;  // one artifact or upload fetch at a time
  /// A root's lock, held while a build checks for it, makes it and renames it in place (the
  /// mutex kept alive by the holder; mu_ guards the map).
  struct ArtifactLock {
    std::shared_ptr<std::mutex> mu;
    std::unique_lock<std::mutex> lk;
  };
  std::map<std::string, std::shared_ptr<std::mutex>> artifact_locks_;
  /// What image::inspect found of an archive (or why it is none), by path, inode, size and
  /// time; the oldest of kMaxInspected goes first. Guarded by mu_.
  static constexpr size_t kMaxInspected = 256;
  std::map<std::string, Result<image::Config>> inspected_;
  std::deque<std::string> inspected_order_;
  ArtifactLock lock_artifact(const std::string& artifact);
  /// The root a build with steps keeps: the project's own (sha256 of project and content).
  static std::string step_artifact(const store::TemplateBuildRecord& rec);
};

}  // namespace b3os::tpl
