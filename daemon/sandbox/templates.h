#pragma once
// TemplateCatalog: the templates users build (daemon/template), as the sandbox module sees
// them. The lifecycle asks it what a create's `template` names; the template module, above this
// one, implements it. `base` and the other templates on disk are the lifecycle's own.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/result.h"

namespace b3os::sandbox {

struct LiveSandbox;

/// One ready version of a template, as a create uses it.
struct TemplateChoice {
  std::string id;        // tpl_...
  std::string name;      // shown in the sandbox object
  std::string build_id;  // bld_...: the version
  int version = 0;
  std::string rootfs;    // its read-only root filesystem on the host
  std::map<std::string, std::string> env;  // under the sandbox's own
  std::optional<int> vcpu, memory_mib, disk_gib;
  /// Checkpoints taken once its `start` command was ready, without and with a network of
  /// the sandbox's own; "" when none. A restore must keep the memory size it was taken with.
  std::string image, net_image;
  int image_memory_mib = 0;
  /// Its warm pool in Pools (set_template_pool), "" when it asks for none.
  std::string pool_key;
  /// For a launch that could not restore an image (another memory size, no image yet): starts
  /// the template's `start` command and waits for `ready`. Empty when it has none.
  std::function<Result<void>(LiveSandbox&)> start;
};

class TemplateCatalog {
 public:
  virtual ~TemplateCatalog() = default;
  /// The newest ready version of the template `name_or_id` that project `project_id` may use
  /// (its own, or one published node-wide); nullopt when there is none by that name, an error
  /// when it exists but has no ready version.
  virtual Result<std::optional<TemplateChoice>> resolve(const std::string& project_id,
                                                        const std::string& name_or_id) = 0;
  /// The working directory and user of commands in a sandbox of template `template_id`
  /// (the version whose root is `rootfs`); "" for each when the template set none.
  struct ExecDefaults {
    std::string workdir, user;
  };
  virtual ExecDefaults exec_defaults(const std::string& template_id, const std::string& rootfs) = 0;
  /// A sandbox or snapshot of template `template_id` is gone: files of a deleted template it
  /// held may go now (done behind the caller).
  virtual void released(const std::string& template_id) = 0;
};

}  // namespace b3os::sandbox
