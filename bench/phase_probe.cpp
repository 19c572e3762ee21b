// bench/phase_probe.cpp — prints the machine's FMA peak now (bench/fma_probe.cpp)
// at one thread and on all hardware threads at once: bench/tables.py runs it
// before and after each benchmark, so every table's absolute times come with
// readings taken in the same minutes (the development VMs have fast and slow
// phases, and other processes may hold cores: the all-threads reading drops).
#include "fma_probe.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

/// `runs` readings of `millis` ms each on `threads` threads at once (summed
/// over the threads); returns their median.
static double reading(unsigned threads, int runs, double millis) {
  std::vector<double> v;
  for (int i = 0; i < runs; ++i) {
    std::vector<double> each(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back([&each, t, millis] { each[t] = fma_probe_gflops(millis); });
    each[0] = fma_probe_gflops(millis);
    for (auto& th : pool) th.join();
    double sum = 0;
    for (double g : each) sum += g;
    v.push_back(sum);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  const unsigned all = std::max(1u, std::thread::hardware_concurrency());
  // Short runs (median of 9 x 4 ms) read the peak of the phase (the VM's
  // speed); one long run (200 ms) reads what a thread got beside the
  // machine's other processes: below the peak when they held its core.
  const double one = reading(1, 9, 4), many = reading(all, 9, 4);
  const double oneLong = reading(1, 1, 200), manyLong = reading(all, 1, 200);
  std::printf("phase probe: FMA peak %.1f GFLOP/s (one thread, %s), %.1f GFLOP/s on %u threads at once; "
              "over 200 ms %.1f / %.1f GFLOP/s\n", one, fma_probe_isa(), many, all, oneLong, manyLong);
  return 0;
}
