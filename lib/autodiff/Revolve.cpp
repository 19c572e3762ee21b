// autodiff/Revolve.cpp — binomial checkpointing schedules (see the header).
#include "autodiff/Revolve.h"

#include "support/Assert.h"

#include <algorithm>
#include <array>
#include <limits>

namespace adjit::autodiff::revolve {

namespace {

constexpr int64_t kCap = std::numeric_limits<int64_t>::max() / 4;

/// C(s + r, s), saturating at kCap (callers compare it with step counts far below).
int64_t beta(int64_t s, int64_t r) {
  if (s < 0 || r < 0) return 0;
  int64_t b = 1; // C(r + i, i) after step i
  for (int64_t i = 1; i <= s; ++i) {
    if (b > kCap / (r + i)) return kCap;
    b = b * (r + i) / i;
  }
  return b;
}

/// The least r with C(s + r, s) >= steps.
int64_t repetitions(int64_t steps, int64_t s) {
  int64_t r = 0;
  while (beta(s, r) < steps) ++r;
  return r;
}

} // namespace

int64_t cost(int64_t steps, int64_t snapshots) {
  ADJIT_ASSERT(steps >= 0 && snapshots >= 1);
  if (steps <= 1) return 0;
  if (snapshots == 1) return steps > (int64_t{1} << 31) ? kCap : steps * (steps - 1) / 2; // r = steps - 1: no search
  const int64_t s = std::min(snapshots, steps), r = repetitions(steps, s);
  return r * steps - beta(s + 1, r - 1);
}

int64_t split(int64_t steps, int64_t snapshots) {
  ADJIT_ASSERT(steps >= 2 && snapshots >= 2);
  const int64_t s = std::min(snapshots, steps), r = repetitions(steps, s), best = cost(steps, s);
  auto total = [&](int64_t m) { return m + cost(steps - m, s - 1) + cost(m, s); };
  // The optimal first segment lies at one of the ends of the range that keeps
  // every step within r repetitions; checked against the closed form (and by
  // the unit test against dynamic programming).
  const std::array<int64_t, 4> candidates{beta(s, r - 1), steps - beta(s - 1, r), beta(s, r - 2), steps - beta(s - 1, r - 1)};
  for (int64_t m : candidates)
    if (m >= 1 && m < steps && total(m) == best) return m;
  for (int64_t m = 1; m < steps; ++m) // not reached for the sizes tested; correct regardless
    if (total(m) == best) return m;
  ADJIT_UNREACHABLE("revolve: no split reaches the closed-form cost");
}

Schedule schedule(int64_t steps, int64_t snapshots, bool forwardKeeps) {
  ADJIT_ASSERT(steps >= 0 && steps <= std::numeric_limits<int32_t>::max() && snapshots >= 1);
  Schedule out;
  out.reverseAt.assign(static_cast<std::size_t>(steps), -1);
  auto emit = [&](Action a, int64_t arg) {
    out.kind.push_back(static_cast<int32_t>(a));
    out.arg.push_back(static_cast<int32_t>(arg));
  };
  int64_t pos = 0; // the step whose state `state` holds (-1: none)
  auto restore = [&](int64_t slot, int64_t at) {
    if (pos != at) emit(Action::Restore, slot);
    pos = at;
  };
  auto advance = [&](int64_t to) {
    for (; pos < to; ++pos, ++out.advances) emit(Action::Advance, pos);
  };
  auto reverse = [&](int64_t t) {
    out.reverseAt[static_cast<std::size_t>(t)] = static_cast<int32_t>(out.kind.size());
    emit(Action::Reverse, t);
  };
  struct Task {
    int64_t start, len, snaps, slot;
  };
  std::vector<Task> stack;
  if (steps > 0) stack.push_back({0, steps, std::min(snapshots, steps), 0});
  while (!stack.empty()) {
    const Task t = stack.back();
    stack.pop_back();
    if (t.len == 1) {
      restore(t.slot, t.start);
      reverse(t.start);
    } else if (t.snaps == 1) {
      for (int64_t i = t.start + t.len - 1; i >= t.start; --i) {
        restore(t.slot, t.start);
        advance(i);
        reverse(i);
      }
    } else {
      const int64_t m = split(t.len, t.snaps);
      restore(t.slot, t.start);
      advance(t.start + m);
      emit(Action::Store, t.slot + 1);
      stack.push_back({t.start, m, std::min(t.snaps, m), t.slot});                             // then the left part
      stack.push_back({t.start + m, t.len - m, std::min(t.snaps - 1, t.len - m), t.slot + 1}); // the right part first
    }
  }
  if (!forwardKeeps) return out;
  // The first sweep: Advance and Store actions up to the first Restore or Reverse.
  std::size_t end = 0;
  int64_t at = 0; // the step the sweep has reached
  while (end < out.kind.size() && (out.kind[end] == static_cast<int32_t>(Action::Advance) || out.kind[end] == static_cast<int32_t>(Action::Store))) {
    if (out.kind[end] == static_cast<int32_t>(Action::Advance)) ++at;
    else out.kept.push_back(at);
    ++end;
  }
  if (out.kept.empty()) return out;
  Schedule resumed;
  resumed.kept = out.kept;
  const int64_t from = out.kept.back();
  resumed.kind.push_back(static_cast<int32_t>(Action::Restore));
  resumed.arg.push_back(static_cast<int32_t>(out.kept.size()));
  for (int64_t t = from; t < at; ++t, ++resumed.advances) {
    resumed.kind.push_back(static_cast<int32_t>(Action::Advance));
    resumed.arg.push_back(static_cast<int32_t>(t));
  }
  const auto shift = static_cast<int32_t>(resumed.kind.size()) - static_cast<int32_t>(end);
  resumed.kind.insert(resumed.kind.end(), out.kind.begin() + static_cast<std::ptrdiff_t>(end), out.kind.end());
  resumed.arg.insert(resumed.arg.end(), out.arg.begin() + static_cast<std::ptrdiff_t>(end), out.arg.end());
  resumed.reverseAt = out.reverseAt;
  for (int32_t& r : resumed.reverseAt) r += shift;
  resumed.advances += out.advances - at;
  return resumed;
}

} // namespace adjit::autodiff::revolve
