#include "daemon/template/service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "common/clock.h"
#include "common/file.h"
#include "common/ids.h"
#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "daemon/image/root_ops.h"
#include "daemon/objstore/transfer.h"
#include "daemon/sys/process.h"

namespace b3os::tpl {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using store::TemplateBuildRecord;

namespace {

constexpr const char* kDebianArtifact = "_debian-bookworm";
constexpr size_t kTailBytes = 4096;

/// Starts the template's command detached (its own session, output to a log on the root), so
/// the exec that starts it returns at once and the process outlives it.
constexpr const char* kStartScript =
    
    "if command -v setsid >/dev/null 2>&1; then "
    "setsid /bin/sh -c \"$B3OS_START\" </dev/null >>/tmp/b3os-start.log 2>&1 & "
    "else /bin/sh -c \"$B3OS_START\" </dev/null >>/tmp/b3os-start.log 2>&1 & fi; echo $!";

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(d[p[i] >> 4]);
    out.push_back(d[p[i] & 15]);
  }
  return out;
}

std::string sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  return hex(md, n);
}

std::string tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

bool terminal(const std::string& status) { return status == "ready" || status == "failed"; }

json time_or_null(int64_t ms) {
  if (ms <= 0) return nullptr;
  return format_rfc3339(ms);
}

/// The listening TCP ports in /proc/net/tcp{,6} text.
std::set<int> listening_ports(const std::string& text) {
  std::set<int> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    // "  0: 00000000:1F40 00000000:0000 0A ..."
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t local = line.find_first_not_of(' ', colon + 1);
    if (local == std::string::npos) continue;
    size_t port_at = line.find(':', local);
    size_t sp = line.find(' ', port_at == std::string::npos ? local : port_at);
    if (port_at == std::string::npos || sp == std::string::npos) continue;
    size_t st = line.find_first_not_of(' ', line.find(' ', sp + 1));
    if (st == std::string::npos || line.compare(st, 2, "0A") != 0) continue;
    try {
      out.insert(std::stoi(line.substr(port_at + 1, sp - port_at - 1), nullptr, 16));
    } catch (...) {
    }
  }
  return out;
}

}  // namespace

TemplateService::TemplateService(Config cfg, sandbox::SandboxService& sandboxes, store::TemplateStore& store)
    : cfg_(std::move(cfg)), sandboxes_(sandboxes), store_(store) {}

TemplateService::~TemplateService() { stop(); }

std::string TemplateService::artifact_rootfs(const std::string& artifact) const {
  if (artifact == "base") return cfg_.templates_dir + "/base/rootfs";
  return roots_dir() + "/" + artifact + "/rootfs";
}

// ---- start and stop ----

Result<void> TemplateService::start() {
  std::error_code ec;
  for (auto d : {"/template-builds", "/template-uploads", "/template-images", "/template-roots"}) {
    fs::create_directories(cfg_.data_dir + d, ec);
    ::chmod((cfg_.data_dir + d).c_str(), 0700);
  }
  // What a b3osd that died mid-build left half-made.
  for (const std::string dir : {roots_dir(), cfg_.data_dir + "/template-images"})
    for (auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".building") fs::remove_all(e.path(), ec);
  for (auto& e : fs::directory_iterator(cfg_.data_dir + "/template-uploads", ec)) {
    if (e.path().extension() == ".part") {
      fs::remove(e.path(), ec);
      continue;
    }
    if (e.path().extension() != ".json") continue;
    json j = json::parse(read_small_file(e.path().string(), 1 << 16).value_or(""), nullptr, false);
    if (!j.is_object()) continue;
    Upload u{j.value("id", ""), j.value("project_id", ""), cfg_.data_dir + "/template-uploads/" + j.value("id", "") + ".tar",
             j.value("sha256", ""), j.value("size", uint64_t{0}), j.value("created_ms", int64_t{0})};
    if (!u.id.empty() && fs::exists(u.path)) uploads_[u.id] = u;
  }
  auto rows = store_.template_builds();
  if (!rows) return fail(rows.error());
  const int64_t now = now_unix_ms();
  for (auto& r : *rows) {
    // Another node's builds are read as they are: their files are there (or in the object
    // store), and their node fails its own unfinished ones.
    if (!own(r)) {
      if (!r.deleted_ms) builds_[r.id] = r;
      continue;
    }
    if (!terminal(r.status)) {
      r.status = "failed";
      r.finished_ms = now;
      r.doc["error"] = {{"code", "internal"}, {"message", "b3osd stopped during the build; build it again"}};
      if (auto s = store_.put_template_build(r); !s) return fail(s.error());
    }
    // A checkpoint from another runtime or agent would not restore: creates boot until it is
    // taken again (a rebuild).
    if (r.doc.contains("images") && r.doc["images"].is_object()) {
      const std::string img = r.doc["images"].value("image", "");
      if (!img.empty() && read_small_file(img + "/b3os-stamp", 4096).value_or("") != cfg_.image_stamp) {
        spdlog::info("template {} v{}: its checkpoint was taken with another runtime or agent; creates boot it",
                     r.name, r.version);
        r.doc.erase("images");
        (void)store_.put_template_build(r);
      }
    }
    builds_[r.id] = r;
  }
  refreshed_ms_ = now;
  return {};
}

void TemplateService::start_workers() {
  sandboxes_.pools().set_template_pool_cap(cfg_.warm_pool_node_cap);
  sync_pools();
  collect_garbage();
  sweep_uploads();
  std::lock_guard lk(mu_);
  stopping_ = false;
  for (int i = 0; i < std::max(1, cfg_.max_concurrent_builds); ++i) workers_.emplace_back([this] { worker(); });
}

