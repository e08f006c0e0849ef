#include "daemon/template/spec.h"

#include <cctype>
#include <set>

#include "daemon/sys/codec.h"

namespace b3os::tpl {

using nlohmann::json;

namespace {

constexpr size_t kMaxPackages = 256;
constexpr size_t kMaxFiles = 256;
constexpr size_t kMaxRunSteps = 128;
constexpr size_t kMaxRunLine = 16 * 1024;
constexpr size_t kMaxPath = 4096;

tl::unexpected<Error> bad(const std::string& field, const std::string& why) {
  return fail(ErrorCode::kInvalidRequest, field + ": " + why);
}

Result<void> reject_unknown(const json& j, const std::set<std::string>& known, const std::string& where) {
  for (auto& [k, v] : j.items())
    if (!known.count(k))
      return bad(where.empty() ? k : where + "." + k,
                 "unknown field" + std::string(where.empty() ? " of a template spec" : ""));
  return {};
}

Result<std::string> string_field(const json& j, const std::string& field, size_t max, bool allow_empty = false) {
  if (!j.is_string()) return bad(field, std::string("must be a string, got ") + j.type_name());
  const auto& s = j.get_ref<const std::string&>();
  if (s.empty() && !allow_empty) return bad(field, "must not be empty");
  if (s.size() > max) return bad(field, "longer than " + std::to_string(max) + " bytes");
  if (s.find('\0') != std::string::npos) return bad(field, "must not contain NUL");
  return s;
}

Result<int> int_field(const json& j, const std::string& field, int lo, int hi) {
  if (!j.is_number_integer() && !j.is_number_unsigned()) return bad(field, std::string("must be an integer, got ") + j.type_name());
  if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(hi))
    return bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  const int64_t v = j.get<int64_t>();
  if (v < lo || v > hi) return bad(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return static_cast<int>(v);
}

/// An absolute path without "..", NUL or empty components beyond slashes.
Result<std::string> abs_path(const json& j, const std::string& field) {
  auto s = string_field(j, field, kMaxPath);
  if (!s) return s;
  if ((*s)[0] != '/') return bad(field, "must be an absolute path");
  size_t i = 0;
  while (i < s->size()) {
    size_t k = s->find('/', i);
    if (k == std::string::npos) k = s->size();
    if (s->compare(i, k - i, "..") == 0) return bad(field, "must not contain \"..\"");
    i = k + 1;
  }
  return s;
}

bool valid_owner(const std::string& o) {
  if (o.empty() || o.size() > 65) return false;
  int colons = 0;
  for (char c : o) {
    if (c == ':') ++colons;
    else if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  }
  return colons <= 1 && o[0] != '-' && o[0] != ':' && o.back() != ':';
}

bool valid_user(const std::string& u) {
  if (u.empty() || u.size() > 32 || !(std::islower(static_cast<unsigned char>(u[0])) || u[0] == '_')) return false;
  for (char c : u)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return false;
  return u != "root";
}

bool upload_id(const std::string& s) {
  if (s.rfind("upl_", 0) != 0 || s.size() < 8 || s.size() > 40) return false;
  for (char c : s.substr(4))
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

bool valid_template_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || !std::isalnum(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
          c == '_' || c == '.'))
      return false;
  return n != "base" && n.rfind("tpl_", 0) != 0 && n.rfind("bld_", 0) != 0;
}

bool valid_package(const std::string& p) {
  // Debian policy 5.6.1: [a-z0-9][a-z0-9+.-]+; a version after "=" of [A-Za-z0-9.+~:-].
  const size_t eq = p.find('=');
  const std::string name = p.substr(0, eq);
  if (name.size() < 2 || name.size() > 128 || !(std::islower(static_cast<unsigned char>(name[0])) || std::isdigit(static_cast<unsigned char>(name[0]))))
    return false;
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '+' ||
          c == '-' || c == '.'))
      return false;
  if (eq == std::string::npos) return true;
  const std::string v = p.substr(eq + 1);
  if (v.empty() || v.size() > 128 || !std::isalnum(static_cast<unsigned char>(v[0]))) return false;
  for (char c : v)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '~' || c == ':' || c == '-'))
      return false;
  return true;
}

