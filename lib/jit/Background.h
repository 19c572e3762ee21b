// jit/Background.h — one thread that runs the JIT's background work (the
// optimised tier's code generation, Engine.cpp) in the order it was queued,
// and is stopped and joined at exit.
#pragma once

#include <functional>

namespace adjit::engine::background {

/// Queues `job` for the background thread (started on first use). A job
/// runs once: with `exiting` false in the normal course, or with `exiting`
/// true when the process exits before it started (std::exit, or returning
/// from main), where it should finish quickly (a job whose result is stored
/// on disk may still compute it). Jobs must not throw.
void submit(std::function<void(bool exiting)> job);

/// Blocks until every job queued so far has run (for tests and benchmarks).
void drain();

namespace testing {
/// While paused, the background thread starts no new job (tests hold the
/// optimised tier back to see the first tier run). Unpaused at exit.
void pause(bool paused);
} // namespace testing

} // namespace adjit::engine::background
