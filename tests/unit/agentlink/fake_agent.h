#pragma once
// The agent's side of a channel in agentlink's unit tests: frames read off a socket.
#include <poll.h>
#include <unistd.h>

#include <chrono>

#include "protocol/frame.h"

namespace b3os::agentlink::fake_agent {

/// Reads what arrives on `fd` into `parser` and hands each whole frame to `done` until it
/// returns true (then true) or `limit` passes or the socket ends (then false).
template <class Done>
bool read_frames(int fd, protocol::FrameParser& parser, std::chrono::milliseconds limit, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  static thread_local char buf[64 * 1024];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    parser.feed(buf, static_cast<size_t>(n));
    while (auto f = parser.next())
      if (done(*f)) return true;
  }
  return false;
}

}  // namespace b3os::agentlink::fake_agent
