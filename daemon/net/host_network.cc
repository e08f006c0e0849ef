#include "daemon/net/host_network.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <spdlog/spdlog.h>

#include "common/file.h"

namespace b3os::net {

namespace fs = std::filesystem;

Result<DnsUpstream> parse_dns_upstream(std::string_view text) {
  DnsUpstream u;
  std::string_view host = text;
  if (auto colon = text.rfind(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    const std::string port(text.substr(colon + 1));
    char* end = nullptr;
    const long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535)
      return fail(ErrorCode::kInvalidRequest, "DNS upstream \"" + std::string(text) + "\": the port must be 1-65535");
    u.port = static_cast<uint16_t>(p);
  }
  auto ip = parse_ipv4(host);
  if (!ip) return fail(ErrorCode::kInvalidRequest, "DNS upstream \"" + std::string(text) + "\": expected IPv4[:port]");
  u.addr = *ip;
  return u;
}

std::vector<DnsUpstream> nameservers_of(std::string_view resolv_conf) {
  std::vector<DnsUpstream> out;
  std::istringstream in{std::string(resolv_conf)};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, value;
    if (words >> key >> value && key == "nameserver")
      if (auto ip = parse_ipv4(value)) out.push_back({*ip, 53});
  }
  return out;
}

namespace {
// Without --dns-upstream, the host's own nameservers (b3osd asks them from the host).
HostNetworkConfig with_default_upstreams(HostNetworkConfig cfg) {
  if (cfg.dns_upstreams.empty())
    cfg.dns_upstreams = nameservers_of(read_small_file("/etc/resolv.conf", 1 << 16).value_or(""));
  return cfg;
}
}  // namespace

namespace {
// Raises a numeric sysctl to `want` if it is lower; never lowers it. Logs what it did.
void raise_sysctl(const std::string& path, uint64_t want, std::string_view why) {
  const auto text = read_small_file(path, 64);
  const uint64_t have = text ? std::strtoull(text->c_str(), nullptr, 10) : 0;
  if (have >= want) return;
  std::ofstream f(path);
  f << want << "\n";
  f.close();
  if (f) spdlog::info("network: {} raised from {} to {} ({})", path, have, want, why);
  else spdlog::warn("network: cannot raise {} from {} to {} ({})", path, have, want, why);
}
}  // namespace

HostNetwork::HostNetwork(HostNetworkConfig cfg)
    : cfg_(with_default_upstreams(std::move(cfg))), firewall_(cfg_.layout),
      resolver_(io_, policies_, cfg_.dns_upstreams, host_addrs_, cfg_.dns_max_pending),
      proxy_(io_, policies_, resolver_, host_addrs_, cfg_.proxy_max_connections) {}

HostNetwork::~HostNetwork() { stop(); }

