#include "daemon/net/netns.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/file.h"
#include "common/unique_fd.h"
#include "daemon/sys/netns.h"
#include "daemon/sys/process.h"

namespace b3os::net {

using namespace std::chrono_literals;
using nlohmann::json;

using sys::in_netns;

namespace {
constexpr auto kCommandTimeout = 10s;
const std::string kNetnsDir = "/run/netns";

Result<void> run_checked(const std::vector<std::string>& argv, std::string_view input = {}) {
  return sys::run_checked(argv, kCommandTimeout, input);
}

Result<void> write_sysctl(const std::string& name, std::string_view value) {
  const std::string path = "/proc/sys/" + name;
  UniqueFd f(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!f || ::write(f.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
    return fail(errno_error(ErrorCode::kInternal, "writing " + path, errno));
  return {};
}

// Checksum offload off on the sandbox's end: what the kernel would send out of eth0 must carry
// its checksum (ARCHITECTURE.md, quirk 3). Its peer gw0 keeps offloads on: runsc reads eth0
// with PACKET_VNET_HDR and takes segments whose checksum is left partial.
Result<void> offloads_off(int sock, const std::string& ifname) {
  for (uint32_t cmd : {uint32_t{ETHTOOL_STXCSUM}, uint32_t{ETHTOOL_SRXCSUM}}) {
    ethtool_value v{cmd, 0};
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_data = reinterpret_cast<char*>(&v);
    if (::ioctl(sock, SIOCETHTOOL, &ifr) != 0)
      return fail(errno_error(ErrorCode::kInternal, "turning checksum offload off on " + ifname, errno));
  }
  return {};
}

Result<void> link_up(int sock, const std::string& ifname) {
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return fail(errno_error(ErrorCode::kInternal, "reading " + ifname, errno));
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
  if (::ioctl(sock, SIOCSIFFLAGS, &ifr) != 0)
    return fail(errno_error(ErrorCode::kInternal, "bringing " + ifname + " up", errno));
  return {};
}

sockaddr_in sin_of(uint32_t addr) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(addr);
  return s;
}

Result<void> add_default_route(int sock, uint32_t gateway, const std::string& ifname) {
  rtentry rt{};
  auto dst = sin_of(0), gw = sin_of(gateway), mask = sin_of(0);
  std::memcpy(&rt.rt_dst, &dst, sizeof dst);
  std::memcpy(&rt.rt_gateway, &gw, sizeof gw);
  std::memcpy(&rt.rt_genmask, &mask, sizeof mask);
  rt.rt_flags = RTF_UP | RTF_GATEWAY;
  std::string dev = ifname;
  rt.rt_dev = dev.data();
  if (::ioctl(sock, SIOCADDRT, &rt) != 0 && errno != EEXIST)
    return fail(errno_error(ErrorCode::kInternal, "adding the default route via " + ipv4_str(gateway), errno));
  return {};
}

// The namespace's own table: DNS to anywhere goes to b3osd's resolver, traffic leaves by the
// uplink with the uplink's address, nothing new comes in, and the namespace itself answers
// nothing. Static text (no user data in it): the host's table (firewall.cc), which holds what
// users chose, is written as JSON.
std::string netns_ruleset(const NetLayout& layout) {
  const std::string svc = ipv4_str(layout.service_addr());
  const std::string dns = std::to_string(layout.dns_port);
  const std::string flows = std::to_string(layout.max_flows);
  // The flow cap is checked here too (the host's table checks it again by uplink address): a
  // refused connection never becomes an entry of this namespace's conntrack table either.
  return "table ip b3os_ns {\n"
         "  chain pre {\n"
         "    type nat hook prerouting priority dstnat; policy accept;\n"
         "    iifname \"gw0\" udp dport 53 dnat to " + svc + ":" + dns + "\n"
         "    iifname \"gw0\" tcp dport 53 dnat to " + svc + ":" + dns + "\n"
         "  }\n"
         "  chain post {\n"
         "    type nat hook postrouting priority srcnat; policy accept;\n"
         "    oifname \"up0\" masquerade\n"
         "  }\n"
         "  chain forward {\n"
         "    type filter hook forward priority filter; policy drop;\n"
         "    iifname \"gw0\" ct state new ct count over " + flows + " jump refuse\n"
         "    iifname \"gw0\" oifname \"up0\" accept\n"
         "    iifname \"up0\" oifname \"gw0\" ct state established,related accept\n"
         "  }\n"
         "  chain refuse {\n"
         "    meta l4proto tcp reject with tcp reset\n"
         "    reject with icmp type admin-prohibited\n"
         "  }\n"
         "  chain input {\n"
         "    type filter hook input priority filter; policy drop;\n"
         "    ct state established,related accept\n"
         "  }\n"
         "}\n";
}
}  // namespace

int NetLayout::slot_of(uint32_t addr) const {
  if (!uplinks.contains(addr) || (addr & 3) != 2) return 0;
  const int index = static_cast<int>((addr - uplinks.addr) / 4);
  return index >= 1 && index <= slots() ? index : 0;
}

std::string NetLayout::table() const {
  std::string t = "b3os_" + uplinks.str();
  for (auto& c : t)
    if (c == '.' || c == '/') c = '_';
  return t;
}

NetSlot NetLayout::slot(const std::string& sandbox_id, int index) const {
  NetSlot s;
  s.uplink = uplink_name(sandbox_id);
  s.index = index;
  s.netns = netns_name(sandbox_id);
  s.netns_path = kNetnsDir + "/" + s.netns;
  s.host_addr = host_addr(index);
  s.sandbox_addr = sandbox_addr(index);
  return s;
}

std::string netns_name(const std::string& sandbox_id) { return std::string(kNetnsPrefix) + sandbox_id; }
std::string uplink_name(const std::string& sandbox_id) {
  return std::string(kUplinkPrefix) + (sandbox_id.size() > 11 ? sandbox_id.substr(sandbox_id.size() - 11) : sandbox_id);
}

Result<bool> ensure_host_setup(const NetLayout& layout) {
  // On the host's loopback (a dummy interface would do, but kernels built without one are
  // common in VMs): local to the host, reachable from nowhere the firewall does not allow.
  // Idempotent: `replace` keeps an address that is already there.
  if (auto r = run_checked({"ip", "addr", "replace", ipv4_str(layout.service_addr()) + "/32", "dev", "lo"}); !r)
    return fail(r.error());
  const bool was_off = read_small_file("/proc/sys/net/ipv4/ip_forward", 16).value_or("0").rfind('1', 0) != 0;
  if (was_off) {
    if (auto r = write_sysctl("net/ipv4/ip_forward", "1"); !r) return fail(r.error());
  }
  return was_off;
}

Result<void> create_netns(const NetLayout& layout, const NetSlot& slot) {
  const std::string& up = slot.uplink;
  auto undo = [&](Error e) -> Result<void> {
    destroy_netns(slot.netns.substr(kNetnsPrefix.size()));
    return fail(e.wrap("making the network of " + slot.netns));
  };
  if (auto r = run_checked({"ip", "netns", "add", slot.netns}); !r) return fail(r.error());
  // Before any interface exists: IPv6 off for all of them (the sandbox gets none), forwarding on.
  auto sysctls = in_netns(slot.netns_path, [] {
    for (auto* name : {"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"})
      if (auto r = write_sysctl(name, "1"); !r) return r;
    return write_sysctl("net/ipv4/ip_forward", "1");
  });
  if (!sysctls) return undo(sysctls.error());
  const std::string host = ipv4_str(slot.host_addr) + "/30", sbx = ipv4_str(slot.sandbox_addr) + "/30";
  if (auto r = run_checked({"ip", "-batch", "-"}, "link add " + up + " type veth peer name up0 netns " + slot.netns +
                                                     "\naddr add " + host + " dev " + up + "\n");
      !r)
    return undo(r.error());
  (void)write_sysctl("net/ipv6/conf/" + up + "/disable_ipv6", "1");
  if (auto r = run_checked({"ip", "link", "set", up, "up"}); !r) return undo(r.error());
  // eth0 up and addressed (runsc takes it, with its route); gw0 and up0 addressed but down.
  const std::string inner = "link set lo up\n"
                            "link add eth0 type veth peer name gw0\n"
                            "addr add 10.0.0.2/30 dev eth0\n"
                            "link set eth0 up\n"
                            "route add default via 10.0.0.1 dev eth0\n"
                            "addr add 10.0.0.1/30 dev gw0\n"
                            "addr add " + sbx + " dev up0\n";
  if (auto r = run_checked({"ip", "-n", slot.netns, "-batch", "-"}, inner); !r) return undo(r.error());
  auto offloads = in_netns(slot.netns_path, [] {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) return Result<void>(fail(errno_error(ErrorCode::kInternal, "socket", errno)));
    // eth0 only: gw0 keeps its offloads, so the host hands gVisor's packet socket whole GSO
    // segments (measured: a download went from ~55 to ~100 MB/s on a loaded node).
    return offloads_off(sock.get(), "eth0");
  });
  if (!offloads) return undo(offloads.error());
  if (auto r = run_checked({"ip", "netns", "exec", slot.netns, "nft", "-f", "-"}, netns_ruleset(layout)); !r)
    return undo(r.error());
  return {};
}

Result<void> activate_netns(const NetSlot& slot) {
  auto r = in_netns(slot.netns_path, [&] {
    UniqueFd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock) return Result<void>(fail(errno_error(ErrorCode::kInternal, "socket", errno)));
    for (auto* ifname : {"gw0", "up0"})
      if (auto r = link_up(sock.get(), ifname); !r) return r;
    return add_default_route(sock.get(), slot.host_addr, "up0");
  });
  if (!r) return fail(r.error().wrap("bringing up the network of " + slot.netns));
  return {};
}

