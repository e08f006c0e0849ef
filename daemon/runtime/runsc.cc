#include "daemon/runtime/runsc.h"

#include "common/file.h"
#include "common/metrics.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <thread>
#include <fstream>

#include <nlohmann/json.hpp>

#include <spdlog/spdlog.h>

#include "common/scope_exit.h"
#include "common/unique_fd.h"
#include "daemon/runtime/control.h"
#include "daemon/sys/netns.h"
#include "daemon/sys/process.h"

namespace b3os::runtime {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {
constexpr int64_t kCpuPeriodUs = 100000;

// One write to a cgroup file; the kernel's refusal (EBUSY for a memory limit below what the
// cgroup holds, EINVAL, ENOENT for a gone cgroup) is part of the error.
Result<void> write_cgroup(const std::string& file, const std::string& value, std::string_view what) {
  UniqueFd f(::open(file.c_str(), O_WRONLY | O_CLOEXEC));
  if (!f || ::write(f.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return fail(errno_error(ErrorCode::kInternal, std::string(what) + " (" + file + ")", errno));
  }
  return {};
}

// Waits (briefly) until a shim has taken what runsc wrote to the log pipe, so the file holds it.
void wait_drained(int pipe_rd) {
  if (pipe_rd < 0) return;
  for (int i = 0; i < 50; ++i) {
    int pending = 0;
    if (::ioctl(pipe_rd, FIONREAD, &pending) != 0 || pending == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the shim's write after its read
}

std::string tail_of_file(const std::string& path, size_t max) {
  std::string s = read_small_file(path, 16 << 20).value_or("");
  if (s.size() > max) s = s.substr(s.size() - max);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}
}  // namespace

std::string oci_config(const ContainerSpec& spec, const RuntimeConfig& cfg) {
  const int64_t mem_bytes = memory_limit_bytes(cfg, spec.memory_mib);
  json c = {
      {"ociVersion", "1.0.2"},
      {"process",
       {{"terminal", false},
        {"user", {{"uid", 0}, {"gid", 0}}},
        {"args", {"/.b3os/agent"}},
        {"env", {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"}},
        {"cwd", "/"},
        {"capabilities",
         {{"bounding", {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
                        "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT",
                        "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_SYS_ADMIN"}},
          {"effective", {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
                         "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT",
                         "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_SYS_ADMIN"}},
          {"permitted", {"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
                         "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_NET_RAW", "CAP_SYS_CHROOT",
                         "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_SYS_ADMIN"}}}},
        {"rlimits", {{{"type", "RLIMIT_NOFILE"}, {"hard", 1048576}, {"soft", 1048576}}}},
        {"noNewPrivileges", false}}},
      {"root", {{"path", spec.rootfs}, {"readonly", false}}},
      {"hostname", spec.hostname},
      {"mounts",
       {{{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}},
        {{"destination", "/dev"}, {"type", "tmpfs"}, {"source", "tmpfs"}},
        {{"destination", "/sys"}, {"type", "sysfs"}, {"source", "sysfs"}, {"options", {"nosuid", "noexec", "nodev", "ro"}}},
        {{"destination", "/tmp"}, {"type", "tmpfs"}, {"source", "tmpfs"}, {"options", {"nosuid", "nodev", "mode=1777"}}},
        {{"destination", "/.b3os/agent"},
         {"type", "bind"},
         {"source", spec.agent_path},
         {"options", {"rbind", "ro"}}}}},
      {"linux",
       {{"namespaces", {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}},
                        spec.netns_path.empty() ? json{{"type", "network"}}
                                                : json{{"type", "network"}, {"path", spec.netns_path}}}},
        {"cgroupsPath", "/b3os/" + spec.id},
        {"resources",
         {{"memory", {{"limit", mem_bytes}}},
          {"pids", {{"limit", pids_limit(spec.memory_mib, host_pid_max())}}}}}}},
  };
  if (!spec.netns_path.empty() && !spec.resolv_conf.empty())
    c["mounts"].push_back({{"destination", "/etc/resolv.conf"},
                           {"type", "bind"},
                           {"source", spec.resolv_conf},
                           {"options", {"rbind", "ro"}}});
  return c.dump(2);
}

std::vector<std::string> Runsc::base_argv(const std::string& disk_dir, bool network) const {
  std::vector<std::string> a = {cfg_.runsc, "--root", cfg_.root_dir, "--platform", cfg_.platform,
                                "--overlay2", disk_dir.empty() ? "root:memory" : "root:dir=" + disk_dir,
                                "--network", network ? "sandbox" : "none"};
  // A fork or snapshot resets the sandbox's open connections to the outside (the spec says
  // so) instead of failing on them: the link endpoint is made with CapabilityDisconnectOk.
  if (network) a.push_back("--net-disconnect-ok");
  return a;
}

bool Runsc::networked(const std::string& id) const { return !netns_of(id).empty(); }

std::string Runsc::netns_of(const std::string& id) const {
  std::lock_guard lk(networked_mu_);
  auto it = networked_.find(id);
  return it == networked_.end() ? "" : it->second;
}

std::vector<std::string> Runsc::with_private_sysnet(std::vector<std::string> argv) {
  std::vector<std::string> out = {"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                                  "mount -t tmpfs -o size=4k b3os-sysnet /proc/sys/net && exec \"$@\"", "sh"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

namespace {
// Registered when b3osd starts, so every family is on /metrics from the first scrape.
static auto& m_failures = metrics::metrics().counter(
    "b3os_runsc_failures_total", "runsc operations that failed, by operation (create, start, restore, checkpoint, "
    "pause, resume, destroy)", {"operation"});

/// Counts a failed runtime operation into b3os_runsc_failures_total{operation}.
Result<void> counted(const char* operation, Result<void> r) {
  if (!r) m_failures.with({operation}).inc();
  return r;
}
}  // namespace

Result<void> Runsc::create(const ContainerSpec& spec, int stdio_fd) { return counted("create", do_create(spec, stdio_fd)); }
Result<void> Runsc::checkpoint(const std::string& id, const std::string& image_dir) { return counted("checkpoint", do_checkpoint(id, image_dir)); }
Result<void> Runsc::restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir) { return counted("restore", do_restore(id, bundle_dir, image_dir)); }
Result<void> Runsc::pause(const std::string& id) { return counted("pause", do_pause(id)); }
Result<void> Runsc::resume(const std::string& id) { return counted("resume", do_resume(id)); }
Result<void> Runsc::start(const std::string& id) { return counted("start", do_start(id)); }
Result<void> Runsc::destroy(const std::string& id) { return counted("destroy", do_destroy(id)); }

Result<std::string> Runsc::make_disk(const std::string& id, int gib) { return runtime::make_disk(cfg_.disks, id, gib); }
Result<void> Runsc::remove_disk(const std::string& id) { return runtime::remove_disk(cfg_.disks, id); }
Result<std::vector<std::string>> Runsc::list_disks() { return runtime::list_disks(cfg_.disks); }

Result<void> Runsc::do_create(const ContainerSpec& spec, int stdio_fd) {
  {
    std::ofstream f(spec.bundle_dir + "/config.json", std::ios::trunc);
    f << oci_config(spec, cfg_);
    if (!f) return fail(ErrorCode::kInternal, "writing " + spec.bundle_dir + "/config.json");
  }
  UniqueFd opened;
  if (spec.log_fd < 0) {
    opened.reset(::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
    if (!opened) return fail(errno_error(ErrorCode::kInternal, "open " + spec.log_path, errno));
  }
  const int log = spec.log_fd >= 0 ? spec.log_fd : opened.get();

  // The overlay's medium is fixed here, for the sandbox's life: runsc create opens the
  // overlay's file in disk_dir and hands it to the sandbox (a restore later reuses it).
  const bool network = !spec.netns_path.empty();
  auto argv = base_argv(spec.disk_dir, network);
  if (!spec.root_overlay)
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "--overlay2") argv[i + 1] = "none";
  if (cfg_.debug) {
    argv.push_back("--debug");
    argv.push_back("--debug-log=" + spec.bundle_dir + "/runsc-debug/");
  }
  argv.insert(argv.end(), {"create", "--bundle", spec.bundle_dir, spec.id});
  auto pid = sys::spawn({argv, {stdio_fd, stdio_fd, log}, true});
  if (!pid) return fail(pid.error());
  auto code = sys::wait_exit(*pid);
  if (!code) return fail(code.error());
  if (*code != 0) {
    wait_drained(spec.log_drain_fd);
    std::string why = tail_of_file(spec.log_path, 600);
    (void)destroy(spec.id);
    return fail(ErrorCode::kInternal, "runsc create failed (exit " + std::to_string(*code) + "): " + why);
  }
  if (network) {
    std::lock_guard lk(networked_mu_);
    networked_[spec.id] = spec.netns_path;
  }
  return {};
}

Result<void> Runsc::limit_cpu(const std::string& id, int vcpu) {
  const int64_t quota = int64_t(vcpu) * kCpuPeriodUs;
  // cgroup v1 (this machine) or v2, wherever runsc put the container's cgroup.
  const std::string v1 = "/sys/fs/cgroup/cpu/b3os/" + id;
  const std::string v2 = "/sys/fs/cgroup/b3os/" + id;
  std::string file, value;
  if (::access((v1 + "/cpu.cfs_quota_us").c_str(), W_OK) == 0) {
    std::ofstream(v1 + "/cpu.cfs_period_us") << kCpuPeriodUs;
    file = v1 + "/cpu.cfs_quota_us";
    value = std::to_string(quota);
  } else if (::access((v2 + "/cpu.max").c_str(), W_OK) == 0) {
    file = v2 + "/cpu.max";
    value = std::to_string(quota) + " " + std::to_string(kCpuPeriodUs);
  } else {
    return fail(ErrorCode::kInternal, "no CPU cgroup for sandbox " + id + " (looked in " + v1 + " and " + v2 + ")");
  }
  return write_cgroup(file, value, "setting the CPU limit of " + id);
}

int64_t pids_limit(int memory_mib, int64_t pid_max) {
  const int64_t want = 256 + 2 * static_cast<int64_t>(std::max(memory_mib, 0));
  return std::clamp<int64_t>(want, 64, std::max<int64_t>(64, pid_max / 8));
}

int64_t host_pid_max() {
  static const int64_t v = [] {
    auto text = read_small_file("/proc/sys/kernel/pid_max", 64);
    const int64_t n = text ? std::strtoll(text->c_str(), nullptr, 10) : 0;
    return n > 0 ? n : int64_t{32768};
  }();
  return v;
}

void Runsc::bound_all_sandboxes_pids() {
  const int64_t limit = host_pid_max() - host_pid_max() / 4;
  for (const char* dir : {"/sys/fs/cgroup/pids/b3os", "/sys/fs/cgroup/b3os"}) {
    const std::string parent = std::string(dir).substr(0, std::string(dir).rfind('/'));
    if (::access((parent + "/pids.max").c_str(), F_OK) != 0 && ::access((parent + "/cgroup.procs").c_str(), F_OK) != 0)
      continue;  // not this hierarchy
    if (::mkdir(dir, 0755) != 0 && errno != EEXIST) continue;
    if (::access((std::string(dir) + "/pids.max").c_str(), F_OK) != 0) continue;  // v2 without the pids controller on
    if (auto r = write_cgroup(std::string(dir) + "/pids.max", std::to_string(limit), "bounding every sandbox's pids"); !r)
      spdlog::warn("{}", r.error().message);
    return;
  }
}

void Runsc::bound_all_sandboxes_memory(int64_t reserve_mib) {
  const int64_t total = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  const int64_t limit = total - reserve_mib * (int64_t{1} << 20);
  if (total <= 0 || limit <= 0) return;
  for (auto [dir, file] : {std::pair{"/sys/fs/cgroup/memory/b3os", "memory.limit_in_bytes"},
                           std::pair{"/sys/fs/cgroup/b3os", "memory.max"}}) {
    const std::string d(dir), parent = d.substr(0, d.rfind('/'));
    if (::access((parent + "/cgroup.procs").c_str(), F_OK) != 0) continue;  // not this hierarchy
    if (::mkdir(dir, 0755) != 0 && errno != EEXIST) continue;
    if (::access((d + "/" + file).c_str(), F_OK) != 0) continue;  // v2 without the memory controller on
    if (auto r = write_cgroup(d + "/" + file, std::to_string(limit), "bounding every sandbox's memory together"); !r)
      spdlog::warn("{}", r.error().message);
    return;
  }
}

Runtime::PidsUse Runsc::pids_use(const std::string& id) {
  auto read = [](const std::string& dir) -> PidsUse {
    PidsUse out;
    if (auto m = read_small_file(dir + "/pids.max", 64)) out.limit = m->rfind("max", 0) == 0 ? -1 : std::strtoll(m->c_str(), nullptr, 10);
    if (auto e = read_small_file(dir + "/pids.events", 4096)) {
      const auto at = e->find("max ");
      if (at != std::string::npos) out.refused = std::strtoll(e->c_str() + at + 4, nullptr, 10);
    }
    return out;
  };
  const std::string v1 = "/sys/fs/cgroup/pids/b3os/" + id;
  return read(::access(v1.c_str(), F_OK) == 0 ? v1 : "/sys/fs/cgroup/b3os/" + id);
}

int64_t memory_limit_bytes(const RuntimeConfig& cfg, int memory_mib) {
  return int64_t(memory_mib + cfg.memory_overhead_mib) * 1024 * 1024;
}

int64_t Runsc::memory_limit_bytes(int memory_mib) const { return runtime::memory_limit_bytes(cfg_, memory_mib); }

Result<void> Runsc::set_memory_limit(const std::string& id, int64_t bytes) {
  const std::string v1 = "/sys/fs/cgroup/memory/b3os/" + id + "/memory.limit_in_bytes";
  const std::string v2 = "/sys/fs/cgroup/b3os/" + id + "/memory.max";
  const std::string file = ::access(v1.c_str(), W_OK) == 0 ? v1 : v2;
  return write_cgroup(file, std::to_string(bytes), "setting the memory limit of " + id);
}

void Runsc::reset_memory_peak(const std::string& id) {
  const std::string v1 = "/sys/fs/cgroup/memory/b3os/" + id + "/memory.max_usage_in_bytes";
  if (::access(v1.c_str(), W_OK) == 0) (void)write_cgroup(v1, "0", "resetting the memory peak");
}

MemoryUse Runsc::memory_use(const std::string& id) {
  auto number = [](const std::string& path) -> int64_t {
    auto text = read_small_file(path, 64);
    return text ? std::strtoll(text->c_str(), nullptr, 10) : 0;
  };
  // "oom_kill N" in v1's memory.oom_control (kernel 4.13+) and v2's memory.events.
  auto oom_kills = [](const std::string& path) -> int64_t {
    auto text = read_small_file(path, 4096);
    if (!text) return -1;
    const auto at = text->find("oom_kill ");
    return at == std::string::npos ? -1 : std::strtoll(text->c_str() + at + 9, nullptr, 10);
  };
  const std::string v1 = "/sys/fs/cgroup/memory/b3os/" + id;
  if (::access(v1.c_str(), F_OK) == 0)
    return {number(v1 + "/memory.limit_in_bytes"), number(v1 + "/memory.max_usage_in_bytes"),
            oom_kills(v1 + "/memory.oom_control")};
  const std::string v2 = "/sys/fs/cgroup/b3os/" + id;
  return {number(v2 + "/memory.max"), number(v2 + "/memory.peak"), oom_kills(v2 + "/memory.events")};
}

Result<void> Runsc::do_checkpoint(const std::string& id, const std::string& image_dir) {
  if (direct_control()) return checkpoint_direct(id, image_dir);
  auto argv = base_argv();
  argv.insert(argv.end(), {"checkpoint", "--leave-running", "--compression=none", "--image-path", image_dir, id});
  auto r = sys::run(argv, 120s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "runsc checkpoint " + id + " failed: " + r->output);
  return {};
}

Result<void> Runsc::do_restore(const std::string& id, const std::string& bundle_dir, const std::string& image_dir) {
  const bool network = networked(id);
  if (direct_control()) return restore_direct(id, image_dir);
  // The CLI's restore makes the sandbox itself: the same medium as the create.
  const DiskPaths disk = disk_paths(cfg_.disks, id);
  auto argv = base_argv(::access(disk.image.c_str(), F_OK) == 0 ? disk.mount : "", network);
  argv.insert(argv.end(), {"restore", "--detach", "--image-path", image_dir, "--bundle", bundle_dir, id});
  if (network) argv = with_private_sysnet(std::move(argv));
  auto r = sys::run(argv, 120s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "runsc restore " + id + " failed: " + r->output);
  return {};
}

// runsc pause stops the sandbox's tasks, but its sentry's own runtime still ticks (~25 ms of
// CPU a second here); freezing the cgroup as well makes a paused sandbox use no CPU at all.
void Runsc::set_frozen(const std::string& id, bool frozen) {
  const std::string v1 = "/sys/fs/cgroup/freezer/b3os/" + id + "/freezer.state";
  const std::string v2 = "/sys/fs/cgroup/b3os/" + id + "/cgroup.freeze";
  if (::access(v1.c_str(), W_OK) == 0) {
    std::ofstream(v1) << (frozen ? "FROZEN" : "THAWED");
  } else if (::access(v2.c_str(), W_OK) == 0) {
    std::ofstream(v2) << (frozen ? "1" : "0");
  }
}

Result<void> Runsc::do_pause(const std::string& id) {
  auto argv = base_argv();
  argv.insert(argv.end(), {"pause", id});
  auto r = sys::run(argv, 30s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "runsc pause " + id + " failed: " + r->output);
  set_frozen(id, true);
  return {};
}

Result<void> Runsc::do_resume(const std::string& id) {
  set_frozen(id, false);
  auto argv = base_argv();
  argv.insert(argv.end(), {"resume", id});
  auto r = sys::run(argv, 30s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "runsc resume " + id + " failed: " + r->output);
  return {};
}

Result<void> Runsc::do_start(const std::string& id) {
  const bool network = networked(id);
  if (direct_control()) return start_direct(id);
  auto argv = base_argv("", network);
  argv.insert(argv.end(), {"start", id});
  if (network) argv = with_private_sysnet(std::move(argv));
  auto r = sys::run(argv, 30s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "runsc start failed: " + r->output);
  return {};
}

Result<ContainerState> Runsc::state(const std::string& id) {
  auto argv = base_argv();
  argv.insert(argv.end(), {"state", id});
  auto r = sys::run(argv, 10s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return ContainerState::kMissing;
  try {
    auto j = json::parse(r->output);
    std::string s = j.value("status", "");
    if (s == "running") return ContainerState::kRunning;
    if (s == "created") return ContainerState::kCreated;
    if (s == "paused") return ContainerState::kPaused;
    return ContainerState::kStopped;
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, "runsc state " + id + ": unreadable output: " + r->output);
  }
}

// runsc removes a container's cgroups when it deletes a container it knows; one whose
// processes died while b3osd was down is unknown to it, and its cgroups stay unless removed
// here (only this id's: another node's b3os/ cgroups are not ours to touch).
static void remove_cgroups(const std::string& id) {
  std::vector<std::string> dirs = {"/sys/fs/cgroup/b3os/" + id};
  std::error_code ec;
  for (auto& ctrl : std::filesystem::directory_iterator("/sys/fs/cgroup", ec))
    dirs.push_back(ctrl.path().string() + "/b3os/" + id);
  for (auto& d : dirs) {
    if (::access(d.c_str(), F_OK) != 0) continue;
    for (int i = 0; i < 20 && ::rmdir(d.c_str()) != 0 && errno == EBUSY; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // its last processes are exiting
    if (::access(d.c_str(), F_OK) == 0) spdlog::warn("could not remove the cgroup {}: {}", d, std::strerror(errno));
  }
}

// The host pids runsc's state file names for a container (0 where it names none); nullopt when
// there is no readable state file.
std::optional<Runsc::StatePids> Runsc::state_pids(const std::string& id) const {
  auto text = read_small_file(state_path(id), 1 << 20);
  if (!text) return std::nullopt;
  try {
    auto j = json::parse(*text);
    return StatePids{j.at("sandbox").value("pid", 0), j.value("goferPid", 0)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// SIGKILLs a container's sandbox and gofer processes, named by runsc's state file (each
// checked to be a runsc process, against a reused pid). False when the file names no sandbox.
bool Runsc::kill_processes(const std::string& id) {
  auto pids = state_pids(id);
  if (!pids || pids->sandbox <= 0) return false;
  for (pid_t pid : {pids->sandbox, pids->gofer}) {
    if (pid <= 0) continue;
    auto cmd = read_small_file("/proc/" + std::to_string(pid) + "/cmdline", 256);
    if (cmd && cmd->rfind("runsc", 0) == 0) ::kill(pid, SIGKILL);
  }
  return true;
}

Result<void> Runsc::do_destroy(const std::string& id) {
  set_frozen(id, false);  // a frozen process cannot die
  // Killing its processes directly ends a running or paused container without the two runsc
  // invocations (state, kill --all) that each cost ~40 ms of CPU; runsc delete then finds it
  // stopped. Without a state file runsc decides.
  if (!kill_processes(id)) {
    if (auto st = state(id); st && *st == ContainerState::kPaused) (void)resume(id);
    auto kill = base_argv();
    kill.insert(kill.end(), {"kill", "--all", id, "KILL"});
    (void)sys::run(kill, 10s);  // fails harmlessly when the container is already stopped
  }
  auto del = base_argv();
  del.insert(del.end(), {"delete", "--force", id});
  auto r = sys::run(del, 30s);
  if (!r) return fail(r.error());
  if (r->exit_code != 0 && r->output.find("does not exist") == std::string::npos &&
      r->output.find("not found") == std::string::npos) {
    return fail(ErrorCode::kInternal, "runsc delete " + id + " failed: " + r->output);
  }
  remove_cgroups(id);
  std::lock_guard lk(networked_mu_);
  networked_.erase(id);
  return {};
}

Result<std::vector<std::string>> Runsc::list() {
  auto argv = base_argv();
  argv.insert(argv.end(), {"list", "--quiet"});
  auto r = sys::run(argv, 10s);
  if (!r) return fail(r.error());
  std::vector<std::string> ids;
  size_t pos = 0;
  while (pos < r->output.size()) {
    size_t nl = r->output.find('\n', pos);
    if (nl == std::string::npos) nl = r->output.size();
    std::string line = r->output.substr(pos, nl - pos);
    if (!line.empty()) ids.push_back(line);
    pos = nl + 1;
  }
  return ids;
}

// --- the control socket, without the CLI (control.h) ---

namespace {
constexpr auto kStartTimeout = 30s;
constexpr auto kImageTimeout = 120s;  // checkpoints and restores of large memories
constexpr auto kLockTimeout = 30s;    // what the CLI path allowed a whole verb
// The image files runsc checkpoint --compression=none writes, in the order the calls take them.
constexpr std::array<const char*, 3> kImageFiles = {"checkpoint.img", "pages_meta.img", "pages.img"};
constexpr std::string_view kTempSuffix = ".b3os-tmp";

// runsc serializes every change to a container on flock(2) of ROOT/ID_sandbox:ID.lock
// (gofrs/flock). Waits for it up to kLockTimeout; the fd holds it until closed or unlocked.
Result<UniqueFd> lock_container(const std::string& lock_file, const std::string& what) {
  UniqueFd lock(::open(lock_file.c_str(), O_RDWR | O_CLOEXEC));
  if (!lock) return fail(errno_error(ErrorCode::kInternal, what + ": no container (" + lock_file + ")", errno));
  const auto deadline = std::chrono::steady_clock::now() + kLockTimeout;
  while (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return fail(errno_error(ErrorCode::kInternal, what + ": lock", errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail(ErrorCode::kInternal, what + ": runsc's lock " + lock_file + " held for over 30 s");
    }
    std::this_thread::sleep_for(1ms);
  }
  return lock;
}

// The container's runsc state, read under its lock; `status` and the control socket checked.
Result<nlohmann::ordered_json> read_state(const std::string& state_file, const std::string& what) {
  auto text = read_small_file(state_file, 1 << 20);
  if (!text) return fail(ErrorCode::kInternal, what + ": cannot read " + state_file);
  // ordered_json: written back with its keys where runsc put them.
  auto state = nlohmann::ordered_json::parse(*text, nullptr, false);
  if (state.is_discarded() || !state.is_object() || !state.contains("status") || !state["status"].is_string() ||
      !state.contains("sandbox") || !state["sandbox"].is_object() || !state["sandbox"].contains("id") ||
      !state["sandbox"]["id"].is_string() || !state["sandbox"].contains("controlSocketPath") ||
      !state["sandbox"]["controlSocketPath"].is_string()) {
    return fail(ErrorCode::kInternal, what + ": unreadable runsc state " + state_file);
  }
  return state;
}

Result<void> write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(errno_error(ErrorCode::kInternal, "write", n < 0 ? errno : EIO));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}
}  // namespace

bool Runsc::direct_control() {
  std::call_once(control_once_, [&] {
    if (cfg_.control == "cli") return;
    // KVM restores need /dev/kvm passed along (runsc's HaveDeviceFile); only the CLI does that.
    if (cfg_.platform != "systrap" && cfg_.platform != "ptrace") {
      spdlog::info("platform {}: start, checkpoint and restore use the runsc CLI", cfg_.platform);
      return;
    }
    if (cfg_.control == "direct") {
      direct_ = true;
      return;
    }
    // Checked once, at start: a runsc replaced under a running b3osd is not noticed until restart.
    std::string version;
    if (auto r = sys::run({cfg_.runsc, "--version"}, 10s); r && r->exit_code == 0) {
      // "runsc version 0.0~20240729.0\nspec: 1.0.2-dev"
      constexpr std::string_view kPrefix = "runsc version ";
      if (r->output.rfind(kPrefix, 0) == 0) version = r->output.substr(kPrefix.size(), r->output.find('\n') - kPrefix.size());
    }
    direct_ = control_protocol_known(version);
    if (direct_) {
      spdlog::info("runsc {}: start, checkpoint and restore call the sandbox's control socket directly", version);
    } else {
      spdlog::info("runsc {}: control messages not known for this version; start, checkpoint and restore use the runsc CLI",
                   version.empty() ? "(version unreadable)" : version);
    }
  });
  return direct_;
}

void Runsc::sweep_state_temporaries() {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(cfg_.root_dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code rm;
    if (name.size() > kTempSuffix.size() && name.ends_with(kTempSuffix)) std::filesystem::remove(it->path(), rm);
  }
}

// The orphan reaper kept how the processes named in the state file ended (they are b3osd's
// orphans when this b3osd created them).
std::optional<int> Runsc::exit_status(const std::string& id, std::chrono::milliseconds wait) {
  auto pids = state_pids(id);
  if (!pids || pids->sandbox <= 0) return std::nullopt;
  return sys::orphan_status(pids->sandbox, wait);
}

std::optional<int> Runsc::gofer_exit_status(const std::string& id, std::chrono::milliseconds wait) {
  auto pids = state_pids(id);
  if (!pids || pids->gofer <= 0) return std::nullopt;
  return sys::orphan_status(pids->gofer, wait);
}

void Runsc::prepare() {
  sweep_state_temporaries();
  (void)direct_control();
}

std::string Runsc::state_path(const std::string& id) const {
  return cfg_.root_dir + "/" + id + "_sandbox:" + id + ".state";
}

std::string Runsc::lock_path(const std::string& id) const {
  return cfg_.root_dir + "/" + id + "_sandbox:" + id + ".lock";
}

Result<void> Runsc::start_root(const std::string& id, std::string_view verb,
                               const std::function<Result<void>(ControlConnection&, const std::string&)>& run) {
  const std::string what = "runsc " + std::string(verb) + " " + id;
  const std::string state_file = state_path(id);
  auto lock = lock_container(lock_path(id), what);
  if (!lock) return fail(lock.error());
  ScopeExit unlock([&] { ::flock(lock->get(), LOCK_UN); });

  auto state = read_state(state_file, what);
  if (!state) return fail(state.error());
  const std::string status = (*state)["status"].get<std::string>();
  if (status != "created") return fail(ErrorCode::kInternal, what + ": the container is " + status + ", not created");
  const auto& sandbox = (*state)["sandbox"];
  auto conn = ControlConnection::connect(sandbox["controlSocketPath"].get<std::string>());
  if (!conn) return fail(conn.error().wrap(what));
  if (auto r = create_links(*conn, id, what); !r) return r;
  if (auto r = run(*conn, sandbox["id"].get<std::string>()); !r) return fail(r.error().wrap(what));

  // What runsc's saveLocked leaves: the same document with status "running". Written beside
  // it and renamed over it, so no reader ever sees half a file.
  (*state)["status"] = "running";
  const std::string tmp = state_file + std::string(kTempSuffix);
  {
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640));
    if (!out) return fail(errno_error(ErrorCode::kInternal, what + ": " + tmp, errno));
    if (auto w = write_all(out.get(), state->dump()); !w) {
      ::unlink(tmp.c_str());
      return fail(w.error().wrap(what + ": " + tmp));
    }
  }
  if (::rename(tmp.c_str(), state_file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return fail(errno_error(ErrorCode::kInternal, what + ": " + state_file, err));
  }
  return {};
}

namespace {
// What runsc's createInterfacesAndRoutesFromNS does for the one interface of a sandbox's
// namespace, from a thread inside it: a packet socket bound to eth0 (virtio-net headers, so
// the host can hand over whole GSO segments; 4 MiB buffers), eth0's MAC, MTU, address and
// default route; then the address leaves the host side (the kernel must not answer for it).
Result<UniqueFd> open_packet_link(const std::string& netns_path, PacketLink& link) {
  UniqueFd out;
  auto r = sys::in_netns(netns_path, [&]() -> Result<void> {
    auto err = [](const std::string& what) { return fail(errno_error(ErrorCode::kInternal, what, errno)); };
    const unsigned index = ::if_nametoindex("eth0");
    if (index == 0) return err("eth0 in " + netns_path);
    UniqueFd fd(::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
    if (!fd) return err("packet socket");
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(index);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) return err("binding the packet socket to eth0");
    const int one = 1, buf = 4 << 20;
    if (::setsockopt(fd.get(), SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0 ||
        ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) != 0 ||
        ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) != 0)
      return err("setting up the packet socket");
    UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!s) return err("socket");
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "eth0", IFNAMSIZ - 1);
    if (::ioctl(s.get(), SIOCGIFHWADDR, &ifr) != 0) return err("eth0's MAC");
    link.mac.assign(ifr.ifr_hwaddr.sa_data, 6);
    if (::ioctl(s.get(), SIOCGIFMTU, &ifr) != 0) return err("eth0's MTU");
    link.mtu = ifr.ifr_mtu;
    if (::ioctl(s.get(), SIOCGIFADDR, &ifr) != 0) return err("eth0's address");
    link.addr = ntohl(reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr.s_addr);
    if (::ioctl(s.get(), SIOCGIFNETMASK, &ifr) != 0) return err("eth0's netmask");
    link.prefix = __builtin_popcount(reinterpret_cast<sockaddr_in*>(&ifr.ifr_netmask)->sin_addr.s_addr);
    // The default route: /proc/thread-self/net is this thread's namespace's.
    auto routes = read_small_file("/proc/thread-self/net/route", 1 << 16).value_or("");
    for (size_t at = 0; (at = routes.find("\neth0\t", at)) != std::string::npos; ++at) {
      unsigned dst = 1, gw = 0;
      if (std::sscanf(routes.c_str() + at + 6, "%x %x", &dst, &gw) == 2 && dst == 0 && gw != 0) link.gateway = ntohl(gw);
    }
    if (link.gateway == 0) return fail(ErrorCode::kInternal, "eth0 in " + netns_path + " has no default route");
    // RTM_DELADDR of eth0's address.
    struct {
      nlmsghdr nh;
      ifaddrmsg ifa;
      char attrs[64];
    } req{};
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(ifaddrmsg));
    req.nh.nlmsg_type = RTM_DELADDR;
    req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
    req.ifa.ifa_family = AF_INET;
    req.ifa.ifa_prefixlen = static_cast<unsigned char>(link.prefix);
    req.ifa.ifa_index = index;
    auto* rta = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.nh.nlmsg_len));
    rta->rta_type = IFA_LOCAL;
    rta->rta_len = RTA_LENGTH(4);
    const uint32_t be = htonl(link.addr);
    std::memcpy(RTA_DATA(rta), &be, 4);
    req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_LENGTH(4);
    UniqueFd nl(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE));
    if (!nl || ::send(nl.get(), &req, req.nh.nlmsg_len, 0) < 0) return err("removing eth0's address");
    char ack[512];
    const ssize_t n = ::recv(nl.get(), ack, sizeof ack, 0);
    const auto* h = reinterpret_cast<const nlmsghdr*>(ack);
    if (n < static_cast<ssize_t>(NLMSG_LENGTH(sizeof(nlmsgerr))) || h->nlmsg_type != NLMSG_ERROR)
      return fail(ErrorCode::kInternal, "removing eth0's address: no answer from the kernel");
    if (const int e = reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h))->error; e != 0) {
      errno = -e;
      return err("removing eth0's address");
    }
    out = std::move(fd);
    return {};
  });
  if (!r) return fail(r.error());
  return out;
}
}  // namespace

