#include "tests/fakes/fake_runtime.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace b3os::fakes {

using runtime::ContainerState;

void FakeRuntime::fail(const std::string& verb, int times, const std::string& id) {
  std::lock_guard lk(mu_);
  faults_[{verb, id}].times = times;
}

void FakeRuntime::hang(const std::string& verb, std::chrono::milliseconds d, const std::string& id) {
  std::lock_guard lk(mu_);
  faults_[{verb, id}].hang = d;
}

void FakeRuntime::clear_faults() {
  std::lock_guard lk(mu_);
  faults_.clear();
}

Result<void> FakeRuntime::enter(const std::string& verb, const std::string& id) {
  std::chrono::milliseconds hang{0};
  bool failing = false;
  {
    std::lock_guard lk(mu_);
    ++calls_[verb];
    for (const std::string& key : {id, std::string()}) {
      auto it = faults_.find({verb, key});
      if (it == faults_.end()) continue;
      hang = std::max(hang, it->second.hang);
      if (it->second.times > 0) {
        --it->second.times;
        failing = true;
      }
    }
  }
  if (hang.count() > 0) std::this_thread::sleep_for(hang);
  if (failing) return b3os::fail(ErrorCode::kInternal, "fake runtime: " + verb + " " + id + " failed");
  return {};
}

void FakeRuntime::stall(const std::string& id) {
  std::lock_guard lk(mu_);
  if (auto it = containers_.find(id); it != containers_.end() && it->second.agent) it->second.agent->stall();
}

void FakeRuntime::crash(const std::string& id) {
  std::unique_ptr<FakeAgent> agent;
  {
    std::lock_guard lk(mu_);
    auto it = containers_.find(id);
    if (it == containers_.end()) return;
    agent = std::move(it->second.agent);
    it->second.state = ContainerState::kStopped;
  }
  if (agent) agent->crash();
}

std::set<std::string> FakeRuntime::ids() const {
  std::lock_guard lk(mu_);
  std::set<std::string> out;
  for (auto& [id, c] : containers_) out.insert(id);
  return out;
}

std::optional<ContainerState> FakeRuntime::state_of(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end()) return std::nullopt;
  return it->second.state;
}

int FakeRuntime::calls(const std::string& verb) const {
  std::lock_guard lk(mu_);
  auto it = calls_.find(verb);
  return it == calls_.end() ? 0 : it->second;
}

Result<void> FakeRuntime::create(const runtime::ContainerSpec& spec, int stdio_fd) {
  if (auto r = enter("create", spec.id); !r) return r;
  int fd = ::fcntl(stdio_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return b3os::fail(errno_error(ErrorCode::kInternal, "dup", errno));
  std::lock_guard lk(mu_);
  Container& c = containers_[spec.id];
  c.agent_end.reset(fd);
  c.vcpu = spec.vcpu;
  c.disk_dir = spec.disk_dir;
  return {};
}

Result<std::string> FakeRuntime::make_disk(const std::string& id, int gib) {
  if (auto r = enter("make_disk", id); !r) return b3os::fail(r.error());
  std::lock_guard lk(mu_);
  if (disks_.count(id)) return b3os::fail(ErrorCode::kInternal, "fake runtime: disk " + id + " exists");
  disks_[id] = gib;
  return "/fake/disks/" + id + "/mnt";
}

Result<void> FakeRuntime::remove_disk(const std::string& id) {
  auto r = enter("remove_disk", id);
  // A removal that fails leaves the disk, as a busy mount might.
  std::lock_guard lk(mu_);
  if (r) disks_.erase(id);
  return r;
}

Result<std::vector<std::string>> FakeRuntime::list_disks() {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (auto& [id, gib] : disks_) out.push_back(id);
  return out;
}

void FakeRuntime::leave_disk(const std::string& id, int gib) {
  std::lock_guard lk(mu_);
  disks_[id] = gib;
}

std::map<std::string, int> FakeRuntime::disks() const {
  std::lock_guard lk(mu_);
  return disks_;
}

std::string FakeRuntime::disk_dir_of(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  return it == containers_.end() ? "" : it->second.disk_dir;
}

Result<void> FakeRuntime::start(const std::string& id) {
  if (auto r = enter("start", id); !r) return r;
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end() || it->second.state != ContainerState::kCreated)
    return b3os::fail(ErrorCode::kInternal, "fake runtime: " + id + " is not created");
  it->second.state = ContainerState::kRunning;
  it->second.agent = std::make_unique<FakeAgent>(std::move(it->second.agent_end), true, agents_report_idle_.load());
  return {};
}

