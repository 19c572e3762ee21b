// bench/phase_probe.cpp — prints the machine's one-thread FMA peak now
// (bench/fma_probe.cpp): bench/tables.py runs it before and after each
// benchmark, so every table's absolute times come with the reading taken in
// the same minutes (the development VMs have fast and slow phases).
#include "fma_probe.h"

#include <algorithm>
#include <cstdio>
#include <vector>

int main() {
  std::vector<double> v;
  for (int i = 0; i < 9; ++i) v.push_back(fma_probe_gflops(4));
  std::sort(v.begin(), v.end());
  std::printf("phase probe: FMA peak %.1f GFLOP/s (one thread, %s)\n", v[v.size() / 2], fma_probe_isa());
  return 0;
}