void TemplateService::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  log_cv_.notify_all();
  for (auto& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

std::pair<int, int> TemplateService::load() const {
  std::lock_guard lk(mu_);
  return {static_cast<int>(queue_.size()), running_};
}

// ---- lookups (under mu_) ----

std::vector<TemplateBuildRecord> TemplateService::visible_builds(const std::string& project_id,
                                                                 const std::string& name_or_id) const {
  // The project's own template by that name or id first, then a node-wide one.
  std::vector<TemplateBuildRecord> own, node;
  for (auto& [id, b] : builds_) {
    if (b.deleted_ms || (b.name != name_or_id && b.template_id != name_or_id)) continue;
    if (b.project_id == project_id) own.push_back(b);
    else if (b.project_id.empty() || b.doc.value("public", false)) node.push_back(b);
  }
  auto by_version = [](const TemplateBuildRecord& a, const TemplateBuildRecord& b) { return a.version < b.version; };
  std::sort(own.begin(), own.end(), by_version);
  if (!own.empty()) return own;
  if (node.empty()) return {};
  // Node-wide ones of several projects by one name: the operator's, else the one published
  // first (its earliest public build), whatever their versions; a later publisher cannot
  // shadow it. Another project sees its ready versions only (their defaults), never a build in
  // progress or a failed one.
  // Only templates with a ready version compete: one whose builds all failed or are still
  // building holds no name for anyone else.
  std::map<std::string, std::pair<int, int64_t>> rank;  // template -> (operator's? 0 : 1, first published)
  for (auto& b : node) {
    if (b.status != "ready") continue;
    auto [it, fresh] = rank.try_emplace(b.template_id, std::pair<int, int64_t>{b.project_id.empty() ? 0 : 1, b.created_ms});
    if (!fresh) it->second.second = std::min(it->second.second, b.created_ms);
  }
  if (rank.empty()) return {};
  const auto first = std::min_element(rank.begin(), rank.end(), [](auto& a, auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  })->first;
  std::vector<TemplateBuildRecord> one;
  for (auto& b : node)
    if (b.template_id == first && b.status == "ready") one.push_back(b);
  std::sort(one.begin(), one.end(), by_version);
  return one;
}

const TemplateBuildRecord* TemplateService::latest_ready(const std::vector<TemplateBuildRecord>& builds) const {
  const TemplateBuildRecord* best = nullptr;
  for (auto& b : builds)
    if (b.status == "ready" && (!best || b.version > best->version)) best = &b;
  return best;
}

TemplateBuildRecord* TemplateService::find_build(const std::string& id) {
  auto it = builds_.find(id);
  return it == builds_.end() ? nullptr : &it->second;
}

json TemplateService::build_object(const TemplateBuildRecord& b) {
  json o = {{"id", b.id},
            {"object", "template_build"},
            {"template_id", b.template_id},
            {"version", b.version},
            {"status", b.status},
            {"created_at", format_rfc3339(b.created_ms)},
            {"started_at", time_or_null(b.started_ms)},
            {"finished_at", time_or_null(b.finished_ms)},
            {"steps", b.doc.value("steps", json::array())},
            {"error", b.doc.contains("error") ? b.doc["error"] : json(nullptr)},
            {"reused_from", b.doc.contains("reused_from") ? b.doc["reused_from"] : json(nullptr)},
            {"content_hash", b.content_hash}};
  return o;
}

json TemplateService::template_object(const std::vector<TemplateBuildRecord>& builds) const {
  const TemplateBuildRecord& last = builds.back();
  const TemplateBuildRecord* ready = latest_ready(builds);
  const TemplateBuildRecord& shown = ready ? *ready : last;
  json defaults = shown.doc.value("defaults", json::object());
  json ck = {{"status", "none"}};
  if (shown.doc.contains("images") && shown.doc["images"].is_object()) {
    ck = {{"status", "ready"}, {"memory_mib", shown.doc["images"].value("memory_mib", 0)}};
  } else if (!defaults.value("start", json(nullptr)).is_null() && !ready && !terminal(last.status)) {
    ck = {{"status", "building"}};
  }
  // What it was built from, without the node's paths.
  json source = shown.doc.value("source", json::object());
  for (const char* k : {"rootfs", "path", "artifact", "context"}) source.erase(k);
  return {{"id", last.template_id},
          {"object", "template"},
          {"name", last.name},
          {"public", last.project_id.empty() || last.doc.value("public", false)},
          {"status", ready ? "ready" : last.status},
          {"version", ready ? json(ready->version) : json(nullptr)},
          {"build", build_object(last)},
          {"ready_build_id", ready ? json(ready->id) : json(nullptr)},
          {"defaults", defaults},
          {"source", source},
          {"size_bytes", shown.doc.value("size_bytes", 0)},
          {"checkpoint", ck},
          {"created_at", format_rfc3339(builds.front().created_ms)}};
}

std::optional<TemplateService::Upload> TemplateService::find_upload(const std::string& project_id,
                                                                   const std::string& id) const {
  auto it = uploads_.find(id);
  if (it == uploads_.end() || it->second.project_id != project_id) return std::nullopt;
  return it->second;
}

// ---- the API ----

Result<json> TemplateService::create(const sandbox::Principal& p, const json& body_in) {
  json body = body_in;
  bool make_public = false;
  if (body.is_object() && body.contains("public")) {
    if (!body["public"].is_boolean()) return fail(ErrorCode::kInvalidRequest, "public: must be true or false");
    make_public = body["public"].get<bool>();
    body.erase("public");
    if (make_public && !cfg_.publisher_projects.count(p.project_id) && !cfg_.publisher_projects.count(p.project_name))
      return fail(ErrorCode::kForbidden, "public: this project may not publish node-wide templates "
                                         "(the operator lists those that may: --template-publishers)");
  }
  SpecLimits limits;
  limits.max_build_timeout_s = cfg_.max_build_timeout_s;
  limits.max_build_disk_gib = cfg_.max_build_disk_gib;
  limits.max_warm_pool = cfg_.max_warm_pool;
  auto spec = parse_template_spec(body, limits);
  if (!spec) return fail(spec.error());
  TemplateSpec& s = *spec;

  // Version numbers come from every node's builds as the store has them now; an upload taken
  // by another node is fetched from the object store.
  refresh(true);
  for (const auto* id : {&s.source.image_upload, &s.context_upload})
    if (*id) {
      bool here;
      {
        std::lock_guard lk(mu_);
        here = find_upload(p.project_id, **id).has_value();
      }
      if (!here) (void)fetch_upload(p.project_id, **id);
    }

  json source = json::object();
  std::string parent_key;
  std::unique_lock lk(mu_);
  if (s.source.image_upload) {
    auto u = find_upload(p.project_id, *s.source.image_upload);
    if (!u) return fail(ErrorCode::kInvalidRequest, "image.upload: no upload " + *s.source.image_upload + " in this project (uploads last an hour)");
    source = {{"kind", "image"}, {"upload", u->id}, {"path", u->path}, {"sha256", u->sha256}};
    parent_key = "image:" + u->sha256;
  } else if (s.source.image_path) {
    bool allowed = false;
    std::error_code ec;
    const std::string real = fs::weakly_canonical(*s.source.image_path, ec).string();
    for (auto& prefix : cfg_.image_paths)
      if (!prefix.empty() && real.rfind(prefix, 0) == 0 && (prefix.back() == '/' || real.size() == prefix.size() || real[prefix.size()] == '/'))
        allowed = true;
    if (!allowed)
      return fail(ErrorCode::kInvalidRequest, "image.path: " + *s.source.image_path +
                                                  " is not under a directory the operator allows (--template-image-paths)");
    struct stat st {};
    if (::stat(real.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
      return fail(ErrorCode::kInvalidRequest, "image.path: " + *s.source.image_path + " is not a file on this node");
    source = {{"kind", "image"}, {"path", real}};
    parent_key = "image-path:" + real + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtime);
  } else if (s.source.from == "base") {
    source = {{"kind", "base"}, {"rootfs", cfg_.templates_dir + "/base/rootfs"}, {"artifact", "base"}};
    parent_key = "base";
  } else if (s.source.from == "debian:bookworm") {
    source = {{"kind", "debian"}, {"rootfs", artifact_rootfs(kDebianArtifact)}, {"artifact", kDebianArtifact}};
    parent_key = "debian:bookworm:" + cfg_.debian_mirror;
  } else {
    auto parent = visible_builds(p.project_id, s.source.from);
    const TemplateBuildRecord* ready = latest_ready(parent);
    if (parent.empty())
      return fail(ErrorCode::kTemplateNotFound, "from: no template \"" + s.source.from + "\" (see GET /v1/templates)");
    if (!ready) return fail(ErrorCode::kInvalidRequest, "from: template \"" + s.source.from + "\" has no ready version yet");
    source = {{"kind", "template"},
              {"template_id", ready->template_id},
              {"build_id", ready->id},
              {"version", ready->version},
              {"rootfs", artifact_rootfs(ready->artifact)},
              {"artifact", ready->artifact},
              {"parent_defaults", ready->doc.value("defaults", json::object())}};
    parent_key = "template:" + ready->content_hash;
  }
  if (s.context_upload) {
    auto u = find_upload(p.project_id, *s.context_upload);
    if (!u) return fail(ErrorCode::kInvalidRequest, "context.upload: no upload " + *s.context_upload + " in this project (uploads last an hour)");
    source["context"] = {{"path", u->path}, {"sha256", u->sha256}};
    parent_key += "+context:" + u->sha256;
  }
  // An image is read at once as far as its metadata goes (not an image, broken JSON, a
  // missing blob: 400 now); its layers' entries are judged while the build imports them.
  if (source.value("kind", "") == "image") {
    const std::string path = source.value("path", "");
    // Inspected once per file (its identity and time): a POST naming the same upload again
    // does not read it again.
    struct stat ist {};
    const std::string key = ::stat(path.c_str(), &ist) == 0
                                ? path + "\n" + std::to_string(ist.st_dev) + ":" + std::to_string(ist.st_ino) + ":" +
                                      std::to_string(ist.st_size) + ":" + std::to_string(ist.st_mtim.tv_sec) + "." +
                                      std::to_string(ist.st_mtim.tv_nsec)
                                : std::string();
    Result<image::Config> seen = fail(ErrorCode::kInternal, "not inspected");
    if (auto hit = key.empty() ? inspected_.end() : inspected_.find(key); hit != inspected_.end()) {
      seen = hit->second;
    } else {
      // A compressed archive's metadata lies behind all of its bytes (docker save writes its
      // manifest last): reading them is the build's work, in a build slot, never the request
      // thread's. Its metadata errors fail the build at its import step, with the same code.
      // An uncompressed one is read header by header, seeking past the members: at once.
      lk.unlock();
      const bool compressed = image::is_compressed(path);
      if (!compressed) seen = image::inspect(path, cfg_.image_limits);
      lk.lock();
      if (compressed) {
        seen = image::Config{};
      } else if (!key.empty() && (seen || seen.error().code == ErrorCode::kInvalidRequest)) {
        if (inspected_.size() >= kMaxInspected) {
          inspected_.erase(inspected_order_.front());
          inspected_order_.pop_front();
        }
        if (inspected_.emplace(key, seen).second) inspected_order_.push_back(key);
      }
    }
    if (!seen)
      return fail(seen.error().code == ErrorCode::kInvalidRequest ? ErrorCode::kInvalidRequest : seen.error().code,
                  (s.source.image_upload ? "image.upload: " : "image.path: ") + seen.error().message);
  }
  json canon = canonical(s);
  // Uploads are named by their bytes, not their ids, so a new upload of the same file reuses.
  canon.erase("image");
  if (canon.contains("context") && canon["context"].is_object()) canon["context"].erase("upload");
  const std::string content_hash = sha256(canon.dump() + "\n" + parent_key);

  int queued_node = 0, queued_project = 0;
  for (auto& id : queue_) {
    ++queued_node;
    if (builds_[id].project_id == p.project_id) ++queued_project;
  }
  if (queued_node >= cfg_.max_queued_per_node || queued_project >= cfg_.max_queued_per_project)
    return fail(ErrorCode::kConcurrencyLimited, "too many template builds waiting (" + std::to_string(queued_project) +
                                                    " of this project, " + std::to_string(queued_node) +
                                                    " on the node); wait for some to finish");
  // What the project's templates hold on the node's disk (a root shared by several of its
  // versions counted once), and the disk's reserve for running sandboxes. A build whose spec
  // was built before serves that root again and adds nothing.
  const TemplateBuildRecord* reused = nullptr;  // an identical spec on the same parent, built
  std::map<std::string, uint64_t> roots;         // the project's ready roots: artifact -> bytes
  for (auto& [id, b] : builds_) {
    if (b.deleted_ms || b.project_id != p.project_id || b.status != "ready") continue;
    if (!reused && b.content_hash == content_hash) reused = &b;
    if (!b.artifact.empty()) roots[b.artifact] = b.doc.value("size_bytes", uint64_t{0});
  }
  if (!reused) {
    if (auto full = disk_reserve_error(cfg_.data_dir, cfg_.disk_reserve_gib, "no build was queued")) return fail(*full);
    uint64_t held = 0;
    for (auto& [artifact, bytes] : roots) held += bytes;
    if (held >= gib_bytes(cfg_.max_gib_per_project))
      return fail(ErrorCode::kQuotaExceeded, "this project's templates hold " + std::to_string(held >> 20) +
                                                 " MiB, at or over its limit of " + gib_text(cfg_.max_gib_per_project) +
                                                 " (--template-max-gib-per-project); delete templates or versions to build more");
  }

  // The template: the project's own of that name, or a new one.
  std::string template_id;
  int version = 1;
  for (auto& [id, b] : builds_)
    if (!b.deleted_ms && b.project_id == p.project_id && b.name == s.name) {
      template_id = b.template_id;
      version = std::max(version, b.version + 1);
    }
  if (template_id.empty()) {
    std::set<std::string> mine;
    for (auto& [id, b] : builds_)
      if (!b.deleted_ms && b.project_id == p.project_id) mine.insert(b.template_id);
    if (static_cast<int>(mine.size()) >= cfg_.max_templates_per_project)
      return fail(ErrorCode::kQuotaExceeded, "this project has " + std::to_string(mine.size()) +
                                                 " templates, its maximum (--template-max-per-project); delete one first");
    template_id = new_id("tpl");
  }

  // Defaults for its sandboxes: the parent template's, then this spec's, then the image's
  // (filled at build time).
  json defaults = s.source.from != "base" && source.contains("parent_defaults") ? source["parent_defaults"] : json::object();
  if (!defaults.is_object()) defaults = json::object();
  json env = defaults.value("env", json::object());
  for (auto& [k, v] : s.env) env[k] = v;
  defaults["env"] = env;
  if (!s.workdir.empty()) defaults["workdir"] = s.workdir;
  if (!s.user.empty()) defaults["user"] = s.user;
  if (s.start) defaults["start"] = *s.start;
  else if (!s.start_from_image) defaults["start"] = defaults.value("start", json(nullptr));
  if (s.start || s.start_from_image) defaults["ready"] = canon["ready"];
  if (s.vcpu) defaults["vcpu"] = *s.vcpu;
  if (s.memory_mib) defaults["memory_mib"] = *s.memory_mib;
  if (s.disk_gib) defaults["disk_gib"] = *s.disk_gib;
  if (s.warm_pool > 0) defaults["warm_pool"] = s.warm_pool;
  else defaults.erase("warm_pool");  // a parent's pool is its own
  source.erase("parent_defaults");

  TemplateBuildRecord rec;
  rec.id = new_id("bld");
  rec.template_id = template_id;
  rec.project_id = p.project_id;
  rec.name = s.name;
  rec.version = version;
  rec.content_hash = content_hash;
  rec.created_ms = now_unix_ms();
  rec.doc = {{"spec", body}, {"source", source}, {"defaults", defaults}, {"steps", json::array()}, {"public", make_public},
             {"build", {{"timeout_s", s.build_timeout_s.value_or(cfg_.build_timeout_s)},
                        {"disk_gib", s.build_disk_gib.value_or(cfg_.build_disk_gib)},
                        {"egress", {{"mode", s.build_egress.mode}, {"allow", s.build_egress.allow}}}}}};
  // An identical spec on the same parent: what was built serves again, at once.
  if (reused) {
    const TemplateBuildRecord& b = *reused;
    rec.status = "ready";
    rec.artifact = b.artifact;
    rec.started_ms = rec.finished_ms = rec.created_ms;
    rec.doc["reused_from"] = b.id;
    rec.doc["defaults"] = b.doc.value("defaults", defaults);
    for (const char* k : {"images", "size_bytes", "steps"})
      if (b.doc.contains(k) && (own(b) || std::string(k) != "images")) rec.doc[k] = b.doc[k];
  }
  if (auto r = store_.put_template_build(rec); !r) return fail(r.error());
  builds_[rec.id] = rec;
  // A template keeps its newest versions (and its newest ready one); older ones are deleted
  // like a template is: their files go once no sandbox or snapshot uses them.
  {
    std::vector<TemplateBuildRecord*> versions;
    for (auto& [id, b] : builds_)
      if (b.template_id == template_id && !b.deleted_ms) versions.push_back(&b);
    std::sort(versions.begin(), versions.end(), [](auto* a, auto* b) { return a->version > b->version; });
    const TemplateBuildRecord* newest_ready = nullptr;
    for (auto* b : versions)
      if (b->status == "ready") {
        newest_ready = b;
        break;
      }
    for (size_t i = static_cast<size_t>(cfg_.max_versions); i < versions.size(); ++i) {
      TemplateBuildRecord* b = versions[i];
      if (b == newest_ready || !terminal(b->status)) continue;
      b->deleted_ms = rec.created_ms;
      (void)store_.put_template_build(*b);
      gc_wanted_ = true;
    }
  }
  if (rec.status == "ready") {
    lk.unlock();
    append_log(log_path(rec.id), "== " + rec.name + " v" + std::to_string(rec.version) + ": the same spec on the same parent as " +
                                     rec.doc["reused_from"].get<std::string>() + ", reused\n");
    lk.lock();
  } else {
    queue_.push_back(rec.id);
    cv_.notify_one();
  }
  std::vector<TemplateBuildRecord> all;
  for (auto& [id, b] : builds_)
    if (b.template_id == template_id && !b.deleted_ms) all.push_back(b);
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return a.version < b.version; });
  json out = template_object(all);
  out["build"] = build_object(rec);
  if (rec.status == "ready") {
    lk.unlock();
    sync_pools();
    lk.lock();
  }
  spdlog::info("template {} ({}) v{}: build {} {} (project {})", rec.name, rec.template_id, rec.version, rec.id,
               rec.status == "ready" ? "reused an identical build" : "queued", rec.project_id);
  return out;
}