Result<void> FakeRuntime::restore(const std::string& id, const std::string&, const std::string& image_dir) {
  if (auto r = enter("restore", id); !r) return r;
  if (::access((image_dir + "/checkpoint.img").c_str(), R_OK) != 0)
    return b3os::fail(ErrorCode::kInternal, "fake runtime: no image in " + image_dir);
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end() || it->second.state != ContainerState::kCreated)
    return b3os::fail(ErrorCode::kInternal, "fake runtime: " + id + " is not created");
  it->second.state = ContainerState::kRunning;
  it->second.agent = std::make_unique<FakeAgent>(std::move(it->second.agent_end), false, agents_report_idle_.load());
  return {};
}

Result<void> FakeRuntime::checkpoint(const std::string& id, const std::string& image_dir) {
  if (auto r = enter("checkpoint", id); !r) return r;
  {
    std::lock_guard lk(mu_);
    auto it = containers_.find(id);
    if (it == containers_.end() || it->second.state != ContainerState::kRunning)
      return b3os::fail(ErrorCode::kInternal, "fake runtime: " + id + " is not running");
    if (it->second.frozen) {
      ++verbs_while_frozen_;  // a real checkpoint would hang on a frozen sentry
      return b3os::fail(ErrorCode::kInternal, "fake runtime: checkpoint of frozen " + id);
    }
  }
  std::ofstream(image_dir + "/checkpoint.img") << "image of " << id << "\n";
  return {};
}

Result<void> FakeRuntime::pause(const std::string& id) {
  if (auto r = enter("pause", id); !r) return r;
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end()) return b3os::fail(ErrorCode::kInternal, "fake runtime: no " + id);
  if (it->second.frozen) {
    ++verbs_while_frozen_;  // runsc pause asks the sentry, which a frozen cgroup stops
    return b3os::fail(ErrorCode::kInternal, "fake runtime: pause of frozen " + id);
  }
  it->second.state = ContainerState::kPaused;
  // runsc pause, then the cgroup freezer (Runsc::pause)
  it->second.frozen = true;
  if (it->second.agent) it->second.agent->set_frozen(true);
  return {};
}

Result<void> FakeRuntime::resume(const std::string& id) {
  if (auto r = enter("resume", id); !r) return r;
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  if (it == containers_.end()) return b3os::fail(ErrorCode::kInternal, "fake runtime: no " + id);
  it->second.state = ContainerState::kRunning;
  it->second.frozen = false;  // Runsc::resume thaws first
  if (it->second.agent) it->second.agent->set_frozen(false);
  return {};
}

Result<void> FakeRuntime::destroy(const std::string& id) {
  auto r = enter("destroy", id);
  std::unique_ptr<FakeAgent> agent;
  {
    std::lock_guard lk(mu_);
    auto it = containers_.find(id);
    if (it != containers_.end()) {
      agent = std::move(it->second.agent);
      it->second.frozen = false;  // Runsc::destroy thaws first
      if (agent) frames_while_frozen_gone_ += agent->frames_while_frozen();
      // A destroy that fails leaves the container, as a real one might.
      if (r) containers_.erase(it);
    }
  }
  if (agent) agent->crash();
  return r;
}

Result<ContainerState> FakeRuntime::state(const std::string& id) {
  if (auto r = enter("state", id); !r) return b3os::fail(r.error());
  auto s = state_of(id);
  return s.value_or(ContainerState::kMissing);
}

Result<std::vector<std::string>> FakeRuntime::list() {
  auto all = ids();
  return std::vector<std::string>(all.begin(), all.end());
}

