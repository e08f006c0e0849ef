#pragma once
// The sandbox state machine: every change of a sandbox's State is one of these named
// transitions, each legal only from the states it lists. An illegal one is an error for the
// caller (409 sandbox_not_running, with the state named), never a silent write.
//
//                 launched            begin_pause           paused
//   creating ---------------> running -----------> pausing --------> paused
//                              ^  |  ^                |  pause_failed    |  begin_resume
//           end_checkpoint     |  |  |                v                  v
//   checkpointing <------------+  |  +------------ running <--------- resuming
//        (forks and snapshots;    |       resumed             resume_failed -> paused
//         several at once)        |
//                                 +-- stop / fail (from any live state) --> stopped | failed
//
// `Show` maps a state to the four the API knows: pausing and checkpointing are running,
// resuming is paused.

#include <string>
#include <string_view>

#include "common/result.h"
#include "daemon/store/records.h"

namespace b3os::sandbox {

using store::State;

enum class Transition {
  kLaunched,         // creating -> running
  kBeginPause,       // running -> pausing
  kPaused,           // pausing -> paused
  kPauseFailed,      // pausing -> running
  kBeginResume,      // paused -> resuming
  kResumed,          // resuming -> running
  kResumeFailed,     // resuming -> paused
  kBeginCheckpoint,  // running | checkpointing -> checkpointing
  kEndCheckpoint,    // checkpointing -> running (when the last one ends)
  kStop,             // any live state -> stopped
  kFail,             // any live state -> failed
};

std::string_view transition_name(Transition t);
/// The state `t` leads to from `from`, or a 409 naming both when `t` is not legal from it.
Result<State> next_state(State from, Transition t, const std::string& sandbox_id);
/// The status the API shows for a state: running, paused, stopped or failed.
std::string_view api_status(State s);
/// True for the states of a sandbox that holds host resources (not creating, not ended).
bool is_live(State s);

}  // namespace b3os::sandbox