void destroy_netns(const std::string& sandbox_id) {
  const std::string netns = netns_name(sandbox_id);
  if (::access((kNetnsDir + "/" + netns).c_str(), F_OK) == 0) {
    if (auto r = run_checked({"ip", "netns", "del", netns}); !r) spdlog::warn("{}", r.error().message);
  }
  // The veth pair goes with the namespace; a host end left by a failed create does not.
  const std::string up = uplink_name(sandbox_id);
  if (::if_nametoindex(up.c_str()) != 0) {
    // The kernel may still be taking it down with the namespace: gone is what we want.
    if (auto r = run_checked({"ip", "link", "del", up}); !r && r.error().message.find("Cannot find device") == std::string::npos)
      spdlog::warn("{}", r.error().message);
  }
}

std::vector<std::string> list_netns() {
  std::vector<std::string> out;
  DIR* d = ::opendir(kNetnsDir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() > kNetnsPrefix.size() && n.substr(0, kNetnsPrefix.size()) == kNetnsPrefix)
      out.emplace_back(n.substr(kNetnsPrefix.size()));
  }
  ::closedir(d);
  return out;
}

Result<int> read_slot_index(const NetLayout& layout, const std::string& netns) {
  auto r = sys::run({"ip", "-n", netns, "-j", "addr", "show", "dev", "up0"}, kCommandTimeout);
  if (!r) return fail(r.error());
  if (r->exit_code != 0) return fail(ErrorCode::kInternal, "reading the uplink of " + netns + ": " + r->output);
  try {
    for (auto& link : json::parse(r->output))
      for (auto& a : link.value("addr_info", json::array()))
        if (a.value("family", "") == "inet")
          if (auto ip = parse_ipv4(a.value("local", "")))
            if (int index = layout.slot_of(*ip)) return index;
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, "reading the uplink of " + netns + ": " + e.what());
  }
  return fail(ErrorCode::kInternal, "the uplink of " + netns + " has no address in " + layout.uplinks.str());
}

}  // namespace b3os::net