Result<void> Runsc::create_links(ControlConnection& conn, const std::string& id, const std::string& what) {
  const std::string netns = netns_of(id);
  if (netns.empty()) {
    // --network=none: the sandbox gets its loopback interface just before it starts.
    if (auto r = conn.call("Network.CreateLinksAndRoutes", loopback_links_arg(), {}, kStartTimeout); !r)
      return fail(r.error().wrap(what));
    return {};
  }
  PacketLink link;
  auto fd = open_packet_link(netns, link);
  if (!fd) return fail(fd.error().wrap(what));
  const int fds[] = {fd->get()};
  if (auto r = conn.call("Network.CreateLinksAndRoutes", sandbox_links_arg(link), fds, kStartTimeout); !r)
    return fail(r.error().wrap(what));
  return {};
}

Result<void> Runsc::start_direct(const std::string& id) {
  return start_root(id, "start", [](ControlConnection& conn, const std::string& sandbox_id) -> Result<void> {
    if (auto r = conn.call("containerManager.StartRoot", sandbox_id, {}, kStartTimeout); !r) return fail(r.error());
    return {};
  });
}

Result<void> Runsc::restore_direct(const std::string& id, const std::string& image_dir) {
  std::vector<UniqueFd> files;
  std::vector<int> fds;
  for (const char* name : kImageFiles) {
    const std::string path = image_dir + "/" + name;
    UniqueFd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f) return fail(errno_error(ErrorCode::kInternal, "runsc restore " + id + ": " + path, errno));
    fds.push_back(f.get());
    files.push_back(std::move(f));
  }
  return start_root(id, "restore", [&](ControlConnection& conn, const std::string&) -> Result<void> {
    const nlohmann::json arg = {{"HavePagesFile", true}, {"HaveDeviceFile", false}};
    if (auto r = conn.call("containerManager.Restore", arg, fds, kImageTimeout); !r) return fail(r.error());
    return {};
  });
}

