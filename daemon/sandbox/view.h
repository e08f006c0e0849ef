#pragma once
// The API objects built from typed records (pure; unit-tested): the sandbox object of the
// spec, with b3os's extensions, and the snapshot object.

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "daemon/store/records.h"

namespace b3os::sandbox {

class PortUrls;

/// Metered use: vCPU while running, memory while alive (paused included).
struct Usage {
  int64_t vcpu_ms = 0;
  int64_t gib_ms = 0;
};
Usage usage_of(const store::SandboxRecord& r, int64_t now_ms);

/// The sandbox object as of `now_ms`. `spent_usd`: what its grant's budget has spent.
/// `urls`: where public ports' URLs point (null: every url is null).
nlohmann::json sandbox_object(const store::SandboxRecord& r, int64_t now_ms, std::optional<double> spent_usd,
                              const PortUrls* urls = nullptr);
nlohmann::json snapshot_object(const store::SnapshotRecord& r);

}  // namespace b3os::sandbox
