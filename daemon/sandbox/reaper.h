#pragma once
// Reaper: one thread that ends (or, with on_idle: pause, pauses) sandboxes whose timeout_s
// passed with no API activity, and fails those whose agent stopped answering. It decides from a copy of each record and acts outside every
// lock, so a slow runtime call for one sandbox holds up no request.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "daemon/sandbox/lifecycle.h"

namespace b3os::sandbox {

class Reaper {
 public:
  Reaper(Registry& registry, Lifecycle& lifecycle, std::chrono::milliseconds quiet, std::chrono::milliseconds unanswered)
      : registry_(registry), lifecycle_(lifecycle), quiet_(quiet), unanswered_(unanswered) {}
  ~Reaper() { stop(); }
  void start();
  void stop();
  /// One pass over the live sandboxes at `now_ms` (the thread calls it every 500 ms).
  void sweep(int64_t now_ms);


 private:
  bool alive(const std::shared_ptr<LiveSandbox>& s);
  Registry& registry_;
  Lifecycle& lifecycle_;
  const std::chrono::milliseconds quiet_;       // silence before a PING
  const std::chrono::milliseconds unanswered_;  // an unanswered PING that fails the sandbox
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
  /// The collectors of fetched roots and of the object store's shared roots: a thread of
  /// their own, so that an object store slow to answer never delays the sweep.
  std::thread collector_;
};

}  // namespace b3os::sandbox
