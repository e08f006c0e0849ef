// libFuzzer target playing a hostile agent against b3osd's side of the channel
// (daemon/agentlink/channel.cc): root in a sandbox may replace its agent and write any bytes.
// Whatever arrives, the channel must neither crash (deep JSON, frames for streams never
// opened, floods, wrong lengths) nor hang: once the agent's end closes, the channel closes
// within seconds and its streams hear of it. The daemon's side opens two streams first and
// reads what they deliver as a consumer would, granting credit back.

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "common/unique_fd.h"
#include "daemon/agentlink/channel.h"

namespace {

using b3os::UniqueFd;
using b3os::agentlink::AgentChannel;
using b3os::agentlink::Stream;

struct Closed {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

void drain(const std::shared_ptr<Stream>& s) {
  if (!s) return;
  for (int i = 0; i < 100000; ++i) {
    auto f = s->next(std::chrono::steady_clock::now());
    if (!f) return;
    if (b3os::protocol::is_data_type(f->type)) s->grant(static_cast<uint32_t>(f->payload.size()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ::signal(SIGPIPE, SIG_IGN);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) return 0;
  UniqueFd agent(sp[1]);
  auto closed = std::make_shared<Closed>();
  auto ch = AgentChannel::start(
      UniqueFd(sp[0]), "fuzz",
      [closed](const std::string&) {
        std::lock_guard lk(closed->mu);
        closed->done = true;
        closed->cv.notify_all();
      },
      nullptr, [](bool, bool) {});
  std::shared_ptr<Stream> s1, s2;
  if (auto s = ch->open({{"op", "exec"}})) s1 = *s;
  if (auto s = ch->open({{"op", "file_read"}})) s2 = *s;
  // The hostile bytes, then the agent's end goes away.
  size_t off = 0;
  while (off < size) {
    const ssize_t w = ::write(agent.get(), data + off, size - off);
    if (w <= 0) break;  // the channel closed its end (a violation)
    off += static_cast<size_t>(w);
    drain(s1);
    drain(s2);
  }
  drain(s1);
  drain(s2);
  agent.reset();
  {
    std::unique_lock lk(closed->mu);
    if (!closed->cv.wait_for(lk, std::chrono::seconds(10), [&] { return closed->done; })) std::abort();  // hung
  }
  drain(s1);
  drain(s2);
  s1.reset();
  s2.reset();
  ch.reset();
  return 0;
}
