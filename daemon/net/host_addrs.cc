#include "daemon/net/host_addrs.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

namespace b3os::net {

std::vector<uint32_t> local_ipv4_addresses() {
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    spdlog::warn("network: cannot list the host's addresses (getifaddrs): {}", std::strerror(errno));
    return out;
  }
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET)
      out.push_back(ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr));
  }
  ::freeifaddrs(list);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void HostAddresses::refresh_locked() {
  auto fresh = local_ipv4_addresses();
  // A failed read keeps what was known rather than forget every address.
  if (!fresh.empty() || !read_) addrs_ = std::move(fresh);
  read_at_ = std::chrono::steady_clock::now();
  read_ = true;
}

void HostAddresses::refresh() {
  std::lock_guard lk(mu_);
  refresh_locked();
}

bool HostAddresses::is_local(uint32_t ip) {
  std::lock_guard lk(mu_);
  if (!read_ || std::chrono::steady_clock::now() - read_at_ >= max_age_) refresh_locked();
  return std::binary_search(addrs_.begin(), addrs_.end(), ip);
}

}  // namespace b3os::net