Result<json> TemplateService::upload(const sandbox::Principal& p, const sandbox::ChunkSource& source) {
  sweep_uploads();
  // At its maximum, a project's oldest upload that a build has read (and no build still to
  // finish names) makes room, once the new one has arrived.
  auto evictable = [&]() -> std::optional<Upload> {
    int mine = 0;
    const Upload* oldest_used = nullptr;
    for (auto& [id, u] : uploads_)
      if (u.project_id == p.project_id) {
        ++mine;
        bool pending = false;
        for (auto& [bid, b] : builds_)
          pending = pending || (!terminal(b.status) && b.doc["source"].dump().find(u.path) != std::string::npos);
        if (u.used && !pending && (!oldest_used || u.created_ms < oldest_used->created_ms)) oldest_used = &u;
      }
    if (mine < cfg_.max_uploads_per_project) return std::nullopt;
    if (!oldest_used) return Upload{};  // full, and nothing may go
    return *oldest_used;
  };
  {
    std::lock_guard lk(mu_);
    if (auto e = evictable(); e && e->id.empty())
      return fail(ErrorCode::kConcurrencyLimited, "this project holds " + std::to_string(cfg_.max_uploads_per_project) +
                                                      " uploads no finished build has used; they expire an hour after upload");
  }
  if (auto full = disk_reserve_error(cfg_.data_dir, cfg_.disk_reserve_gib, "the upload was not taken")) return fail(*full);
  Upload u;
  u.id = new_id("upl");
  u.project_id = p.project_id;
  u.path = cfg_.data_dir + "/template-uploads/" + u.id + ".tar";
  const std::string part = u.path + ".part";
  UniqueFd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) return fail(errno_error(ErrorCode::kInternal, "creating " + part, errno));
  auto undo = [&](Error e) -> Result<json> {
    ::unlink(part.c_str());
    return fail(std::move(e));
  };
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  for (;;) {
    auto n = source(buf.data(), buf.size());
    if (!n) {
      EVP_MD_CTX_free(ctx);
      return undo(n.error());
    }
    if (*n == 0) break;
    u.size += *n;
    if (u.size > cfg_.max_upload_bytes) {
      EVP_MD_CTX_free(ctx);
      return undo(Error{ErrorCode::kPayloadTooLarge, "upload: larger than " + std::to_string(cfg_.max_upload_bytes) +
                                                         " bytes (--template-max-upload-bytes)"});
    }
    EVP_DigestUpdate(ctx, buf.data(), *n);
    for (size_t off = 0; off < *n;) {
      ssize_t w = ::write(fd.get(), buf.data() + off, *n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        EVP_MD_CTX_free(ctx);
        return undo(errno_error(errno == ENOSPC ? ErrorCode::kCapacityUnavailable : ErrorCode::kInternal,
                                "writing the upload", errno));
      }
      off += static_cast<size_t>(w);
    }
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int mdn = 0;
  EVP_DigestFinal_ex(ctx, md, &mdn);
  EVP_MD_CTX_free(ctx);
  u.sha256 = hex(md, mdn);
  u.created_ms = now_unix_ms();
  if (u.size == 0) return undo(Error{ErrorCode::kInvalidRequest, "upload: the body is empty"});
  if (::fsync(fd.get()) != 0 || ::rename(part.c_str(), u.path.c_str()) != 0)
    return undo(errno_error(ErrorCode::kInternal, "keeping the upload", errno));
  {
    // The same bytes again: the upload there is serves (its hour starts again).
    std::lock_guard lk(mu_);
    for (auto& [id, other] : uploads_)
      if (other.project_id == u.project_id && other.sha256 == u.sha256 && other.size == u.size) {
        other.created_ms = u.created_ms;
        ::unlink(u.path.c_str());  // this copy: the one there serves
        return json{{"id", other.id},
                    {"object", "template_upload"},
                    {"size_bytes", other.size},
                    {"sha256", other.sha256},
                    {"expires_at", format_rfc3339(other.created_ms + cfg_.upload_ttl_ms)}};
      }
  }
  // In a cluster the template may be asked of another node: the upload goes to the object
  // store too, or it is refused (an upload only this node has would fail there).
  if (cfg_.object_store)
    if (auto r = publish_upload(u); !r) {
      ::unlink(u.path.c_str());
      return fail(r.error().wrap("keeping the upload for the cluster"));
    }
  json meta = {{"id", u.id}, {"project_id", u.project_id}, {"sha256", u.sha256}, {"size", u.size}, {"created_ms", u.created_ms}};
  std::ofstream(cfg_.data_dir + "/template-uploads/" + u.id + ".json", std::ios::trunc) << meta.dump();
  std::optional<Upload> gone;
  {
    std::lock_guard lk(mu_);
    gone = evictable();
    if (gone && !gone->id.empty()) uploads_.erase(gone->id);
    uploads_[u.id] = u;
  }
  if (gone && !gone->id.empty()) drop_upload(*gone);
  return json{{"id", u.id},
              {"object", "template_upload"},
              {"size_bytes", u.size},
              {"sha256", u.sha256},
              {"expires_at", format_rfc3339(u.created_ms + cfg_.upload_ttl_ms)}};
}

Result<json> TemplateService::list(const sandbox::Principal& p) {
  refresh();
  json out = sandboxes_.templates();
  json& data = out["data"];
  std::lock_guard lk(mu_);
  // Each name as a create would resolve it (visible_builds): the project's own, else the one
  // node-wide template that name reaches, with its ready versions only.
  std::set<std::string> names;
  for (auto& [id, b] : builds_)
    if (!b.deleted_ms && (b.project_id == p.project_id || b.project_id.empty() || b.doc.value("public", false)))
      names.insert(b.name);
  for (auto& name : names)
    if (auto v = visible_builds(p.project_id, name); !v.empty()) data.push_back(template_object(v));
  return out;
}

Result<json> TemplateService::get(const sandbox::Principal& p, const std::string& name_or_id) {
  refresh();
  {
    std::lock_guard lk(mu_);
    auto v = visible_builds(p.project_id, name_or_id);
    if (!v.empty()) return template_object(v);
  }
  const json builtin = sandboxes_.templates();
  for (auto& t : builtin["data"])
    if (t.value("name", "") == name_or_id || t.value("id", "") == name_or_id) return t;
  return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" (see GET /v1/templates)");
}

Result<json> TemplateService::remove(const sandbox::Principal& p, const std::string& name_or_id, bool force) {
  refresh(true);
  std::string template_id, name;
  {
    std::lock_guard lk(mu_);
    auto v = visible_builds(p.project_id, name_or_id);
    if (v.empty()) {
      const json builtin = sandboxes_.templates();
      for (auto& t : builtin["data"])
        if (t.value("name", "") == name_or_id || t.value("id", "") == name_or_id)
          return fail(ErrorCode::kForbidden, "template \"" + name_or_id + "\" is built into the node and cannot be deleted");
      return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" (see GET /v1/templates)");
    }
    if (v.front().project_id != p.project_id)
      return fail(ErrorCode::kForbidden, "template \"" + name_or_id + "\" is published node-wide by the operator");
    template_id = v.front().template_id;
    name = v.front().name;
    for (auto& b : v)
      if (!terminal(b.status))
        return fail(ErrorCode::kConflict, "template \"" + name + "\" has a build in progress (" + b.id + "); wait for it");
  }
  int users = 0;
  for (auto& s : sandboxes_.registry().all()) {
    std::lock_guard lk(s->mu);
    if (s->rec.template_id == template_id && !s->rec.ended()) ++users;
  }
  if (users > 0 && !force)
    return fail(ErrorCode::kConflict, "template \"" + name + "\" is used by " + std::to_string(users) +
                                          " sandbox(es); delete them first, or pass ?force=true (they keep running)");
  const int64_t now = now_unix_ms();
  if (auto r = store_.delete_template(template_id, now); !r) return fail(r.error());
  {
    std::lock_guard lk(mu_);
    for (auto& [id, b] : builds_)
      if (b.template_id == template_id && !b.deleted_ms) b.deleted_ms = now;
  }
  sync_pools();
  {
    // Its files go behind the answer (removing a root takes seconds).
    std::lock_guard lk(mu_);
    gc_wanted_ = true;
  }
  cv_.notify_one();
  spdlog::info("template {} ({}) deleted (project {}){}", name, template_id, p.project_id,
               users ? ", " + std::to_string(users) + " sandbox(es) keep running on it" : "");
  return json{{"id", template_id}, {"object", "template"}, {"name", name}, {"deleted", true}};
}

