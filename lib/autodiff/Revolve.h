// autodiff/Revolve.h — Griewank-Walther binomial checkpointing schedules.
//
// Reversing l steps of a loop with s snapshots (one of which holds the state
// at the first step) takes at least
//     T(l, s) = r * l - C(s + r, s + 1)      forward steps,
// where r is the least number of repetitions with C(s + r, s) >= l
// (Griewank and Walther, "Algorithm 799: revolve", ACM TOMS 2000). The
// schedule reaches it by treeverse: advance m steps, take a snapshot, reverse
// the l - m steps on the right with s - 1 snapshots, then the m steps on the
// left with s; m is one of a few candidates around C(s + r - 1, s), checked
// against the closed form.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace adjit::autodiff::revolve {

/// The fewest forward steps that reverse `steps` steps with `snapshots` >= 1
/// snapshots, the state at the first step being one of them.
int64_t cost(int64_t steps, int64_t snapshots);

/// The first segment of an optimal schedule: advance this many steps before
/// taking the next snapshot (1 <= result < steps; steps >= 2, snapshots >= 2).
int64_t split(int64_t steps, int64_t snapshots);

/// What the backward does, in order, with `state` the carry
/// being recomputed and `slot` in [0, snapshots) (slot 0 holds the state at
/// step 0, given).
enum class Action : int32_t {
  Advance = 0, ///< state = body(state) at step `arg`
  Store = 1,   ///< snapshot[arg] = state
  Restore = 2, ///< state = snapshot[arg]
  Reverse = 3, ///< the body's VJP at step `arg` from state (the state at that step)
};

struct Schedule {
  std::vector<int32_t> kind, arg;  ///< one entry per action
  std::vector<int32_t> reverseAt;  ///< reverseAt[t]: the action that reverses step t
  std::vector<int64_t> kept;       ///< kept[j]: the step whose state the forward stores in slot j + 1
  int64_t advances = 0;            ///< forward steps the schedule recomputes
};

/// The schedule reversing `steps` steps with `snapshots` snapshots, built
/// with an explicit stack. Its first sweep advances from step 0 to the last
/// step, storing snapshots on the way; with `forwardKeeps` the forward pass
/// stores those (`kept`) and the schedule starts from the last of them instead.
/// `advances` is then cost(steps, snapshots) less the last kept step, else the cost.
Schedule schedule(int64_t steps, int64_t snapshots, bool forwardKeeps = false);

} // namespace adjit::autodiff::revolve
