#pragma once
// The sandbox identity: HELLO on start, and IDENTITY (hostname, machine id, entropy seed)
// applied when the daemon sends it, including after a fork restored from a checkpoint.

#include <string>
#include <string_view>

#include "common/result.h"

namespace b3os::agent {

/// The HELLO payload: {"version":1,"agent":"b3os-agent 0.1","boot_id":"<random hex>"}.
std::string hello_payload();

/// Applies an IDENTITY payload: sethostname, /etc/hostname, /etc/machine-id, and the seed
/// mixed into the kernel pool. Every step is tried; the first failure is returned.
Result<void> apply_identity(std::string_view payload);

/// The IDENTITY_ACK payload for `r`: {"ok":true} or {"ok":false,"error":{...}}.
std::string identity_ack_payload(const Result<void>& r);

}  // namespace b3os::agent