void FakeRuntime::set_frozen(const std::string& id, bool frozen) {
  std::lock_guard lk(mu_);
  ++calls_[frozen ? "freeze" : "thaw"];
  if (auto it = containers_.find(id); it != containers_.end()) {
    it->second.frozen = frozen;
    if (it->second.agent) it->second.agent->set_frozen(frozen);
  }
}

bool FakeRuntime::frozen(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = containers_.find(id);
  return it != containers_.end() && it->second.frozen;
}

int FakeRuntime::frozen_violations() const {
  std::lock_guard lk(mu_);
  int n = verbs_while_frozen_ + frames_while_frozen_gone_;
  for (auto& [id, c] : containers_)
    if (c.agent) n += c.agent->frames_while_frozen();
  return n;
}

Result<void> FakeRuntime::limit_cpu(const std::string& id, int vcpu) {
  if (auto r = enter("limit_cpu", id); !r) return r;
  std::lock_guard lk(mu_);
  if (auto it = containers_.find(id); it != containers_.end()) it->second.vcpu = vcpu;
  return {};
}

Result<void> FakeRuntime::set_memory_limit(const std::string& id, int64_t bytes) {
  if (auto r = enter("set_memory_limit", id); !r) return r;
  std::lock_guard lk(mu_);
  if (auto it = containers_.find(id); it != containers_.end()) it->second.memory_limit = bytes;
  return {};
}

Result<pid_t> FakeShims::start(const std::string& dir, int fd, int log_fd) {
  std::lock_guard lk(mu_);
  if (fail_start_) {
    fail_start_ = false;
    return b3os::fail(ErrorCode::kInternal, "fake shim did not start");
  }
  int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return b3os::fail(errno_error(ErrorCode::kInternal, "dup", errno));
  UniqueFd gone(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!gone) return b3os::fail(errno_error(ErrorCode::kInternal, "eventfd", errno));
  UniqueFd log;
  if (log_fd >= 0) {
    log.reset(::fcntl(log_fd, F_DUPFD_CLOEXEC, 0));
    ++started_with_log_;
  }
  const pid_t pid = ++next_pid_;
  held_[dir] = {pid, UniqueFd(copy), std::move(log), std::move(gone)};
  ++started_;
  return pid;
}

void FakeShims::stop(const std::string& dir, pid_t, int) {
  std::lock_guard lk(mu_);
  held_.erase(dir);
}

pid_t FakeShims::recorded_pid(const std::string& dir) {
  std::lock_guard lk(mu_);
  auto it = held_.find(dir);
  return it == held_.end() ? -1 : it->second.pid;
}

Result<runtime::Shims::Held> FakeShims::reclaim(const std::string& dir) {
  std::lock_guard lk(mu_);
  auto it = held_.find(dir);
  if (it == held_.end()) return b3os::fail(ErrorCode::kInternal, "no shim holds " + dir);
  int copy = ::fcntl(it->second.channel.get(), F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return b3os::fail(errno_error(ErrorCode::kInternal, "dup", errno));
  Held held;
  held.channel.reset(copy);
  if (it->second.log) held.log.reset(::fcntl(it->second.log.get(), F_DUPFD_CLOEXEC, 0));
  return held;
}

runtime::Shims::Watched FakeShims::watch(const std::string& dir, pid_t /*child*/) {
  std::lock_guard lk(mu_);
  Watched w;
  auto it = held_.find(dir);
  if (it == held_.end()) return w;
  w.fd.reset(::fcntl(it->second.gone.get(), F_DUPFD_CLOEXEC, 0));
  w.pid = it->second.pid;
  return w;
}

void FakeShims::kill(const std::string& dir) {
  std::lock_guard lk(mu_);
  auto it = held_.find(dir);
  if (it == held_.end()) return;
  const uint64_t one = 1;
  (void)!::write(it->second.gone.get(), &one, sizeof one);
  held_.erase(it);
}

int FakeShims::started() const {
  std::lock_guard lk(mu_);
  return started_;
}

int FakeShims::started_with_log() const {
  std::lock_guard lk(mu_);
  return started_with_log_;
}

std::set<std::string> FakeShims::held() const {
  std::lock_guard lk(mu_);
  std::set<std::string> out;
  for (auto& [d, h] : held_) out.insert(d);
  return out;
}

}  // namespace b3os::fakes
