#include "tests/fakes/fake_network.h"

namespace b3os::fakes {

void FakeNetwork::fail(const std::string& verb, int times) {
  std::lock_guard lk(mu_);
  fail_[verb] += times;
}

bool FakeNetwork::should_fail(const std::string& verb) {
  ++calls_[verb];
  auto it = fail_.find(verb);
  if (it == fail_.end() || it->second == 0) return false;
  --it->second;
  return true;
}

std::map<std::string, FakeNetwork::Namespace> FakeNetwork::namespaces() const {
  std::lock_guard lk(mu_);
  return ns_;
}

std::optional<FakeNetwork::Namespace> FakeNetwork::of(const std::string& id) const {
  std::lock_guard lk(mu_);
  auto it = ns_.find(id);
  if (it == ns_.end()) return std::nullopt;
  return it->second;
}

int FakeNetwork::calls(const std::string& verb) const {
  std::lock_guard lk(mu_);
  auto it = calls_.find(verb);
  return it == calls_.end() ? 0 : it->second;
}

void FakeNetwork::restart() {
  std::lock_guard lk(mu_);
  for (auto& [id, n] : ns_) n.policy.reset();
}

Result<net::NetSlot> FakeNetwork::prepare(const std::string& sandbox_id) {
  std::lock_guard lk(mu_);
  if (should_fail("prepare")) return b3os::fail(ErrorCode::kInternal, "fake network: prepare failed");
  if (ns_.count(sandbox_id)) return b3os::fail(ErrorCode::kInternal, "fake network: " + sandbox_id + " has a namespace");
  Namespace n;
  n.slot.index = next_index_++;
  n.slot.netns = "b3s-" + sandbox_id;
  n.slot.netns_path = "/run/netns/" + n.slot.netns;
  ns_[sandbox_id] = n;
  return n.slot;
}

Result<void> FakeNetwork::activate(const std::string& sandbox_id) {
  std::lock_guard lk(mu_);
  if (should_fail("activate")) return b3os::fail(ErrorCode::kInternal, "fake network: activate failed");
  auto it = ns_.find(sandbox_id);
  if (it == ns_.end()) return b3os::fail(ErrorCode::kInternal, "fake network: no namespace for " + sandbox_id);
  it->second.active = true;
  return {};
}

Result<void> FakeNetwork::apply(const std::string& sandbox_id, const net::EgressPolicy& policy) {
  std::lock_guard lk(mu_);
  if (should_fail("apply")) return b3os::fail(ErrorCode::kInternal, "fake network: apply failed");
  auto it = ns_.find(sandbox_id);
  if (it == ns_.end()) return b3os::fail(ErrorCode::kInternal, "fake network: no namespace for " + sandbox_id);
  it->second.policy = policy;
  ++it->second.applies;
  return {};
}

void FakeNetwork::release(const std::string& sandbox_id) {
  std::lock_guard lk(mu_);
  ++calls_["release"];
  ns_.erase(sandbox_id);
}

Result<net::NetSlot> FakeNetwork::recover(const std::string& sandbox_id) {
  std::lock_guard lk(mu_);
  if (should_fail("recover")) return b3os::fail(ErrorCode::kInternal, "fake network: recover failed");
  auto it = ns_.find(sandbox_id);
  if (it == ns_.end()) return b3os::fail(ErrorCode::kInternal, "fake network: no namespace b3s-" + sandbox_id);
  return it->second.slot;
}

std::vector<std::string> FakeNetwork::list() {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (auto& [id, n] : ns_) out.push_back(id);
  return out;
}

}  // namespace b3os::fakes