Result<json> TemplateService::builds(const sandbox::Principal& p, const std::string& name_or_id) {
  refresh();
  std::lock_guard lk(mu_);
  auto v = visible_builds(p.project_id, name_or_id);
  if (v.empty()) return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" with builds");
  json data = json::array();
  for (auto it = v.rbegin(); it != v.rend(); ++it) data.push_back(build_object(*it));
  return json{{"object", "list"}, {"data", data}, {"next_cursor", nullptr}};
}

Result<json> TemplateService::build(const sandbox::Principal& p, const std::string& name_or_id, const std::string& build_id) {
  refresh();
  std::lock_guard lk(mu_);
  const auto v = visible_builds(p.project_id, name_or_id);
  if (v.empty()) return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" (see GET /v1/templates)");
  for (auto& b : v)
    if (b.id == build_id) return build_object(b);
  return fail(ErrorCode::kNotFound, "no build " + build_id + " of template \"" + name_or_id + "\"");
}

Result<void> TemplateService::logs(const sandbox::Principal& p, const std::string& name_or_id, const std::string& build_id,
                                   bool follow, const std::function<Result<void>(std::string_view)>& write,
                                   const sandbox::CancelCheck& gone) {
  refresh();
  {
    std::lock_guard lk(mu_);
    const TemplateBuildRecord* found = nullptr;
    const auto v = visible_builds(p.project_id, name_or_id);
    if (v.empty()) return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" (see GET /v1/templates)");
    for (auto& b : v)
      if (b.id == build_id) found = &b;
    if (!found) return fail(ErrorCode::kNotFound, "no build " + build_id + " of template \"" + name_or_id + "\"");
    // A build's log may hold what its steps printed (keys, tokens): the publisher's alone.
    if (found->project_id != p.project_id)
      return fail(ErrorCode::kNotFound, "build " + build_id + "'s log is its publisher's; other projects see the template's ready versions");
    // The log is a file on the node that runs the build; a router sends the request there.
    if (!own(*found))
      return fail(ErrorCode::kNodeUnavailable, "build " + build_id + " runs on node " + found->node_id +
                                                   ": its log is there (ask through a b3os-router, which sends it there)");
  }
  const std::string path = log_path(build_id);
  uint64_t off = 0;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd) {
      for (;;) {
        ssize_t n = ::pread(fd.get(), buf.data(), buf.size(), static_cast<off_t>(off));
        if (n <= 0) break;
        off += static_cast<uint64_t>(n);
        if (auto r = write(std::string_view(buf.data(), static_cast<size_t>(n))); !r) return r;
      }
    }
    std::unique_lock lk(mu_);
    auto* b = find_build(build_id);
    const bool done = !b || terminal(b->status) || stopping_;
    if (!follow || (done && log_sizes_[build_id] <= off)) return {};
    if (done) continue;  // the last bytes came with the end
    log_cv_.wait_for(lk, 1s);
    if (gone && gone()) return {};
  }
}

// ---- TemplateCatalog ----

Result<std::optional<sandbox::TemplateChoice>> TemplateService::resolve(const std::string& project_id,
                                                                       const std::string& name_or_id) {
  refresh();
  TemplateBuildRecord chosen;
  {
    std::lock_guard lk(mu_);
    auto v = visible_builds(project_id, name_or_id);
    if (v.empty()) return std::optional<sandbox::TemplateChoice>();
    const TemplateBuildRecord* ready = latest_ready(v);
    if (!ready)
      return fail(ErrorCode::kConflict, "template \"" + name_or_id + "\" has no ready version yet (build " + v.back().id +
                                            " is " + v.back().status + ")");
    chosen = *ready;
  }
  // Built on another node: its root comes from the object store at its first use here; its
  // checkpoint does not (it names that node's files), so sandboxes of it boot here.
  const TemplateBuildRecord* r = &chosen;
  if (auto f = ensure_artifact(chosen.artifact); !f) return fail(f.error());  // here already: at once
  if (!own(chosen)) chosen.doc.erase("images");
  sandbox::TemplateChoice c;
  c.id = r->template_id;
  c.name = r->name;
  c.build_id = r->id;
  c.version = r->version;
  c.rootfs = artifact_rootfs(r->artifact);
  const json d = r->doc.value("defaults", json::object());
  const json denv = d.value("env", json::object());
  for (auto& [k, val] : denv.items())
    if (val.is_string()) c.env[k] = val.get<std::string>();
  if (d.contains("vcpu")) c.vcpu = d["vcpu"].get<int>();
  if (d.contains("memory_mib")) c.memory_mib = d["memory_mib"].get<int>();
  if (d.contains("disk_gib")) c.disk_gib = d["disk_gib"].get<int>();
  if (r->doc.contains("images") && r->doc["images"].is_object()) {
    c.image = r->doc["images"].value("image", "");
    c.net_image = r->doc["images"].value("net_image", "");
    c.image_memory_mib = r->doc["images"].value("memory_mib", 0);
  }
  if (d.contains("start") && d["start"].is_string())
    c.start = [this, d](sandbox::LiveSandbox& s) { return start_and_wait(s, d, ""); };
  if (d.value("warm_pool", 0) > 0 && !c.image.empty()) c.pool_key = r->id;
  return std::optional<sandbox::TemplateChoice>(std::move(c));
}

sandbox::TemplateCatalog::ExecDefaults TemplateService::exec_defaults(const std::string& template_id,
                                                                     const std::string& rootfs) {
  ExecDefaults out;
  std::lock_guard lk(mu_);
  // The version the sandbox runs (its root), else the template's newest: never another
  // template's, though several may share a root (one with no build step shares its parent's).
  const TemplateBuildRecord* best = nullptr;
  auto better = [&](const TemplateBuildRecord& b) {
    if (!best) return true;
    const bool mine = artifact_rootfs(b.artifact) == rootfs, theirs = artifact_rootfs(best->artifact) == rootfs;
    if (mine != theirs) return mine;
    return b.version > best->version;
  };
  for (auto& [id, b] : builds_)
    if (b.template_id == template_id && b.status == "ready" && better(b)) best = &b;
  if (best) {
    const json d = best->doc.value("defaults", json::object());
    out.workdir = d.value("workdir", "");
    out.user = d.value("user", "");
  }
  return out;
}

void TemplateService::released(const std::string& template_id) {
  {
    std::lock_guard lk(mu_);
    bool deleted = false;
    for (auto& [id, b] : builds_) deleted = deleted || (b.template_id == template_id && b.deleted_ms);
    if (!deleted) return;  // its files stay anyway
    gc_wanted_ = true;
  }
  cv_.notify_one();
}

// ---- builds ----

void TemplateService::save(const TemplateBuildRecord& rec) {
  if (auto r = store_.put_template_build(rec); !r)
    spdlog::warn("template build {}: saving its record: {}", rec.id, r.error().message);
  std::lock_guard lk(mu_);
  builds_[rec.id] = rec;
  log_cv_.notify_all();
}

void TemplateService::append_log(const std::string& log, std::string_view bytes) {
  if (log.empty()) return;
  const std::string id = fs::path(log).stem().string();
  {
    std::lock_guard lk(mu_);
    uint64_t& size = log_sizes_[id];
    if (size >= cfg_.max_log_bytes) return;
    std::string_view b = bytes;
    std::string note;
    if (size + b.size() > cfg_.max_log_bytes) {
      b = b.substr(0, cfg_.max_log_bytes - size);
      note = "\n[b3os: the log reached its limit of " + std::to_string(cfg_.max_log_bytes) + " bytes; the rest is dropped]\n";
    }
    UniqueFd fd(::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (fd) {
      (void)!::write(fd.get(), b.data(), b.size());
      if (!note.empty()) (void)!::write(fd.get(), note.data(), note.size());
    }
    size += b.size() + note.size();
  }
  log_cv_.notify_all();
}

std::deque<std::string>::iterator TemplateService::next_build() {
  auto best = queue_.end();
  int64_t best_started = 0;
  for (auto it = queue_.begin(); it != queue_.end(); ++it) {
    const std::string& project = builds_[*it].project_id;
    if (running_projects_.count(project)) continue;  // one build of a project at a time
    const auto last = last_started_.find(project);
    const int64_t started = last == last_started_.end() ? 0 : last->second;
    if (best == queue_.end() || started < best_started) {
      best = it;
      best_started = started;
    }
  }
  return best;
}

bool TemplateService::cancelled(const std::string& build_id) {
  std::lock_guard lk(mu_);
  return stopping_ || cancelled_.count(build_id) > 0;
}

void TemplateService::worker() {
  for (;;) {
    std::string id, project;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || next_build() != queue_.end() || gc_wanted_; });
      if (stopping_) return;
      auto next = next_build();
      if (next == queue_.end()) {
        gc_wanted_ = false;
        lk.unlock();
        collect_garbage();
        continue;
      }
      id = *next;
      queue_.erase(next);
      project = builds_[id].project_id;
      running_projects_.insert(project);
      last_started_[project] = steady_ms();
      ++running_;
    }
    run_build(id);
    {
      std::lock_guard lk(mu_);
      --running_;
      running_projects_.erase(project);
      cancelled_.erase(id);
    }
    cv_.notify_all();  // the project's next build may start now
    collect_garbage();
  }
}

Result<std::pair<int, json>> TemplateService::cancel(const sandbox::Principal& p, const std::string& name_or_id,
                                                     const std::string& build_id) {
  refresh();
  TemplateBuildRecord rec;
  {
    std::lock_guard lk(mu_);
    const auto v = visible_builds(p.project_id, name_or_id);
    if (v.empty()) return fail(ErrorCode::kTemplateNotFound, "no template \"" + name_or_id + "\" (see GET /v1/templates)");
    const TemplateBuildRecord* found = nullptr;
    for (auto& b : v)
      if (b.id == build_id) found = &b;
    // Another project's (a public template's) builds are not this key's to stop.
    if (!found || found->project_id != p.project_id)
      return fail(ErrorCode::kNotFound, "no build " + build_id + " of template \"" + name_or_id + "\"");
    if (terminal(found->status))
      return fail(ErrorCode::kConflict, "build " + build_id + " is " + found->status + " already; only a queued or "
                                        "running build can be cancelled");
    if (!own(*found))
      return fail(ErrorCode::kConflict, "build " + build_id + " runs on node " + found->node_id + "; cancel it there");
    auto q = std::find(queue_.begin(), queue_.end(), build_id);
    if (q == queue_.end()) {
      // Running: its step is killed (run_live's cancel), and no further step starts.
      cancelled_.insert(build_id);
      json out = build_object(*found);
      out["cancelling"] = true;
      spdlog::info("template {} v{}: build {} cancelled while it runs", found->name, found->version, build_id);
      return std::pair<int, json>{202, out};
    }
    queue_.erase(q);
    rec = *found;
  }
  rec.status = "failed";
  rec.finished_ms = now_unix_ms();
  rec.doc["error"] = {{"code", "conflict"}, {"message", "cancelled before it started (POST .../cancel)"}, {"cancelled", true}};
  save(rec);
  append_log(log_path(rec.id), "== cancelled before it started\n");
  spdlog::info("template {} v{}: build {} cancelled before it started", rec.name, rec.version, build_id);
  std::lock_guard lk(mu_);
  auto* b = find_build(build_id);
  return std::pair<int, json>{200, build_object(b ? *b : rec)};
}