Result<TemplateSpec> parse_template_spec(const json& body, const SpecLimits& limits) {
  if (!body.is_object()) return bad("body", "must be a JSON object (a template spec)");
  if (auto r = reject_unknown(body, {"name", "from", "image", "packages", "files", "context", "run", "env", "workdir",
                                     "user", "start", "ready", "vcpu", "memory_mib", "disk_gib", "warm_pool", "build"},
                              "");
      !r)
    return fail(r.error());
  TemplateSpec s;
  if (!body.contains("name")) return bad("name", "is required");
  auto name = string_field(body["name"], "name", 64);
  if (!name) return fail(name.error());
  if (!valid_template_name(*name))
    return bad("name", "must be 1-64 of a-z 0-9 - _ . starting with a letter or digit, not \"base\" or an id");
  s.name = *name;

  if (body.contains("from") && body.contains("image")) return bad("image", "give either from or image, not both");
  if (body.contains("from")) {
    auto f = string_field(body["from"], "from", 80);
    if (!f) return fail(f.error());
    if (*f != "base" && *f != "debian:bookworm" && !valid_template_name(*f) &&
        !(f->rfind("tpl_", 0) == 0 && f->size() <= 40))
      return bad("from", "must be \"base\", \"debian:bookworm\" or a template of this project");
    s.source.from = *f;
  }
  if (body.contains("image")) {
    const json& im = body["image"];
    if (!im.is_object()) return bad("image", "must be {\"upload\": \"upl_...\"} or {\"path\": \"/...\"}");
    if (auto r = reject_unknown(im, {"upload", "path"}, "image"); !r) return fail(r.error());
    if (im.contains("upload") == im.contains("path")) return bad("image", "give exactly one of upload and path");
    if (im.contains("upload")) {
      auto u = string_field(im["upload"], "image.upload", 40);
      if (!u) return fail(u.error());
      if (!upload_id(*u)) return bad("image.upload", "must be an upload id (upl_...) from POST /v1/templates/uploads");
      s.source.image_upload = *u;
    } else {
      auto p = abs_path(im["path"], "image.path");
      if (!p) return fail(p.error());
      s.source.image_path = *p;
    }
  }

  if (body.contains("packages")) {
    const json& p = body["packages"];
    if (!p.is_array()) return bad("packages", "must be an array of Debian package names");
    if (p.size() > kMaxPackages) return bad("packages", "at most " + std::to_string(kMaxPackages) + " packages");
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string f = "packages[" + std::to_string(i) + "]";
      auto n = string_field(p[i], f, 260);
      if (!n) return fail(n.error());
      if (!valid_package(*n)) return bad(f, "\"" + *n + "\" is not a Debian package name (name or name=version)");
      s.packages.push_back(*n);
    }
  }

  size_t file_bytes = 0;
  if (body.contains("files")) {
    const json& fs = body["files"];
    if (!fs.is_array()) return bad("files", "must be an array of {path, content | content_base64, mode, owner}");
    if (fs.size() > kMaxFiles) return bad("files", "at most " + std::to_string(kMaxFiles) + " files");
    for (size_t i = 0; i < fs.size(); ++i) {
      const std::string f = "files[" + std::to_string(i) + "]";
      const json& e = fs[i];
      if (!e.is_object()) return bad(f, "must be an object");
      if (auto r = reject_unknown(e, {"path", "content", "content_base64", "mode", "owner"}, f); !r) return fail(r.error());
      FileSpec file;
      if (!e.contains("path")) return bad(f + ".path", "is required");
      auto p = abs_path(e["path"], f + ".path");
      if (!p) return fail(p.error());
      if (p->back() == '/') return bad(f + ".path", "must name a file, not a directory");
      file.path = *p;
      if (e.contains("content") == e.contains("content_base64"))
        return bad(f, "give exactly one of content (text) and content_base64");
      if (e.contains("content")) {
        auto c = string_field(e["content"], f + ".content", limits.max_files_bytes, true);
        if (!c) return fail(c.error());
        file.content = *c;
      } else {
        auto c = string_field(e["content_base64"], f + ".content_base64", limits.max_files_bytes * 4 / 3 + 4, true);
        if (!c) return fail(c.error());
        auto d = sys::base64_decode(*c);
        if (!d) return bad(f + ".content_base64", "is not valid base64");
        file.content = *d;
      }
      file_bytes += file.content.size();
      if (file_bytes > limits.max_files_bytes)
        return bad("files", "more than " + std::to_string(limits.max_files_bytes) +
                                " bytes inline; upload a context tarball for more (docs/templates.md)");
      if (e.contains("mode")) {
        auto m = int_field(e["mode"], f + ".mode", 0, 07777);
        if (!m) return fail(m.error());
        file.mode = *m;
      }
      if (e.contains("owner")) {
        auto o = string_field(e["owner"], f + ".owner", 65);
        if (!o) return fail(o.error());
        if (!valid_owner(*o)) return bad(f + ".owner", "must be \"user\" or \"user:group\" (names or numbers)");
        file.owner = *o;
      }
      s.files.push_back(std::move(file));
    }
  }

  if (body.contains("context")) {
    const json& c = body["context"];
    if (!c.is_object()) return bad("context", "must be {\"upload\": \"upl_...\", \"dest\": \"/workspace\"}");
    if (auto r = reject_unknown(c, {"upload", "dest"}, "context"); !r) return fail(r.error());
    if (!c.contains("upload")) return bad("context.upload", "is required");
    auto u = string_field(c["upload"], "context.upload", 40);
    if (!u) return fail(u.error());
    if (!upload_id(*u)) return bad("context.upload", "must be an upload id (upl_...) from POST /v1/templates/uploads");
    s.context_upload = *u;
    if (c.contains("dest")) {
      auto d = abs_path(c["dest"], "context.dest");
      if (!d) return fail(d.error());
      s.context_dest = *d;
    }
  }

  if (body.contains("run")) {
    const json& r = body["run"];
    if (!r.is_array()) return bad("run", "must be an array of shell lines");
    if (r.size() > kMaxRunSteps) return bad("run", "at most " + std::to_string(kMaxRunSteps) + " steps");
    for (size_t i = 0; i < r.size(); ++i) {
      auto line = string_field(r[i], "run[" + std::to_string(i) + "]", kMaxRunLine);
      if (!line) return fail(line.error());
      s.run.push_back(*line);
    }
  }

  if (body.contains("env")) {
    auto env = sandbox::parse_env_object(body["env"], "env");
    if (!env) return fail(env.error());
    if (env->size() > 64) return bad("env", "at most 64 variables");
    s.env = *env;
  }
  if (body.contains("workdir")) {
    auto w = abs_path(body["workdir"], "workdir");
    if (!w) return fail(w.error());
    s.workdir = *w;
  }
  if (body.contains("user")) {
    auto u = string_field(body["user"], "user", 32);
    if (!u) return fail(u.error());
    if (!valid_user(*u)) return bad("user", "must be a user name of a-z 0-9 _ - (not root); it is made if missing");
    s.user = *u;
  }

  if (body.contains("start") && !body["start"].is_null()) {
    const json& st = body["start"];
    if (st.is_boolean()) {
      if (!st.get<bool>()) return bad("start", "must be a shell line, or true for the image's entrypoint and cmd");
      if (!s.source.image()) return bad("start", "true takes the image's entrypoint and cmd: only with image");
      s.start_from_image = true;
    } else {
      auto line = string_field(st, "start", kMaxRunLine);
      if (!line) return fail(line.error());
      s.start = *line;
    }
  }
  if (body.contains("ready")) {
    const json& r = body["ready"];
    if (!r.is_object()) return bad("ready", "must be an object: {\"port\": N} or {\"command\": \"...\"} or {\"file\": \"/...\"}");
    if (auto x = reject_unknown(r, {"port", "command", "file", "timeout_s"}, "ready"); !x) return fail(x.error());
    const int kinds = r.contains("port") + r.contains("command") + r.contains("file");
    if (kinds != 1) return bad("ready", "give exactly one of port, command and file");
    if (r.contains("port")) {
      auto p = int_field(r["port"], "ready.port", 1, 65535);
      if (!p) return fail(p.error());
      s.ready.port = *p;
    }
    if (r.contains("command")) {
      auto c = string_field(r["command"], "ready.command", kMaxRunLine);
      if (!c) return fail(c.error());
      s.ready.command = *c;
    }
    if (r.contains("file")) {
      auto f = abs_path(r["file"], "ready.file");
      if (!f) return fail(f.error());
      s.ready.file = *f;
    }
    if (r.contains("timeout_s")) {
      auto t = int_field(r["timeout_s"], "ready.timeout_s", 1, 600);
      if (!t) return fail(t.error());
      s.ready.timeout_s = *t;
    }
    if (!s.start && !s.start_from_image) return bad("ready", "needs a start command to wait for");
  }

  auto size = [&](const char* f, std::optional<int>& out, int lo, int hi) -> Result<void> {
    if (!body.contains(f) || body[f].is_null()) return {};
    auto v = int_field(body[f], f, lo, hi);
    if (!v) return fail(v.error());
    out = *v;
    return {};
  };
  if (auto r = size("vcpu", s.vcpu, 1, limits.sandbox.max_vcpu); !r) return fail(r.error());
  if (auto r = size("memory_mib", s.memory_mib, 128, limits.sandbox.max_memory_mib); !r) return fail(r.error());
  if (auto r = size("disk_gib", s.disk_gib, 1, limits.sandbox.max_disk_gib); !r) return fail(r.error());
  if (body.contains("warm_pool") && !body["warm_pool"].is_null()) {
    auto w = int_field(body["warm_pool"], "warm_pool", 0, limits.max_warm_pool);
    if (!w) return fail(w.error());
    s.warm_pool = *w;
    if (s.warm_pool > 0 && !s.start && !s.start_from_image)
      return bad("warm_pool", "keeps sandboxes with the start command running: give start too");
  }

  if (body.contains("build")) {
    const json& b = body["build"];
    if (!b.is_object()) return bad("build", "must be an object: {egress, timeout_s, disk_gib}");
    if (auto r = reject_unknown(b, {"egress", "timeout_s", "disk_gib"}, "build"); !r) return fail(r.error());
    if (b.contains("egress")) {
      auto e = sandbox::parse_egress(b["egress"]);
      if (!e) return fail(e.error().wrap("build"));
      if (e->mode == "deny") return bad("build.egress.mode", "must be public or allowlist (apt needs a mirror)");
      s.build_egress = *e;
    }
    if (b.contains("timeout_s")) {
      auto t = int_field(b["timeout_s"], "build.timeout_s", 10, limits.max_build_timeout_s);
      if (!t) return fail(t.error());
      s.build_timeout_s = *t;
    }
    if (b.contains("disk_gib")) {
      auto d = int_field(b["disk_gib"], "build.disk_gib", 1, limits.max_build_disk_gib);
      if (!d) return fail(d.error());
      s.build_disk_gib = *d;
    }
  }
  return s;
}