Result<void> HostNetwork::start() {
  // One b3osd per uplink range: a second one would hand out the same addresses.
  const std::string lock = "/run/" + cfg_.layout.table() + ".lock";
  lock_.reset(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (!lock_ || ::flock(lock_.get(), LOCK_EX | LOCK_NB) != 0)
    return fail(ErrorCode::kInternal, "another b3osd uses the sandbox networks " + cfg_.layout.uplinks.str() + " (" +
                                          lock + " is locked): give this one --net-uplinks of its own, or --network off");
  if (cfg_.dns_upstreams.empty())
    spdlog::warn("network: no upstream resolver (none in /etc/resolv.conf, no --dns-upstream): sandboxes' DNS fails");
  const std::string dir = cfg_.run_dir + "/net";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(ErrorCode::kInternal, "creating " + dir + ": " + ec.message());
  {
    std::ofstream f(resolv_conf(), std::ios::trunc);
    f << "# b3os: the sandbox's resolver (b3osd answers it; see docs/network.md)\nnameserver "
      << ipv4_str(kInnerGateway) << "\n";
    if (!f) return fail(ErrorCode::kInternal, "writing " + resolv_conf());
  }
  ::chmod(resolv_conf().c_str(), 0644);
  auto was_off = ensure_host_setup(cfg_.layout);
  if (!was_off) return fail(was_off.error().wrap("setting up the host for sandbox networks"));
  // Forwarding was off before b3osd turned it on: nothing but sandboxes' traffic may use it
  // (remembered across restarts: the second b3osd finds it on).
  const std::string marker = dir + "/forwarding-was-off";
  if (*was_off) std::ofstream(marker) << "1\n";
  const bool guard = ::access(marker.c_str(), F_OK) == 0;
  if (auto r = firewall_.install(guard); !r) return fail(r.error());
  // Every sandbox at its flow cap, plus room for the host's own connections.
  raise_sysctl("/proc/sys/net/netfilter/nf_conntrack_max",
               uint64_t(std::max(cfg_.max_sandboxes, 1)) * cfg_.layout.max_flows + kHostConntrackRoom,
               "every sandbox's --net-max-flows, and room for the host's own connections");
  raise_sysctl("/proc/sys/net/core/somaxconn", EgressProxy::kListenBacklog,
               "the egress proxy's queue of connections, which every sandbox shares");
  const uint32_t svc = cfg_.layout.service_addr();
  if (auto r = resolver_.start(svc, cfg_.layout.dns_port); !r) return fail(r.error());
  if (auto r = proxy_.start(svc, cfg_.layout.proxy_port); !r) return fail(r.error());
  work_.emplace(io_.get_executor());
  thread_ = std::thread([this] { io_.run(); });
  started_ = true;
  std::string ups;
  for (auto& u : cfg_.dns_upstreams) ups += (ups.empty() ? "" : ", ") + ipv4_str(u.addr) + ":" + std::to_string(u.port);
  spdlog::info("network: uplinks {}, resolver and proxy on {} (:{}, :{}), upstream DNS {}", cfg_.layout.uplinks.str(),
               ipv4_str(svc), cfg_.layout.dns_port, cfg_.layout.proxy_port, ups.empty() ? "none" : ups);
  return {};
}



void HostNetwork::stop() {
  if (!started_) return;
  started_ = false;
  on_net_thread([this] {
    resolver_.stop();
    proxy_.stop();
  });
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void HostNetwork::on_net_thread(std::function<void()> fn) {
  if (!started_ || std::this_thread::get_id() == thread_.get_id()) return fn();
  std::promise<void> done;
  boost::asio::post(io_, [&] {
    fn();
    done.set_value();
  });
  done.get_future().wait();
}

Result<int> HostNetwork::take_slot() {
  std::lock_guard lk(mu_);
  const int n = cfg_.layout.slots();
  for (int tried = 0; tried < n; ++tried) {
    const int i = next_slot_;
    next_slot_ = next_slot_ % n + 1;
    // Round robin, so a slot just freed is the last one reused (its conntrack state forgotten).
    if (used_slots_.insert(i).second) return i;
  }
  return fail(ErrorCode::kCapacityUnavailable, "every sandbox network of " + cfg_.layout.uplinks.str() + " is in use");
}

void HostNetwork::free_slot(int index) {
  std::lock_guard lk(mu_);
  used_slots_.erase(index);
}

Result<NetSlot> HostNetwork::prepare(const std::string& sandbox_id) {
  auto index = take_slot();
  if (!index) return fail(index.error());
  NetSlot slot = cfg_.layout.slot(sandbox_id, *index);
  if (auto r = create_netns(cfg_.layout, slot); !r) {
    free_slot(*index);
    return fail(r.error());
  }
  std::lock_guard lk(mu_);
  sandboxes_[sandbox_id] = Sandbox{slot, {}, false};
  return slot;
}

Result<void> HostNetwork::activate(const std::string& sandbox_id) {
  NetSlot slot;
  {
    std::lock_guard lk(mu_);
    auto it = sandboxes_.find(sandbox_id);
    if (it == sandboxes_.end()) return fail(ErrorCode::kInternal, "sandbox " + sandbox_id + " has no network");
    slot = it->second.slot;
  }
  return activate_netns(slot);
}

Result<void> HostNetwork::apply(const std::string& sandbox_id, const EgressPolicy& policy) {
  auto parsed = parse_allow_list(policy.allow);
  if (!parsed) return fail(parsed.error());
  auto sp = std::make_shared<SourcePolicy>();
  sp->sandbox_id = sandbox_id;
  sp->mode = policy.mode;
  sp->list = Allowlist(std::move(*parsed));
  const FirewallEntries after = entries_for(policy.mode, sp->list);

  std::lock_guard lk(apply_mu_);  // one change at a time: `before` is what the table holds
  FirewallEntries before;
  uint32_t source = 0;
  bool had_policy = false;
  {
    std::lock_guard lk2(mu_);
    auto it = sandboxes_.find(sandbox_id);
    if (it == sandboxes_.end()) return fail(ErrorCode::kInternal, "sandbox " + sandbox_id + " has no network");
    before = it->second.entries;
    source = it->second.slot.sandbox_addr;
    had_policy = it->second.has_policy;
  }
  // The resolver and the proxy judge by the new policy before the firewall lets anything
  // new through; connections the old one allowed are judged again after. A firewall that
  // refuses the change leaves the old policy in force everywhere.
  auto previous = policies_.get(source);
  policies_.set(source, sp);
  if (auto r = firewall_.replace(source, before, after); !r) {
    if (previous) policies_.set(source, previous);
    else policies_.erase(source);
    spdlog::error("sandbox {}: {}", sandbox_id, r.error().message);
    return fail(r.error());
  }
  {
    std::lock_guard lk2(mu_);
    if (auto it = sandboxes_.find(sandbox_id); it != sandboxes_.end()) {
      it->second.entries = after;
      it->second.has_policy = true;
    }
  }
  if (had_policy) {
    resolver_.forget(source);
    // The proxy resets the connections it holds that the new policy refuses; the ones the
    // firewall forwards are marked to be judged again at the sandbox's next packet. Their
    // conntrack entries are kept: deleting them (as b3osd did) raced the far end, whose next
    // packet, no longer translated, was reset by the host, leaving the sandbox waiting on a
    // connection that was dead and never told it.
    on_net_thread([this, source] { proxy_.recheck(source); });
    firewall_.rejudge_connections(source);
  }
  return {};
}

void HostNetwork::release(const std::string& sandbox_id) {
  Sandbox sb;
  {
    std::lock_guard lk(mu_);
    auto it = sandboxes_.find(sandbox_id);
    if (it == sandboxes_.end()) {
      // Not ours (an orphan of a previous b3osd): only its namespace can be left.
      destroy_netns(sandbox_id);
      return;
    }
    sb = it->second;
    sandboxes_.erase(it);
  }
  const uint32_t source = sb.slot.sandbox_addr;
  {
    std::lock_guard lk(apply_mu_);
    if (auto r = firewall_.replace(source, sb.entries, {}); !r) spdlog::warn("sandbox {}: {}", sandbox_id, r.error().message);
  }
  policies_.erase(source);
  resolver_.forget(source);
  on_net_thread([this, source] { proxy_.recheck(source); });
  destroy_netns(sandbox_id);
  firewall_.forget_connections(source);
  free_slot(sb.slot.index);
}

std::vector<std::string> HostNetwork::list() {
  std::vector<std::string> mine;
  for (auto& id : list_netns())
    if (read_slot_index(cfg_.layout, netns_name(id))) mine.push_back(id);
  return mine;
}

Result<NetSlot> HostNetwork::recover(const std::string& sandbox_id) {
  const std::string ns = netns_name(sandbox_id);
  auto index = read_slot_index(cfg_.layout, ns);
  if (!index) return fail(index.error());
  std::lock_guard lk(mu_);
  if (!used_slots_.insert(*index).second)
    return fail(ErrorCode::kInternal, ns + " uses slot " + std::to_string(*index) + ", which another sandbox has");
  NetSlot slot = cfg_.layout.slot(sandbox_id, *index);
  // The firewall was made anew at this start and holds nothing for it, but conntrack still
  // holds the connections its previous policy let through: has_policy makes the first apply
  // mark them to be judged again at their next packet (and the proxy judge its own again), so
  // a policy stored and not applied before a crash takes effect on them too.
  sandboxes_[sandbox_id] = Sandbox{slot, {}, true};
  return slot;
}

}  // namespace b3os::net
