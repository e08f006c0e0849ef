#include "daemon/sandbox/state.h"

#include <array>
#include <initializer_list>

namespace b3os::sandbox {

namespace {

struct Rule {
  Transition t;
  std::string_view name;
  std::initializer_list<State> from;
  State to;
};

constexpr auto kLive = {State::kRunning, State::kPausing, State::kPaused, State::kResuming, State::kCheckpointing};

// The one place where the legal transitions are written down.
const std::array<Rule, 11> kRules = {{
    {Transition::kLaunched, "launched", {State::kCreating}, State::kRunning},
    {Transition::kBeginPause, "begin_pause", {State::kRunning}, State::kPausing},
    {Transition::kPaused, "paused", {State::kPausing}, State::kPaused},
    {Transition::kPauseFailed, "pause_failed", {State::kPausing}, State::kRunning},
    {Transition::kBeginResume, "begin_resume", {State::kPaused}, State::kResuming},
    {Transition::kResumed, "resumed", {State::kResuming}, State::kRunning},
    {Transition::kResumeFailed, "resume_failed", {State::kResuming}, State::kPaused},
    {Transition::kBeginCheckpoint, "begin_checkpoint", {State::kRunning, State::kCheckpointing}, State::kCheckpointing},
    {Transition::kEndCheckpoint, "end_checkpoint", {State::kCheckpointing}, State::kRunning},
    {Transition::kStop, "stop", kLive, State::kStopped},
    {Transition::kFail, "fail", kLive, State::kFailed},
}};

const Rule& rule(Transition t) {
  for (auto& r : kRules)
    if (r.t == t) return r;
  return kRules.back();
}

std::string what_is_happening(State s) {
  switch (s) {
    case State::kCreating: return "is still being created";
    case State::kPausing: return "is being paused";
    case State::kPaused: return "is paused; resume it first";
    case State::kResuming: return "is being resumed";
    case State::kCheckpointing: return "is being forked or snapshotted";
    case State::kStopped: return "is stopped";
    case State::kFailed: return "has failed";
    case State::kRunning: return "is running";
  }
  return "is in an unknown state";
}

}  // namespace

std::string_view transition_name(Transition t) { return rule(t).name; }

Result<State> next_state(State from, Transition t, const std::string& sandbox_id) {
  const Rule& r = rule(t);
  for (State s : r.from)
    if (s == from) return r.to;
  return fail(ErrorCode::kSandboxNotRunning,
              "sandbox " + sandbox_id + " " + what_is_happening(from) + " (cannot " + std::string(r.name) + ")");
}

std::string_view api_status(State s) {
  // kCreating is never shown (a sandbox is visible from running on); it would read "creating".
  return store::state_name(store::settled(s));
}

bool is_live(State s) {
  for (State l : kLive)
    if (l == s) return true;
  return false;
}

}  // namespace b3os::sandbox