json canonical(const TemplateSpec& s) {
  json files = json::array();
  for (auto& f : s.files)
    files.push_back({{"path", f.path}, {"content_base64", sys::base64_encode(f.content)}, {"mode", f.mode}, {"owner", f.owner}});
  json ready = json::object();
  if (s.ready.port) ready["port"] = *s.ready.port;
  if (s.ready.command) ready["command"] = *s.ready.command;
  if (s.ready.file) ready["file"] = *s.ready.file;
  if (s.ready.any()) ready["timeout_s"] = s.ready.timeout_s;
  auto opt = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  return {{"from", s.source.image() ? json(nullptr) : json(s.source.from)},
          {"image", s.source.image_upload ? json(*s.source.image_upload)
                                          : s.source.image_path ? json(*s.source.image_path) : json(nullptr)},
          {"packages", s.packages},
          {"files", files},
          {"context", s.context_upload ? json{{"upload", *s.context_upload}, {"dest", s.context_dest}} : json(nullptr)},
          {"run", s.run},
          {"env", s.env},
          {"workdir", s.workdir},
          {"user", s.user},
          {"start", s.start ? json(*s.start) : s.start_from_image ? json(true) : json(nullptr)},
          {"ready", ready},
          {"vcpu", opt(s.vcpu)},
          {"memory_mib", opt(s.memory_mib)},
          {"disk_gib", opt(s.disk_gib)},
          {"warm_pool", s.warm_pool}};
}

}  // namespace b3os::tpl
