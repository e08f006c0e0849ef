#pragma once
// Relay: serves the HTTP calls that code inside a sandbox makes to its model endpoint
// (http://127.0.0.1:7700/v1/infer), which the agent relays over its channel as streams. Each
// call is checked against the sandbox's grant and paid from its budget by the gateway.

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/fair_share.h"

#include "daemon/agentlink/channel.h"
#include "daemon/gateway/gateway.h"

namespace b3os::gateway {

/// The model grant of the sandbox a call comes from.
struct SandboxGrant {
  std::string project_id, budget_id;
  bool infer = false;  // the grant has the infer:run scope
};

class Relay {
 public:
  /// Finds the grant of a live sandbox (nullopt: the sandbox is not in service).
  using Lookup = std::function<std::optional<SandboxGrant>(const std::string& sandbox_id)>;
  /// `gw` nullptr: calls get 503.
  Relay(Gateway* gw, Lookup lookup);

  /// Takes one stream the agent of sandbox `id` opened. Called on the channel's reader
  /// thread: hands the call to a thread of its own at once (at most kMaxCalls at a time).
  void serve(const std::string& id, std::shared_ptr<agentlink::Stream> st);

  static constexpr int kMaxCalls = 512;          // model calls from all sandboxes at once
  static constexpr int kMaxCallsPerSandbox = 64;  // of one sandbox
  static constexpr int kFloorPerSandbox = 4;      // a sandbox can count on, whatever others do

  /// Takes one call of sandbox `id` from the node's share, or says why not (serve() does; public
  /// for tests).
  std::optional<std::string> take(const std::string& id);
  void give(const std::string& id);
  /// The calls sandbox `id` has in flight.
  size_t calls_of(const std::string& id);

 private:
  void relay_one(const std::string& id, const std::shared_ptr<agentlink::Stream>& st);

  Gateway* gw_;
  Lookup lookup_;
  // The node's kMaxCalls shared out: each sandbox's first calls (its floor) come out of a
  // reserve that others' calls beyond their floors never take, so one sandbox (or a few) with
  // many calls in flight cannot leave a quiet one without (common/fair_share.h).
  std::mutex share_mu_;
  FairShare<std::string> share_{FairShare<std::string>::for_node(kMaxCalls, kMaxCallsPerSandbox, kFloorPerSandbox)};
};

}  // namespace b3os::gateway