void TemplateService::run_build(const std::string& build_id) {
  TemplateBuildRecord rec;
  {
    std::lock_guard lk(mu_);
    auto* b = find_build(build_id);
    if (!b) return;
    rec = *b;
  }
  const std::string log = log_path(rec.id);
  rec.status = "building";
  rec.started_ms = now_unix_ms();
  save(rec);
  append_log(log, "== " + rec.name + " v" + std::to_string(rec.version) + " (" + rec.template_id + "), build " + rec.id + "\n");
  auto spec = parse_template_spec(rec.doc["spec"], SpecLimits{cfg_.max_build_timeout_s, cfg_.max_build_disk_gib});
  Result<void> done = spec ? Result<void>{} : Result<void>(fail(spec.error()));
  // A build is a sandbox of its project: it counts against the project's maximum.
  std::optional<sandbox::Reservation> held;
  if (done) {
    const sandbox::Size size{cfg_.build_memory_mib, cfg_.build_vcpu, rec.doc["build"].value("disk_gib", cfg_.build_disk_gib)};
    if (auto r = sandboxes_.registry().reserve(rec.project_id, 1, size); !r) done = fail(r.error().wrap("starting the build"));
    else held.emplace(sandboxes_.registry(), rec.project_id, 1, size);
  }
  if (done) done = build_root(rec, *spec, log);
  if (done) done = build_images(rec, *spec, log);
  // Ready means ready on every node: the root is in the object store first.
  if (done && cfg_.object_store) done = publish_artifact(rec.artifact, log);
  held.reset();
  rec.finished_ms = now_unix_ms();
  if (done) {
    rec.status = "ready";
    append_log(log, "== ready in " + std::to_string((rec.finished_ms - rec.started_ms) / 1000.0) + " s\n");
  } else {
    rec.status = "failed";
    json err = rec.doc.value("error", json::object());
    if (!err.is_object()) err = json::object();
    err["code"] = std::string(error_code_name(done.error().code));
    err["message"] = done.error().message;
    rec.doc["error"] = err;
    append_log(log, "== failed: " + done.error().message + "\n");
  }
  save(rec);
  {
    // The uploads it read may make room for others now (upload()).
    std::lock_guard lk(mu_);
    const std::string doc = rec.doc["source"].dump();
    for (auto& [id, u] : uploads_)
      if (doc.find(u.path) != std::string::npos) u.used = true;
  }
  if (done) sync_pools();
  spdlog::info("template {} v{}: build {} {}", rec.name, rec.version, rec.id,
               done ? "ready" : "failed: " + done.error().message);
}

Result<std::string> TemplateService::ensure_debian_root(const std::string& log) {
  std::lock_guard lk(debian_mu_);
  const std::string dir = roots_dir() + "/" + kDebianArtifact;
  if (fs::exists(dir + "/.b3os-ready")) return dir + "/rootfs";
  append_log(log, "-- debian:bookworm: mmdebstrap --variant=minbase from " + cfg_.debian_mirror + " (once per node)\n");
  const std::string building = dir + ".building";
  std::error_code ec;
  fs::remove_all(building, ec);
  fs::create_directories(building, ec);
  auto r = sys::run({"mmdebstrap", "--variant=minbase", "--mode=root", "--format=directory",
                     "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
                     "bookworm", building + "/rootfs", cfg_.debian_mirror},
                    std::chrono::minutes(20));
  if (!r || r->exit_code != 0) {
    append_log(log, r ? tail(r->output, kTailBytes) + "\n" : r.error().message + "\n");
    fs::remove_all(building, ec);
    return fail(ErrorCode::kProductUnavailable,
                "from: making a Debian bookworm root failed (mmdebstrap, mirror " + cfg_.debian_mirror + ")" +
                    (r ? ": " + tail(r->output, 400) : ": " + r.error().message));
  }
  if (auto r = prepare_root(building + "/rootfs"); !r) {
    fs::remove_all(building, ec);
    return fail(r.error().wrap("from: preparing the Debian root"));
  }
  std::ofstream(building + "/.b3os-ready").flush();
  fs::rename(building, dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "keeping the Debian root: " + ec.message());
  return dir + "/rootfs";
}

Result<void> TemplateService::prepare_root(const std::string& root) {
  // What every sandbox's root needs: mount points, the agent's place, a workspace. The root is
  // a tenant's (an image's layers, a build's result): every change is made beneath its fd and
  // never through a symlink (image::TenantRoot). An image's own entries win: a symlink or a file
  // where a directory would go is left as it is, and resolved inside the sandbox.
  auto t = image::TenantRoot::open(root);
  if (!t) return fail(t.error());
  for (const char* d : {"proc", "dev", "sys", "tmp", ".b3os", "workspace", "etc", "root"})
    if (auto r = t->ensure_dir(d); !r) return fail(r.error());
  for (const char* d : {"workspace", "tmp"})
    if (auto r = t->chmod_dir(d, 01777); !r) return fail(r.error());
  if (auto r = t->ensure_file("etc/resolv.conf"); !r) return fail(r.error());
  return {};
}

Result<void> TemplateService::import_image(TemplateBuildRecord& rec, const std::string& root, const std::string& log) {
  const json source = rec.doc["source"];
  append_log(log, "-- importing the image (" + source.value("sha256", source.value("path", "")) + ")\n");
  // Bounded by the build's size limit as well as the importer's own.
  image::Limits limits = cfg_.image_limits;
  const uint64_t disk = static_cast<uint64_t>(rec.doc["build"].value("disk_gib", cfg_.build_disk_gib)) << 30;
  limits.max_total_bytes = std::min(limits.max_total_bytes, disk);
  limits.max_layer_bytes = std::min(limits.max_layer_bytes, disk);
  auto cfg = image::import(source.value("path", ""), root, limits,
                           [&](std::string_view line) { append_log(log, "   " + std::string(line) + "\n"); });
  if (!cfg) {
    rec.doc["error"] = {{"step", "import"}};
    return fail(cfg.error());  // its message names the image already ("image: ...")
  }
  rec.doc["image_config"] = {{"entrypoint", cfg->entrypoint}, {"cmd", cfg->cmd}, {"env", cfg->env},
                             {"workdir", cfg->workdir}, {"user", cfg->user}, {"exposed_ports", cfg->exposed_ports},
                             {"format", cfg->format}, {"layers", cfg->layers}, {"bytes", cfg->bytes}};
  append_log(log, "   " + cfg->format + ", " + std::to_string(cfg->layers) + " layers, " + std::to_string(cfg->bytes) +
                      " bytes\n");
  return {};
}

std::string TemplateService::step_artifact(const TemplateBuildRecord& rec) {
  // A step's result is the project's own: what its steps made (SSH host keys, certificates,
  // whatever a run step wrote) must not be handed to another project's identical spec, nor a
  // root planted for it. Named by the project and the content.
  return "a-" + sha256(rec.project_id + "\n" + rec.content_hash).substr(0, 24);
}

TemplateService::ArtifactLock TemplateService::lock_artifact(const std::string& artifact) {
  std::shared_ptr<std::mutex> m;
  {
    std::lock_guard lk(mu_);
    auto& slot = artifact_locks_[artifact];
    if (!slot) slot = std::make_shared<std::mutex>();
    m = slot;
    // Entries no build holds are dropped as they are passed by (a few per build at most).
    for (auto it = artifact_locks_.begin(); it != artifact_locks_.end();)
      it = it->second.use_count() == 1 && it->first != artifact ? artifact_locks_.erase(it) : std::next(it);
  }
  ArtifactLock held;
  held.mu = m;
  held.lk = std::unique_lock(*m);
  return held;
}

Result<void> TemplateService::import_alone(TemplateBuildRecord& rec, const std::string& log) {
  // An image and nothing to run: its layers go straight into the template's root (libarchive
  // on the host executes nothing from the image; the importer writes nothing outside the root
  // and stops at the build's size limit), without a build sandbox or a copy.
  auto t0 = Clock::now();
  // Deterministic (the image's bytes, nothing run): one root serves every project's import.
  const std::string artifact = "a-" + rec.content_hash.substr(0, 24);
  const std::string dest = roots_dir() + "/" + artifact;
  std::error_code ec;
  // Check, build and rename under the root's own lock: a second build of the same root waits
  // and then finds it made, and never removes one that sandboxes run on.
  auto held = lock_artifact(artifact);
  if (!fs::exists(dest + "/.b3os-ready")) {
    const std::string building = roots_dir() + "/" + artifact + "." + rec.id + ".building";
    (void)image::remove_tree(building);
    fs::create_directories(building + "/rootfs", ec);  // ours: made empty here, for the import
    ::chmod(building.c_str(), 0700);
    if (ec) return fail(ErrorCode::kInternal, "creating " + building + ": " + ec.message());
    if (auto r = import_image(rec, building + "/rootfs", log); !r) {
      (void)image::remove_tree(building);
      return r;
    }
    if (auto r = prepare_root(building + "/rootfs"); !r) {
      (void)image::remove_tree(building);
      return r;
    }
    std::ofstream(building + "/.b3os-ready").flush();
    fs::rename(building, dest, ec);
    if (ec) {
      (void)image::remove_tree(building);
      return fail(ErrorCode::kInternal, "keeping " + dest + ": " + ec.message());
    }
  }
  rec.artifact = artifact;
  auto du = sys::run({"du", "-sxb", dest + "/rootfs"}, std::chrono::minutes(5));
  if (du && du->exit_code == 0) rec.doc["size_bytes"] = std::strtoull(du->output.c_str(), nullptr, 10);
  rec.doc["steps"] = json::array({{{"name", "import"}, {"exit_code", 0},
                                   {"duration_ms", std::chrono::duration<double, std::milli>(Clock::now() - t0).count()}}});
  save(rec);
  return {};
}

