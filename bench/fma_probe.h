// bench/fma_probe.h — the machine's measured one-thread FMA peak (fma_probe.cpp).
#pragma once

/// GFLOP/s of one thread running independent fused multiply-adds from
/// registers for about `millis` ms, at the widest vector width the build
/// targets (-march=native: the host's). The first call calibrates; calls
/// from several threads at once measure what the machine gives each.
double fma_probe_gflops(double millis);

/// The instruction set the probe runs, e.g. "AVX-512, 512-bit FMA".
const char* fma_probe_isa();
