// Off-CPU: what agent and collector agree on about a thread's waits. A wait is a thread leaving
// the CPU (a sched:sched_switch sample, its stack where it left) until it is back; the
// collector weighs it by its length in ns as a sample of the event `off-cpu`, its stack topped
// by a frame of module `[off-cpu]` saying what kind of wait it was (the kernel's prev_state).
// The agent folds waits on the device (agent/wait_folder.hpp) into samples of that event, in
// that shape; a recording of the switches themselves is turned into them by the collector.
#pragma once

#include <string_view>

namespace protocol {

inline constexpr std::string_view off_cpu_event_name = "off-cpu";
inline constexpr std::string_view off_cpu_module = "[off-cpu]";

// The frame a wait's kind is: "[sleeping]" (S), "[uninterruptible: I/O]" (D), "[preempted]"
// (R, R+), "[off-cpu]" when unknown, else "[off-cpu: other]".
std::string_view wait_kind(std::string_view prev_state) noexcept;

// The prev_state of a sched:sched_switch's arguments ("prev_comm=a prev_pid=1 prev_prio=120
// prev_state=S ==> next_comm=…"); empty when there is none.
std::string_view switch_prev_state(std::string_view args) noexcept;

} // namespace protocol
