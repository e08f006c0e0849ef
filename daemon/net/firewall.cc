#include "daemon/net/firewall.h"

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "daemon/net/host_addrs.h"
#include "daemon/sys/process.h"

namespace b3os::net {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {
constexpr auto kNftTimeout = 20s;

json elem_cidr(const Cidr& c) {
  if (c.prefix == 32) return ipv4_str(c.addr);
  return {{"prefix", {{"addr", ipv4_str(c.addr)}, {"len", c.prefix}}}};
}

json set_op(const std::string& table, const char* op, const char* set, json elems) {
  return {{op, {{"element", {{"family", "inet"}, {"table", table}, {"name", set}, {"elem", std::move(elems)}}}}}};
}

// The commands that take `e`'s elements for `source` out of (op "delete") or into ("add")
// the sets.
void element_ops(json& cmds, const std::string& table, const char* op, uint32_t source, const FirewallEntries& e) {
  const std::string src = ipv4_str(source);
  if (e.is_public) cmds.push_back(set_op(table, op, "public_src", json::array({src})));
  json cidrs = json::array(), ports = json::array();
  for (auto& [net, port] : e.cidr_ports) cidrs.push_back({{"concat", {src, elem_cidr(net), port}}});
  for (auto port : e.proxy_ports) ports.push_back({{"concat", {src, port}}});
  if (!cidrs.empty()) cmds.push_back(set_op(table, op, "allow_cidr", std::move(cidrs)));
  if (!ports.empty()) cmds.push_back(set_op(table, op, "proxy_ports", std::move(ports)));
}

Result<void> nft(const std::vector<std::string>& argv, std::string_view input, std::string_view what) {
  if (auto r = sys::run_checked(argv, kNftTimeout, input); !r) return fail(r.error().wrap(what));
  return {};
}
}  // namespace

FirewallEntries entries_for(const std::string& mode, const Allowlist& list) {
  FirewallEntries e;
  if (mode == "public") {
    e.is_public = true;
  } else if (mode == "allowlist") {
    e.cidr_ports = list.cidr_ports();
    e.proxy_ports = list.name_ports();
  }
  return e;
}

std::string Firewall::skeleton(bool guard_forwarding) const {
  const std::string t = layout_.table();
  const std::string svc = ipv4_str(layout_.service_addr());
  const std::string dns = std::to_string(layout_.dns_port), proxy = std::to_string(layout_.proxy_port);
  const std::string mine = layout_.uplinks.str();
  std::string deny;
  for (auto& d : always_denied()) deny += (deny.empty() ? "" : ", ") + d.net.str();
  deny += ", " + mine;
  const std::string up = "\"" + std::string(kUplinkPrefix) + "*\"";
  const std::string flows = std::to_string(layout_.max_flows);
  char mark[16], rejudge[16];
  std::snprintf(mark, sizeof mark, "0x%08x", kProxyMark);
  std::snprintf(rejudge, sizeof rejudge, "0x%08x", kRejudgeMark);
  // Only this node's sandboxes (sources in its uplink range) are judged here: another b3osd
  // on the host has a table and a range of its own. `add table` then `delete table` makes
  // the replacement one transaction whether or not a previous b3osd left the table.
  return "add table inet " + t + "\n"
         "delete table inet " + t + "\n"
         "table inet " + t + " {\n"
         "  set deny4 { type ipv4_addr; flags interval; auto-merge; elements = { " + deny + " } }\n"
         "  set public_src { type ipv4_addr; }\n"
         "  set allow_cidr { type ipv4_addr . ipv4_addr . inet_service; flags interval; }\n"
         "  set proxy_ports { type ipv4_addr . inet_service; }\n"
         // Each sandbox's connections, counted by its uplink address (ct count): at the cap a
         // new one is refused, so no sandbox can fill the host's conntrack table.
         "  set flows { type ipv4_addr; size 65535; flags dynamic; }\n"
         "  chain pre {\n"
         "    type nat hook prerouting priority dstnat; policy accept;\n"
         "    ip saddr " + mine + " ip saddr . ip daddr . tcp dport @allow_cidr return\n"
         "    ip saddr " + mine + " ip saddr . tcp dport @proxy_ports dnat ip to " + svc + ":" + proxy + "\n"
         "  }\n"
         "  chain input {\n"
         "    type filter hook input priority filter; policy accept;\n"
         "    ip saddr " + mine + " jump to_host\n"
         "  }\n"
         "  chain to_host {\n"
         "    ct state established,related accept\n"
         "    ct state new add @flows { ip saddr ct count over " + flows + " } jump refuse\n"
         "    ip daddr " + svc + " udp dport " + dns + " accept\n"
         "    ip daddr " + svc + " tcp dport " + dns + " accept\n"
         // Only connections the prerouting chain sent there: a sandbox that dials the proxy
         // itself is refused at once, like any other connect to the host.
         "    ip daddr " + svc + " tcp dport " + proxy + " ct status dnat accept\n"
         "    jump refuse\n"
         "  }\n"
         "  chain forward {\n"
         "    type filter hook forward priority filter; policy accept;\n"
         "    iifname " + up + " meta nfproto ipv6 drop\n"
         "    ip saddr " + mine + " jump egress\n"
         "    ip daddr " + mine + " ct state established,related accept\n"
         "    ip daddr " + mine + " drop\n" +
         (guard_forwarding ? "    iifname != " + up + " oifname != " + up + " drop\n" : "") +
         "  }\n"
         // Open connections pass unjudged, except those marked after a change of their
         // sandbox's policy (rejudge_connections): their packets are judged like a new one's,
         // and the mark is cleared once one is allowed.
         "  chain egress {\n"
         "    ct state established,related ct mark != " + std::string(rejudge) + " accept\n"
         "    ip daddr @deny4 jump refuse\n"
         "    ct state new add @flows { ip saddr ct count over " + flows + " } jump refuse\n"
         "    ip saddr @public_src ct mark set 0 accept\n"
         "    ip saddr . ip daddr . tcp dport @allow_cidr ct mark set 0 accept\n"
         "    jump refuse\n"
         "  }\n"
         "  chain refuse {\n"
         "    meta l4proto tcp reject with tcp reset\n"
         "    reject with icmpx admin-prohibited\n"
         "  }\n"
         // The egress proxy dials from the host: never to an address of the host itself, as
         // the kernel knows them at the moment of the connect (host_addrs.h).
         "  chain out {\n"
         "    type filter hook output priority filter; policy accept;\n"
         "    meta mark " + std::string(mark) + " fib daddr type local jump refuse\n"
         "  }\n"
         "  chain post {\n"
         "    type nat hook postrouting priority srcnat; policy accept;\n"
         "    ip saddr " + mine + " ip daddr != " + mine + " masquerade\n"
         "  }\n"
         "}\n";
}

Result<void> Firewall::install(bool guard_forwarding) {
  std::lock_guard lk(mu_);
  return nft({"nft", "-f", "-"}, skeleton(guard_forwarding), "installing the firewall table " + layout_.table());
}

std::string Firewall::transaction_json(const std::string& table, uint32_t source, const FirewallEntries& before,
                                       const FirewallEntries& after) {
  json cmds = json::array();
  element_ops(cmds, table, "delete", source, before);
  element_ops(cmds, table, "add", source, after);
  return json{{"nftables", std::move(cmds)}}.dump();
}

Result<void> Firewall::replace(uint32_t source, const FirewallEntries& before, const FirewallEntries& after) {
  if (before.empty() && after.empty()) return {};
  const std::string tx = transaction_json(layout_.table(), source, before, after);
  std::lock_guard lk(mu_);
  return nft({"nft", "-j", "-f", "-"}, tx, "setting the egress of " + ipv4_str(source));
}

void Firewall::forget_connections(uint32_t source) {
  // Exit 1 means there was nothing to forget.
  auto r = sys::run({"conntrack", "-D", "-s", ipv4_str(source)}, kNftTimeout);
  if (!r) spdlog::warn("forgetting the connections of {}: {}", ipv4_str(source), r.error().message);
}

void Firewall::rejudge_connections(uint32_t source) {
  char mark[16];
  std::snprintf(mark, sizeof mark, "0x%08x", kRejudgeMark);
  // Exit 1 means there was nothing to mark.
  auto r = sys::run({"conntrack", "-U", "-s", ipv4_str(source), "-m", mark}, kNftTimeout);
  if (!r) spdlog::warn("marking the connections of {} to be judged again: {}", ipv4_str(source), r.error().message);
}

void Firewall::uninstall() {
  std::lock_guard lk(mu_);
  (void)nft({"nft", "-f", "-"}, "add table inet " + layout_.table() + "\ndelete table inet " + layout_.table() + "\n",
            "removing the firewall table");
}

}  // namespace b3os::net