Result<void> Runsc::checkpoint_direct(const std::string& id, const std::string& image_dir) {
  const std::string what = "runsc checkpoint " + id;
  std::string socket_path;
  {
    // runsc checkpoint loads the container under its lock, then calls without it.
    auto lock = lock_container(lock_path(id), what);
    if (!lock) return fail(lock.error());
    auto state = read_state(state_path(id), what);
    if (!state) return fail(state.error());
    const std::string status = (*state)["status"].get<std::string>();
    if (status != "created" && status != "running" && status != "paused") {
      return fail(ErrorCode::kInternal, what + ": the container is " + status);
    }
    socket_path = (*state)["sandbox"]["controlSocketPath"].get<std::string>();
  }
  std::error_code ec;
  std::filesystem::create_directories(image_dir, ec);
  if (ec) return fail(ErrorCode::kInternal, what + ": creating " + image_dir + ": " + ec.message());
  std::vector<UniqueFd> files;
  std::vector<int> fds;
  for (const char* name : kImageFiles) {
    const std::string path = image_dir + "/" + name;
    UniqueFd f(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!f) return fail(errno_error(ErrorCode::kInternal, what + ": " + path, errno));
    fds.push_back(f.get());
    files.push_back(std::move(f));
  }
  auto conn = ControlConnection::connect(socket_path);
  if (!conn) return fail(conn.error().wrap(what));
  // What `runsc checkpoint --leave-running --compression=none` sends.
  const json arg = {{"key", nullptr},
                    {"metadata", {{"compression", "none"}}},
                    {"MemoryFileSaveOpts", {{"ExcludeCommittedZeroPages", false}}},
                    {"have_pages_file", true},
                    {"Resume", true}};
  if (auto r = conn->call("containerManager.Checkpoint", arg, fds, kImageTimeout); !r) return fail(r.error().wrap(what));
  return {};
}

}  // namespace b3os::runtime
