#pragma once
// FakeNetwork: an in-memory stand-in for the node's sandbox networks (net::Network), for unit
// tests of the sandbox module: namespaces are entries in a map, policies are remembered as
// applied, and any verb can be made to fail, so a test can break every step and see what is
// left behind.

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/net/network.h"

namespace b3os::fakes {

class FakeNetwork : public net::Network {
 public:
  struct Namespace {
    net::NetSlot slot;
    bool active = false;
    std::optional<net::EgressPolicy> policy;
    int applies = 0;
  };
  /// The next `times` calls of `verb` (prepare, activate, apply, recover) fail.
  void fail(const std::string& verb, int times = 1);
  /// Namespaces there are now, by sandbox id.
  std::map<std::string, Namespace> namespaces() const;
  std::optional<Namespace> of(const std::string& id) const;
  int calls(const std::string& verb) const;
  /// Forgets what was applied (as b3osd's restart makes the firewall table anew); namespaces stay.
  void restart();

  Result<net::NetSlot> prepare(const std::string& sandbox_id) override;
  Result<void> activate(const std::string& sandbox_id) override;
  Result<void> apply(const std::string& sandbox_id, const net::EgressPolicy& policy) override;
  void release(const std::string& sandbox_id) override;
  Result<net::NetSlot> recover(const std::string& sandbox_id) override;
  std::vector<std::string> list() override;
  std::string resolv_conf() const override { return "/fake/resolv.conf"; }

 private:
  bool should_fail(const std::string& verb);
  mutable std::mutex mu_;
  std::map<std::string, Namespace> ns_;
  std::map<std::string, int> fail_, calls_;
  std::map<std::string, bool> known_;  // recover() finds what prepare made before a restart
  int next_index_ = 1;
};

}  // namespace b3os::fakes
