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

/// The median of 9 readings of 4 ms each, on `threads` threads at once (summed).
static double reading(unsigned threads) {
  std::vector<double> v;
  for (int i = 0; i < 9; ++i) {
    std::vector<double> each(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back([&each, t] { each[t] = fma_probe_gflops(4); });
    each[0] = fma_probe_gflops(4);
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
  const double one = reading(1);
  std::printf("phase probe: FMA peak %.1f GFLOP/s (one thread, %s), %.1f GFLOP/s on %u threads at once\n", one,
              fma_probe_isa(), reading(all), all);
  return 0;
}
