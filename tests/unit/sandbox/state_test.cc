// The state machine: each transition is legal only from the states it names.
#include "daemon/sandbox/state.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace b3os::sandbox {
namespace {

const std::vector<State> kAll = {State::kCreating, State::kRunning, State::kPausing,  State::kPaused,
                                 State::kResuming, State::kCheckpointing, State::kStopped, State::kFailed};

TEST(StateMachine, EachTransitionIsLegalOnlyFromItsStates) {
  const std::map<Transition, std::pair<std::set<State>, State>> want = {
      {Transition::kLaunched, {{State::kCreating}, State::kRunning}},
      {Transition::kBeginPause, {{State::kRunning}, State::kPausing}},
      {Transition::kPaused, {{State::kPausing}, State::kPaused}},
      {Transition::kPauseFailed, {{State::kPausing}, State::kRunning}},
      {Transition::kBeginResume, {{State::kPaused}, State::kResuming}},
      {Transition::kResumed, {{State::kResuming}, State::kRunning}},
      {Transition::kResumeFailed, {{State::kResuming}, State::kPaused}},
      {Transition::kBeginCheckpoint, {{State::kRunning, State::kCheckpointing}, State::kCheckpointing}},
      {Transition::kEndCheckpoint, {{State::kCheckpointing}, State::kRunning}},
      {Transition::kStop,
       {{State::kRunning, State::kPausing, State::kPaused, State::kResuming, State::kCheckpointing}, State::kStopped}},
      {Transition::kFail,
       {{State::kRunning, State::kPausing, State::kPaused, State::kResuming, State::kCheckpointing}, State::kFailed}},
  };
  for (auto& [t, rule] : want) {
    for (State from : kAll) {
      auto next = next_state(from, t, "sbx_x");
      if (rule.first.count(from)) {
        ASSERT_TRUE(next) << transition_name(t) << " from " << store::state_name(from);
        EXPECT_EQ(*next, rule.second) << transition_name(t);
      } else {
        ASSERT_FALSE(next) << transition_name(t) << " from " << store::state_name(from) << " should be refused";
        EXPECT_EQ(next.error().code, ErrorCode::kSandboxNotRunning);
        EXPECT_NE(next.error().message.find("sbx_x"), std::string::npos);
        EXPECT_NE(next.error().message.find(std::string(transition_name(t))), std::string::npos);
      }
    }
  }
}

TEST(StateMachine, AnEndedSandboxNeverMovesAgain) {
  for (State end : {State::kStopped, State::kFailed})
    for (int t = 0; t <= static_cast<int>(Transition::kFail); ++t)
      EXPECT_FALSE(next_state(end, static_cast<Transition>(t), "sbx_x"));
}

TEST(StateMachine, TheApiSeesFourStatuses) {
  EXPECT_EQ(api_status(State::kPausing), "running");
  EXPECT_EQ(api_status(State::kCheckpointing), "running");
  EXPECT_EQ(api_status(State::kResuming), "paused");
  EXPECT_EQ(api_status(State::kPaused), "paused");
  EXPECT_EQ(api_status(State::kStopped), "stopped");
  EXPECT_EQ(api_status(State::kFailed), "failed");
  for (State s : kAll) EXPECT_EQ(store::state_from_name(store::state_name(s)), s);
}

}  // namespace
}  // namespace b3os::sandbox