Result<void> TemplateService::build_root(TemplateBuildRecord& rec, const TemplateSpec& spec, const std::string& log) {
  const json source = rec.doc["source"];
  const std::string kind = source.value("kind", "base");
  const bool image = kind == "image";
  const auto deadline = Clock::now() + std::chrono::seconds(rec.doc["build"].value("timeout_s", cfg_.build_timeout_s));
  auto remaining_ms = [&] {
    return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
  };
  std::string parent_rootfs = source.value("rootfs", "");
  if (kind == "template")
    if (auto f = ensure_artifact(source.value("artifact", "")); !f) return fail(f.error().wrap("from: the parent's root"));
  if (kind == "debian") {
    auto r = ensure_debian_root(log);
    if (!r) return fail(r.error());
    parent_rootfs = *r;
  }
  if (!image && !spec.has_steps()) {
    // Nothing to run: the parent's root serves as it is (the template adds defaults, a start).
    rec.artifact = kind == "debian" ? kDebianArtifact : source.value("artifact", "base");
    append_log(log, "-- no build steps: the parent's root (" + rec.artifact + ") is used as it is\n");
    auto du = sys::run({"du", "-sxb", artifact_rootfs(rec.artifact)}, std::chrono::minutes(5));
    if (du && du->exit_code == 0) rec.doc["size_bytes"] = std::strtoull(du->output.c_str(), nullptr, 10);
    return {};
  }
  if (image && !spec.has_steps()) return import_alone(rec, log);
  if (!image && !fs::exists(parent_rootfs))
    return fail(ErrorCode::kProductUnavailable, "from: the parent's root " + parent_rootfs + " is not on this node");

  // The build sandbox: a copy of the parent's root on its own disk (the build's size limit),
  // written in place; its steps run inside it, never on the host.
  json& steps = rec.doc["steps"];
  steps = json::array();
  auto step_done = [&](const std::string& name, int code, double ms) {
    steps.push_back({{"name", name}, {"exit_code", code}, {"duration_ms", ms}});
    save(rec);
  };
  Error hook_error{ErrorCode::kInternal, ""};
  std::string disk_root;  // where the hook put the root: the build's disk
  sandbox::LaunchRequest l;
  l.id = new_id("sbx");
  l.project_id = "";  // no project can reach it
  l.rootfs = parent_rootfs;
  l.vcpu = cfg_.build_vcpu;
  l.memory_mib = cfg_.build_memory_mib;
  l.disk_gib = rec.doc["build"].value("disk_gib", cfg_.build_disk_gib);
  l.from_pool = false;
  l.network = sandboxes_.launcher().network() != nullptr;
  if (!l.network && !spec.packages.empty())
    return fail(ErrorCode::kProductUnavailable, "packages: this node runs without sandbox networks (--network off)");
  const std::string context = source.contains("context") ? source["context"].value("path", "") : "";
  l.root_on_disk = [&](const std::string& disk_dir) -> Result<std::string> {
    const std::string root = disk_dir + "/root";
    disk_root = root;
    std::error_code ec;
    fs::create_directory(root, ec);  // ours: the build disk's root, made empty here
    if (ec) return fail(ErrorCode::kInternal, "creating " + root + ": " + ec.message());
    auto t0 = Clock::now();
    if (image) {
      if (auto r = import_image(rec, root, log); !r) {
        hook_error = r.error();
        return fail(r.error());
      }
    } else {
      append_log(log, "-- copying the parent's root (" + source.value("artifact", kind) + ")\n");
      auto r = sys::run({"cp", "-a", "--one-file-system", parent_rootfs + "/.", root + "/"},
                        std::chrono::milliseconds(std::max<int64_t>(remaining_ms(), 1000)));
      if (!r || r->exit_code != 0) {
        hook_error = Error{ErrorCode::kInvalidRequest,
                           "copying the parent's root failed (the build's disk may be too small: build.disk_gib): " +
                               (r ? tail(r->output, 400) : r.error().message)};
        return fail(hook_error);
      }
    }
    if (auto r = prepare_root(root); !r) {
      hook_error = r.error();
      return fail(r.error());
    }
    if (!context.empty()) {
      // The parent's root is a tenant's: a .b3os-context.tar there may be a symlink to a host
      // file, which a path-based copy would overwrite. Unlinked and made anew beneath the fd.
      auto t = image::TenantRoot::open(root);
      auto r = t ? t->copy_in(context, ".b3os-context.tar", 0600) : Result<void>(fail(t.error()));
      if (!r) {
        hook_error = Error{ErrorCode::kInvalidRequest, "context: copying it to the build's disk: " + r.error().message};
        return fail(hook_error);
      }
    }
    step_done(image ? "import" : "copy", 0, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    return root;
  };
  sandbox::Timing t;
  Stopwatch sw;
  append_log(log, "-- starting the build sandbox\n");
  auto launched = sandboxes_.launcher().launch(l, std::nullopt, t, sw);
  if (!launched) {
    if (!hook_error.message.empty()) {
      rec.doc["error"] = {{"step", image ? "import" : "copy"}};
      return fail(hook_error);
    }
    return fail(launched.error().wrap("starting the build sandbox"));
  }
  auto s = *launched;
  struct Discard {
    sandbox::Launcher& l;
    std::shared_ptr<sandbox::LiveSandbox> s;
    ~Discard() {
      if (s) l.discard(*s);
    }
  } discard{sandboxes_.launcher(), s};
  if (l.network) {
    const json e = rec.doc["build"]["egress"];
    net::EgressPolicy pol{e.value("mode", "public"), e.value("allow", std::vector<std::string>{})};
    if (auto r = sandboxes_.launcher().apply_egress(*s, pol); !r) return fail(r.error().wrap("the build's egress"));
  }

  const json defaults = rec.doc["defaults"];
  std::map<std::string, std::string> env;
  const json denv = defaults.value("env", json::object());
  for (auto& [k, v] : denv.items())
    if (v.is_string()) env[k] = v.get<std::string>();
  // Runs one step: its output goes to the log as it comes; a non-zero exit fails the build
  // naming the step, its exit code and the end of its output.
  auto run_step = [&](const std::string& name, const std::string& shown, std::vector<std::string> argv,
                      std::optional<std::string> stdin_data = std::nullopt,
                      std::map<std::string, std::string> extra_env = {}) -> Result<void> {
    if (remaining_ms() <= 0) return fail(ErrorCode::kRequestTimeout, "the build passed its time limit (build.timeout_s)");
    if (cancelled(rec.id)) return fail(ErrorCode::kConflict, "cancelled (POST .../cancel) before " + name);
    append_log(log, "-- " + name + ": " + shown + "\n");
    sandbox::ExecSpec e;
    e.argv = std::move(argv);
    e.env = env;
    for (auto& [k, v] : extra_env) e.env[k] = v;
    e.cwd = "/";
    e.timeout_ms = remaining_ms();
    e.stdin_data = std::move(stdin_data);
    std::string out_tail;
    auto t0 = Clock::now();
    auto r = sandboxes_.exec().run_live(
        *s, e, [&] { return cancelled(rec.id); },
        [&](bool, std::string_view bytes) {
          append_log(log, bytes);
          out_tail = tail(out_tail + std::string(bytes), kTailBytes);
          return true;
        });
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!r) {
      rec.doc["error"] = {{"step", name}, {"output_tail", out_tail}};
      if (cancelled(rec.id)) {
        rec.doc["error"]["cancelled"] = true;
        return fail(ErrorCode::kConflict, name + ": cancelled (POST .../cancel)");
      }
      return fail(r.error().wrap(name));
    }
    step_done(name, r->exit_code, ms);
    if (r->timed_out || r->exit_code != 0) {
      rec.doc["error"] = json{{"step", name}, {"exit_code", r->exit_code}, {"output_tail", out_tail}};
      if (r->timed_out) return fail(ErrorCode::kRequestTimeout, name + ": the build passed its time limit (build.timeout_s)");
      return fail(ErrorCode::kInvalidRequest, name + " exited with " + std::to_string(r->exit_code) + ": " + tail(out_tail, 600));
    }
    return {};
  };
  auto sh = [](const std::string& line) { return std::vector<std::string>{"/bin/sh", "-c", line}; };

  if (!spec.packages.empty()) {
    if (!cfg_.apt_sources.empty()) {
      if (auto r = run_step("apt sources", "/etc/apt/sources.list from the node's --template-apt-sources",
                            sh("rm -f /etc/apt/sources.list.d/*; cat > /etc/apt/sources.list"), cfg_.apt_sources);
          !r)
        return r;
    }
    std::string pk;
    for (auto& p : spec.packages) pk += " " + p;
    if (auto r = run_step("packages", "apt-get install" + pk,
                          sh("set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -q; "
                             "apt-get install -y -q --no-install-recommends" + pk +
                             "; apt-get clean; rm -rf /var/lib/apt/lists/*"));
        !r)
      return r;
  }
  if (!spec.user.empty()) {
    if (auto r = run_step("user", spec.user,
                          sh("id -u \"$B3OS_USER\" >/dev/null 2>&1 || useradd -m -s /bin/sh \"$B3OS_USER\" || adduser -D \"$B3OS_USER\""),
                          std::nullopt, {{"B3OS_USER", spec.user}});
        !r)
      return r;
  }
  for (size_t i = 0; i < spec.files.size(); ++i) {
    const FileSpec& f = spec.files[i];
    char mode[8];
    std::snprintf(mode, sizeof mode, "%o", f.mode);
    if (auto r = run_step("files[" + std::to_string(i) + "]", f.path,
                          sh("set -e; mkdir -p \"$(dirname \"$B3OS_PATH\")\"; cat > \"$B3OS_PATH\"; chmod \"$B3OS_MODE\" \"$B3OS_PATH\"; "
                             "if [ -n \"$B3OS_OWNER\" ]; then chown \"$B3OS_OWNER\" \"$B3OS_PATH\"; fi"),
                          f.content, {{"B3OS_PATH", f.path}, {"B3OS_MODE", mode}, {"B3OS_OWNER", f.owner}});
        !r)
      return r;
  }
  if (!context.empty()) {
    if (auto r = run_step("context", "extracted into " + spec.context_dest,
                          sh("set -e; mkdir -p \"$B3OS_DEST\"; tar -xf /.b3os-context.tar -C \"$B3OS_DEST\" --no-same-owner; "
                             "rm -f /.b3os-context.tar"),
                          std::nullopt, {{"B3OS_DEST", spec.context_dest}});
        !r)
      return r;
  }
  for (size_t i = 0; i < spec.run.size(); ++i) {
    const std::string cwd = spec.workdir.empty() ? "/" : spec.workdir;
    if (auto r = run_step("run[" + std::to_string(i) + "]", spec.run[i],
                          sh("mkdir -p \"$B3OS_CWD\" && cd \"$B3OS_CWD\" && exec /bin/sh -c \"$B3OS_RUN\""), std::nullopt,
                          {{"B3OS_CWD", cwd}, {"B3OS_RUN", spec.run[i]}});
        !r)
      return r;
  }

  // The result: copied out of the build's disk with nothing running in it (frozen), device
  // nodes left behind, then kept as the template's read-only root under a name of its content.
  auto t0 = Clock::now();
  append_log(log, "-- keeping the result\n");
  sandboxes_.runtime().set_frozen(s->id, true);
  const std::string artifact = step_artifact(rec);
  const std::string dest = roots_dir() + "/" + artifact;
  std::error_code ec;
  auto held = lock_artifact(artifact);  // as in import_alone
  if (!fs::exists(dest + "/.b3os-ready")) {
    const std::string building = roots_dir() + "/" + artifact + "." + rec.id + ".building";
    fs::remove_all(building, ec);
    fs::create_directories(building, ec);
    ::chmod(building.c_str(), 0700);
    auto cp = sys::run({"cp", "-a", "--one-file-system", disk_root + "/.", building + "/rootfs/"}, std::chrono::minutes(30));
    if (!cp || cp->exit_code != 0) {
      fs::remove_all(building, ec);
      return fail(ErrorCode::kInternal, "copying the result out: " + (cp ? tail(cp->output, 400) : cp.error().message));
    }
    (void)sys::run({"find", building + "/rootfs", "-xdev", "(", "-type", "b", "-o", "-type", "c", ")", "-delete"},
                   std::chrono::minutes(5));
    fs::remove(building + "/rootfs/.b3os-context.tar", ec);
    std::ofstream(building + "/.b3os-ready").flush();
    fs::remove_all(dest, ec);
    fs::rename(building, dest, ec);
    if (ec) return fail(ErrorCode::kInternal, "keeping " + dest + ": " + ec.message());
  }
  auto du = sys::run({"du", "-sxb", dest + "/rootfs"}, std::chrono::minutes(5));
  if (du && du->exit_code == 0) rec.doc["size_bytes"] = std::strtoull(du->output.c_str(), nullptr, 10);
  rec.artifact = artifact;
  step_done("keep", 0, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  return {};
}

Result<void> TemplateService::start_and_wait(sandbox::LiveSandbox& s, const json& d, const std::string& log) {
  const std::string start = d.value("start", json(nullptr)).is_string() ? d["start"].get<std::string>() : "";
  if (start.empty()) return {};
  std::map<std::string, std::string> env;
  const json denv = d.value("env", json::object());
  for (auto& [k, v] : denv.items())
    if (v.is_string()) env[k] = v.get<std::string>();
  sandbox::ExecSpec e;
  e.argv = {"/bin/sh", "-c", std::string("cd \"${B3OS_WORKDIR:-/}\" 2>/dev/null; ") + kStartScript};
  e.env = env;
  e.env["B3OS_START"] = start;
  e.env["B3OS_WORKDIR"] = d.value("workdir", "/workspace");
  e.user = d.value("user", "");  // the template's user runs it (docs/templates.md)
  e.cwd = "/";
  e.timeout_ms = 15000;
  append_log(log, "-- start: " + start + "\n");
  auto r = sandboxes_.exec().run_live(s, e, {}, {});
  if (!r) return fail(r.error().wrap("start"));
  if (r->exit_code != 0)
    return fail(ErrorCode::kInvalidRequest, "start: could not be started (exit " + std::to_string(r->exit_code) + "): " +
                                                tail(r->stdout_data + r->stderr_data, 400));
  const json ready = d.value("ready", json::object());
  if (!ready.is_object() || ready.empty()) return {};
  const int timeout_s = ready.value("timeout_s", 60);
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  std::string what;
  sandbox::ExecSpec check;
  check.cwd = "/";
  check.timeout_ms = 10000;
  check.env = env;
  if (ready.contains("port")) {
    what = "port " + std::to_string(ready["port"].get<int>()) + " listening";
    check.argv = {"/bin/sh", "-c", "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null"};
  } else if (ready.contains("command")) {
    what = "the command `" + ready["command"].get<std::string>() + "` exiting 0";
    check.argv = {"/bin/sh", "-c", ready["command"].get<std::string>()};
  } else {
    what = ready["file"].get<std::string>() + " existing";
    check.argv = {"/bin/sh", "-c", "test -e \"$B3OS_FILE\""};
    check.env["B3OS_FILE"] = ready["file"].get<std::string>();
  }
  append_log(log, "-- ready: waiting up to " + std::to_string(timeout_s) + " s for " + what + "\n");
  for (;;) {
    auto c = sandboxes_.exec().run_live(s, check, {}, {});
    if (c) {
      if (ready.contains("port") ? listening_ports(c->stdout_data).count(ready["port"].get<int>()) > 0
                                 : c->exit_code == 0 && !c->timed_out)
        return {};
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(200ms);
  }
  // Its output says why, most of the time.
  sandbox::ExecSpec out;
  out.argv = {"/bin/sh", "-c", "tail -c 1500 /tmp/b3os-start.log 2>/dev/null"};
  out.cwd = "/";
  out.timeout_ms = 5000;
  auto o = sandboxes_.exec().run_live(s, out, {}, {});
  return fail(ErrorCode::kInvalidRequest, "ready: no " + what + " within " + std::to_string(timeout_s) +
                                              " s; the start command's output ends: " + (o ? o->stdout_data : "(unreadable)"));
}

Result<void> TemplateService::build_images(TemplateBuildRecord& rec, const TemplateSpec& spec, const std::string& log) {
  json& d = rec.doc["defaults"];
  // An image's defaults: its env under the spec's own, its workdir and user unless the spec
  // named them, and its entrypoint and cmd as the start command where asked.
  if (rec.doc.contains("image_config")) {
    const json ic = rec.doc["image_config"];
    json env = d.value("env", json::object());
    for (auto& kv : ic.value("env", json::array())) {
      const std::string s = kv.get<std::string>();
      const size_t eq = s.find('=');
      if (eq != std::string::npos && eq > 0 && !env.contains(s.substr(0, eq))) env[s.substr(0, eq)] = s.substr(eq + 1);
    }
    d["env"] = env;
    if (!d.contains("workdir") && !ic.value("workdir", "").empty()) d["workdir"] = ic["workdir"];
    if (!d.contains("user") && !ic.value("user", "").empty()) d["user"] = ic["user"];
    if (spec.start_from_image) {
      // Each word single-quoted for /bin/sh, a quote inside as '\''.
      auto quoted = [](const std::string& w) {
        std::string q = "'";
        for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
        return q + "'";
      };
      std::string line;
      for (const char* k : {"entrypoint", "cmd"})
        for (auto& part : ic.value(k, json::array()))
          if (part.is_string()) line += (line.empty() ? "" : " ") + quoted(part.get<std::string>());
      if (line.empty()) return fail(ErrorCode::kInvalidRequest, "start: true, but the image has no entrypoint or cmd");
      d["start"] = line;
    }
    save(rec);
  }
  if (!d.value("start", json(nullptr)).is_string()) return {};
  // Checkpoints with the start command running: without a network of its own (egress deny)
  // and with one (public, allowlist); creates restore the one that fits.
  const int memory = d.value("memory_mib", 512);
  json images = {{"memory_mib", memory}};
  for (bool net : {false, true}) {
    if (net && !sandboxes_.launcher().network()) continue;
    auto t0 = Clock::now();
    sandbox::LaunchRequest l;
    l.id = new_id("sbx");
    l.rootfs = artifact_rootfs(rec.artifact);
    l.memory_mib = memory;
    l.vcpu = d.value("vcpu", 1);
    l.disk_gib = d.value("disk_gib", 1);
    l.from_pool = false;
    l.network = net;
    sandbox::Timing t;
    Stopwatch sw;
    append_log(log, std::string("-- checkpoint") + (net ? " (with a network)" : "") + ": booting the template\n");
    auto launched = sandboxes_.launcher().launch(l, std::nullopt, t, sw);
    if (!launched) {
      // runsc create fails now and then on a loaded node ("waiting for sandbox to start:
      // EOF"): once more before the build fails.
      append_log(log, "   the boot failed (" + launched.error().message + "); once more\n");
      std::this_thread::sleep_for(1s);
      l.id = new_id("sbx");
      launched = sandboxes_.launcher().launch(l, std::nullopt, t, sw);
    }
    if (!launched) return fail(launched.error().wrap("booting the template for its checkpoint"));
    auto s = *launched;
    auto started = start_and_wait(*s, d, log);
    if (!started) {
      sandboxes_.launcher().discard(*s);
      rec.doc["error"] = {{"step", "ready"}};
      return fail(started.error());
    }
    const std::string dir = cfg_.data_dir + "/template-images/" + rec.id + (net ? "-net" : "");
    const std::string building = dir + ".building";
    std::error_code ec;
    fs::remove_all(building, ec);
    fs::create_directories(building, ec);
    auto saved = sandboxes_.checkpoints().write_image(*s, building, t, sw);
    sandboxes_.launcher().discard(*s);
    if (!saved) {
      fs::remove_all(building, ec);
      return fail(saved.error().wrap("the template's checkpoint"));
    }
    std::ofstream(building + "/b3os-stamp", std::ios::trunc) << cfg_.image_stamp;
    fs::remove_all(dir, ec);
    fs::rename(building, dir, ec);
    if (ec) return fail(ErrorCode::kInternal, "keeping " + dir + ": " + ec.message());
    images[net ? "net_image" : "image"] = dir;
    rec.doc["steps"].push_back({{"name", net ? "checkpoint (network)" : "checkpoint"},
                                {"exit_code", 0},
                                {"duration_ms", std::chrono::duration<double, std::milli>(Clock::now() - t0).count()}});
    save(rec);
  }
  rec.doc["images"] = images;
  return {};
}

// ---- housekeeping ----

void TemplateService::sync_pools() {
  struct Want {
    std::string key;
    int target = 0;
    sandbox::LaunchRequest shape;
  };
  std::vector<Want> wants;
  {
    std::lock_guard lk(mu_);
    std::map<std::string, const TemplateBuildRecord*> newest;  // template id -> newest ready
    for (auto& [id, b] : builds_)
      if (b.status == "ready" && !b.deleted_ms) {
        auto& n = newest[b.template_id];
        if (!n || b.version > n->version) n = &b;
      }
    for (auto& [id, b] : builds_) {
      Want w;
      w.key = id;
      const json d = b.doc.value("defaults", json::object());
      const bool images = b.doc.contains("images") && b.doc["images"].is_object() &&
                          !b.doc["images"].value("image", "").empty();
      auto it = newest.find(b.template_id);
      // Another node's checkpoint names its files: its pool is its own.
      if (it != newest.end() && it->second == &b && images && own(b) && d.value("warm_pool", 0) > 0) {
        w.target = d.value("warm_pool", 0);
        w.shape.rootfs = artifact_rootfs(b.artifact);
        w.shape.image = b.doc["images"].value("image", "");
        w.shape.memory_mib = b.doc["images"].value("memory_mib", 512);
        w.shape.vcpu = d.value("vcpu", 1);
        w.shape.disk_gib = d.value("disk_gib", 1);
      }
      wants.push_back(std::move(w));
    }
  }
  for (auto& w : wants) sandboxes_.pools().set_template_pool(w.key, w.target, w.shape);
}

void TemplateService::collect_garbage() {
  // Files of deleted templates are kept while a live sandbox or a snapshot may need them.
  std::set<std::string> in_use_rootfs;
  for (auto& s : sandboxes_.registry().all()) {
    std::lock_guard lk(s->mu);
    in_use_rootfs.insert(s->rec.rootfs);
  }
  if (auto snaps = store_.snapshot_rootfs(); snaps) in_use_rootfs.insert(snaps->begin(), snaps->end());
  std::set<std::string> keep_artifacts = {"base", kDebianArtifact}, keep_images;
  // A root a sandbox here runs on stays, whatever the builds say (another node's build may
  // be gone from the store while a sandbox here still runs on the root fetched for it).
  for (auto& rootfs : in_use_rootfs)
    if (rootfs.rfind(roots_dir() + "/", 0) == 0) keep_artifacts.insert(fs::path(rootfs).parent_path().filename().string());
  std::vector<std::string> forget, forget_here;
  {
    std::lock_guard lk(mu_);
    for (auto& [id, b] : builds_) {
      const bool used = !b.artifact.empty() && in_use_rootfs.count(artifact_rootfs(b.artifact));
      if (b.deleted_ms && !used) {
        (own(b) ? forget : forget_here).push_back(id);
        continue;
      }
      if (!b.artifact.empty()) keep_artifacts.insert(b.artifact);
      if (!terminal(b.status)) {
        keep_artifacts.insert("a-" + b.content_hash.substr(0, 24));
        keep_artifacts.insert(step_artifact(b));
      }
      if (b.doc.contains("images") && b.doc["images"].is_object())
        for (const char* k : {"image", "net_image"}) keep_images.insert(b.doc["images"].value(k, ""));
      if (!terminal(b.status)) {
        keep_images.insert(cfg_.data_dir + "/template-images/" + b.id);
        keep_images.insert(cfg_.data_dir + "/template-images/" + b.id + "-net");
      }
    }
    for (auto& id : forget) builds_.erase(id);
    for (auto& id : forget_here) builds_.erase(id);  // its node forgets it in the store
  }
  for (auto& id : forget) {
    (void)store_.forget_template_build(id);
    std::error_code ec;
    fs::remove(log_path(id), ec);
  }
  std::error_code ec;
  for (auto& e : fs::directory_iterator(roots_dir(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("a-", 0) == 0 && e.path().extension() != ".building" && !keep_artifacts.count(n)) {
      spdlog::info("template artifact {}: no template or sandbox uses it; removed", n);
      fs::remove_all(e.path(), ec);
    }
  }
  for (auto& e : fs::directory_iterator(cfg_.data_dir + "/template-images", ec)) {
    const std::string p = e.path().string();
    if (e.path().extension() != ".building" && !keep_images.count(p)) fs::remove_all(e.path(), ec);
  }
}

void TemplateService::sweep_uploads() {
  const int64_t now = now_unix_ms();
  std::vector<Upload> old;
  {
    std::lock_guard lk(mu_);
    for (auto it = uploads_.begin(); it != uploads_.end();) {
      if (now - it->second.created_ms > cfg_.upload_ttl_ms) {
        // Still named by a queued build: kept until it ran.
        bool needed = false;
        for (auto& id : queue_) needed = needed || builds_[id].doc.dump().find(it->first) != std::string::npos;
        if (!needed) {
          old.push_back(it->second);
          it = uploads_.erase(it);
          continue;
        }
      }
      ++it;
    }
  }
  for (auto& u : old) drop_upload(u);
}

void TemplateService::drop_upload(const Upload& u) {
  std::error_code ec;
  fs::remove(u.path, ec);
  fs::remove(cfg_.data_dir + "/template-uploads/" + u.id + ".json", ec);
  if (cfg_.object_store) {
    // Its hour is over on every node (each counts from the upload's own time).
    (void)cfg_.object_store->remove("template-uploads/" + u.id + "/meta.json");
    (void)cfg_.object_store->remove("template-uploads/" + u.id + "/upload.tar");
  }
}

// ---- a cluster ----

void TemplateService::refresh(bool now) {
  if (!cfg_.shared) return;
  std::lock_guard rl(refresh_mu_);
  const int64_t t = now_unix_ms();
  if (!now && t - refreshed_ms_ < cfg_.refresh_ms) return;
  auto rows = store_.template_builds();
  if (!rows) {
    spdlog::warn("templates: reading the cluster's builds: {}", rows.error().message);
    return;
  }
  refreshed_ms_ = t;
  bool gc = false;
  {
    std::lock_guard lk(mu_);
    std::set<std::string> seen;
    for (auto& r : *rows) {
      seen.insert(r.id);
      auto it = builds_.find(r.id);
      if (own(r)) {
        // This node's own copy is the truth (a store read may race a save of a running
        // build); only a delete done by another node is taken from the row.
        if (it != builds_.end() && r.deleted_ms && !it->second.deleted_ms) {
          it->second.deleted_ms = r.deleted_ms;
          gc = true;
        }
        continue;
      }
      if (it == builds_.end()) {
        if (!r.deleted_ms) builds_[r.id] = r;
        continue;
      }
      gc = gc || (r.deleted_ms && !it->second.deleted_ms);
      it->second = r;
    }
    // Another node's build gone from the store: its node forgot it (deleted, unused there).
    for (auto it = builds_.begin(); it != builds_.end();) {
      if (!own(it->second) && !seen.count(it->first)) {
        it = builds_.erase(it);
        gc = true;
      } else {
        ++it;
      }
    }
    if (gc) gc_wanted_ = true;
  }
  if (gc) cv_.notify_one();
}

Result<void> TemplateService::ensure_artifact(const std::string& artifact) {
  if (artifact.empty() || artifact == "base") return {};
  const std::string dest = roots_dir() + "/" + artifact;
  if (fs::exists(dest + "/.b3os-ready")) return {};
  if (!cfg_.object_store)
    return fail(ErrorCode::kProductUnavailable, "template root " + artifact + " was built on another node and this node "
                                                "has no object store to fetch it from (--object-store)");
  std::lock_guard fl(fetch_mu_);
  auto held = lock_artifact(artifact);  // a build of the same root here takes turns with it
  if (fs::exists(dest + "/.b3os-ready")) return {};
  const auto t0 = Clock::now();
  const std::string building = roots_dir() + "/" + artifact + ".fetch.building";
  std::error_code ec;
  fs::remove_all(building, ec);
  fs::create_directories(building, ec);
  ::chmod(building.c_str(), 0700);
  auto r = objstore::pull_tree(*cfg_.object_store, "template-roots/" + artifact, building + "/rootfs", building);
  if (r) {
    std::ofstream(building + "/.b3os-ready").flush();
    fs::remove_all(dest, ec);
    fs::rename(building, dest, ec);
    if (ec) r = fail(ErrorCode::kInternal, "keeping " + dest + ": " + ec.message());
  }
  if (!r) {
    fs::remove_all(building, ec);
    return fail(r.error().code == ErrorCode::kNotFound
                    ? Error{ErrorCode::kProductUnavailable, "template root " + artifact + " is not in the object store"}
                    : r.error().wrap("fetching template root " + artifact));
  }
  spdlog::info("template root {}: fetched from {} in {:.0f} ms", artifact, cfg_.object_store->describe(),
               std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  return {};
}

Result<void> TemplateService::publish_artifact(const std::string& artifact, const std::string& log) {
  if (artifact.empty() || artifact == "base") return {};  // every node has its own base
  const std::string prefix = "template-roots/" + artifact;
  // Touched before it is looked for: a collector removing it finishes first, and none starts
  // while the build's record (which then keeps it) is not yet saved.
  if (auto t = store_.touch_object_root(prefix); !t) return fail(t.error().wrap("putting the root in the object store"));
  if (auto there = cfg_.object_store->exists(prefix + "/manifest.json"); there && *there) return {};
  const auto t0 = Clock::now();
  append_log(log, "-- putting the root in the object store, for every node\n");
  const std::string scratch = roots_dir() + "/" + artifact + ".push.building";
  std::error_code ec;
  fs::create_directories(scratch, ec);
  auto r = objstore::push_tree(*cfg_.object_store, prefix, artifact_rootfs(artifact), scratch);
  fs::remove_all(scratch, ec);
  if (!r) return fail(r.error().wrap("putting the root in the object store"));
  append_log(log, "-- in the object store (" +
                      std::to_string(static_cast<int>(std::chrono::duration<double>(Clock::now() - t0).count())) + " s)\n");
  return {};
}

Result<void> TemplateService::publish_upload(const Upload& u) {
  const std::string prefix = "template-uploads/" + u.id;
  if (auto r = cfg_.object_store->put_file(prefix + "/upload.tar", u.path, u.sha256); !r) return r;
  // The meta last: a reader that finds it finds the whole upload.
  const std::string meta_path = cfg_.data_dir + "/template-uploads/" + u.id + ".meta.part";
  std::ofstream(meta_path, std::ios::trunc)
      << json{{"id", u.id}, {"project_id", u.project_id}, {"sha256", u.sha256}, {"size", u.size}, {"created_ms", u.created_ms}}.dump();
  auto sum = objstore::file_sha256(meta_path);
  Result<void> r = sum ? cfg_.object_store->put_file(prefix + "/meta.json", meta_path, sum->first) : Result<void>(fail(sum.error()));
  ::unlink(meta_path.c_str());
  if (!r) (void)cfg_.object_store->remove(prefix + "/upload.tar");
  return r;
}

std::optional<TemplateService::Upload> TemplateService::fetch_upload(const std::string& project_id, const std::string& id) {
  if (!cfg_.object_store || id.empty() || id.find_first_of("/.") != std::string::npos) return std::nullopt;
  std::lock_guard fl(fetch_mu_);
  const std::string prefix = "template-uploads/" + id, dir = cfg_.data_dir + "/template-uploads/";
  const std::string meta_path = dir + id + ".meta.part", part = dir + id + ".tar.part";
  ScopeExit cleanup([&] {
    ::unlink(meta_path.c_str());
    ::unlink(part.c_str());
  });
  if (auto r = cfg_.object_store->get_file(prefix + "/meta.json", meta_path); !r) return std::nullopt;
  json j = json::parse(read_small_file(meta_path, 1 << 16).value_or(""), nullptr, false);
  if (!j.is_object() || j.value("id", "") != id) return std::nullopt;
  // Another project's upload is no upload of this one (and is not fetched).
  if (j.value("project_id", "") != project_id) return std::nullopt;
  Upload u{id, project_id, dir + id + ".tar", j.value("sha256", ""), j.value("size", uint64_t{0}), j.value("created_ms", int64_t{0})};
  if (now_unix_ms() - u.created_ms > cfg_.upload_ttl_ms) return std::nullopt;
  if (auto r = cfg_.object_store->get_file(prefix + "/upload.tar", part); !r) {
    spdlog::warn("template upload {}: fetching it: {}", id, r.error().message);
    return std::nullopt;
  }
  auto sum = objstore::file_sha256(part);
  if (!sum || sum->first != u.sha256 || sum->second != u.size) {
    spdlog::warn("template upload {}: the object store's copy does not match its checksum; not used", id);
    return std::nullopt;
  }
  if (::rename(part.c_str(), u.path.c_str()) != 0) return std::nullopt;
  std::ofstream(dir + id + ".json", std::ios::trunc) << j.dump();
  std::lock_guard lk(mu_);
  uploads_[u.id] = u;
  return u;
}

}  // namespace b3os::tpl
