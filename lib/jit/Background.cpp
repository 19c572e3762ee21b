// jit/Background.cpp — the JIT's background thread (Background.h).
#include "jit/Background.h"

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

namespace adjit::engine::background {
namespace {

struct Worker {
  std::mutex m;
  std::condition_variable wake, idle;
  std::deque<std::function<void(bool)>> jobs;
  bool started = false, exiting = false, paused = false;
  uint64_t submitted = 0, finished = 0;
  std::thread thread;
};

/// Never destroyed, like the JIT it serves: kernels (and their jobs) may be
/// created and dropped during static destruction.
Worker& worker() {
  static auto* w = new Worker;
  return *w;
}

void stopAtExit();

void loop(Worker& w) {
  std::unique_lock lock(w.m);
  bool first = true;
  for (;;) {
    w.wake.wait(lock, [&] { return w.exiting || (!w.paused && !w.jobs.empty()); });
    if (w.jobs.empty()) return; // exiting, nothing left
    std::function<void(bool)> job = std::move(w.jobs.front());
    w.jobs.pop_front();
    const bool exiting = w.exiting;
    lock.unlock();
    job(exiting);
    job = nullptr; // what it holds (LLVM modules, a kernel's last reference) goes outside the lock
    // Registered again after the first job: what LLVM set up lazily for it
    // (function-local statics of the code generator) is then destroyed
    // after the thread is joined, not while a job may still use it.
    if (first && !exiting) std::atexit(stopAtExit);
    first = false;
    lock.lock();
    ++w.finished;
    w.idle.notify_all();
  }
}

/// Registered with std::atexit when the thread starts: what the thread
/// needs was set up before (the JIT, the target, the disk cache directory),
/// so it is destroyed after this returns. Queued jobs run with `exiting`
/// (most return at once); the job running finishes its code generation.
/// Runs once however often it was registered.
void stopAtExit() {
  Worker& w = worker();
  {
    std::lock_guard lock(w.m);
    w.exiting = true;
    w.paused = false;
  }
  w.wake.notify_all();
  if (w.thread.joinable()) w.thread.join();
}

} // namespace

void submit(std::function<void(bool exiting)> job) {
  Worker& w = worker();
  {
    std::lock_guard lock(w.m);
    if (!w.exiting) {
      if (!w.started) {
        w.started = true;
        w.thread = std::thread(loop, std::ref(w));
        std::atexit(stopAtExit);
      }
      w.jobs.push_back(std::move(job));
      ++w.submitted;
      job = nullptr;
    }
  }
  if (job) return job(true); // submitted during exit: the thread may be gone
  w.wake.notify_one();
}

void drain() {
  Worker& w = worker();
  std::unique_lock lock(w.m);
  const uint64_t target = w.submitted;
  w.idle.wait(lock, [&] { return w.finished >= target || w.exiting; });
}

void testing::pause(bool paused) {
  Worker& w = worker();
  {
    std::lock_guard lock(w.m);
    w.paused = paused;
  }
  w.wake.notify_all();
}

} // namespace adjit::engine::background
