// bench/compare.h — like-with-like timing for adjit_bench: the sides of a
// comparison run in turn, round after round, in one process, so the
// machine's slow and fast phases (minutes long on the development VMs) hit
// every side alike; a ratio is reported with the spread of its per-round values.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

/// Median, quartiles and range of a sample (quartiles by nearest rank).
struct Spread {
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
};

inline Spread spreadOf(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<std::size_t>(q * double(v.size() - 1) + 0.5)]; };
  return {at(0.5), at(0.25), at(0.75), v.front(), v.back()};
}

/// "0.91x [0.89-0.93]": a ratio's median and quartiles.
inline std::string ratioText(const Spread& s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%5.2fx [%.2f-%.2f]", s.median, s.q1, s.q3);
  return buf;
}

/// One side of a comparison: `round` runs it once per round and returns the
/// round's value (a time in ms, or a probe's reading).
struct Side {
  std::function<double()> round;
  /// Uses a thread pool (adjit's or OpenMP's). An idle pool thread spins a
  /// while (adjit's some 0.3-1 ms, libgomp's longer) before it sleeps, and a
  /// spinning thread of one runtime takes the core the other's threads
  /// need: a pause follows such a side's batch.
  bool pooled = false;
  std::vector<double> values; ///< one per round
};

/// A round of `calls` calls of fn, the first untimed (it wakes pool threads
/// and brings this side's data into cache: what a program calling fn again
/// and again sees); the mean time of the others in ms.
inline std::function<double()> batchOf(std::function<void()> fn, int calls = 3) {
  return [fn = std::move(fn), calls] {
    fn();
    const auto t0 = Clock::now();
    for (int i = 1; i < calls; ++i) fn();
    return msSince(t0) / (calls - 1);
  };
}

/// Runs `rounds` rounds of every side in turn (the order reversed every other
/// round, so no side always follows the same one), pausing after pooled sides.
inline void interleave(const std::vector<Side*>& sides, int rounds) {
  constexpr auto kPause = std::chrono::milliseconds(20);
  std::this_thread::sleep_for(kPause); // pools left spinning by what ran before
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < sides.size(); ++i) {
      Side& s = *sides[r % 2 ? sides.size() - 1 - i : i];
      s.values.push_back(s.round());
      if (s.pooled) std::this_thread::sleep_for(kPause);
    }
}

/// Per-round ratios a / b of two sides run in the same rounds.
inline Spread ratioOf(const Side& a, const Side& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.values.size() && i < b.values.size(); ++i) r.push_back(a.values[i] / b.values[i]);
  return spreadOf(r);
}

inline double median(const Side& s) { return spreadOf(s.values).median; }

} // namespace bench
