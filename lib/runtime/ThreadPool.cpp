// runtime/ThreadPool.cpp — a pool of threads that sleep on a condition variable
// between jobs; one job at a time, which the calling thread works on too.
// Threads are started on demand, up to what calls ask for, and never stopped
// (kernels may run during static destruction).
#include "runtime/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

namespace adjit::runtime {
namespace {

/// Chunks [begin, end) of a job, claimed from the front through `next`; on a
/// cache line of its own, so that claims from different ranges never meet.
struct alignas(64) Range {
  std::atomic<int64_t> next{0};
  int64_t end = 0;
};

/// Most ranges a job is cut into; with more threads, several share one.
constexpr int kMaxRanges = 16;

/// One parallel_for. Thread t of the job (the caller is 0) first runs the
/// chunks of range t, an even contiguous share, in order; then it takes
/// chunks from the other ranges that are not done. `finished` counts the
/// chunks done; `users` the pool threads still holding a pointer to the job.
struct Job {
  void (*fn)(void*, int64_t);
  void* ctx;
  int64_t chunks;
  int threads = 0; ///< the caller's and the pool's that may work on it
  int helpers = 0; ///< pool threads wanted
  int ranges = 0;
  Range range[kMaxRanges];
  std::atomic<int64_t> finished{0};
  std::atomic<int> users{0};
};

/// How long an idle pool thread spins before it sleeps: some 0.3-1 ms
/// (a pause is tens of cycles). A kernel's next split loop usually comes
/// sooner; one that finds the thread asleep waits tens of microseconds for it.
constexpr int kSpins = 200000;

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class Pool {
public:
  /// Runs the job with up to `threads` threads (the caller's included);
  /// false when another job holds the pool (the caller then runs it alone).
  bool run(Job& job, int threads) {
    // The mutex is only ever held for a few instructions; a job in progress
    // (another caller's) is what sends this one to run alone.
    std::unique_lock lock(mutex_);
    if (current_) return false;
    job.threads = threads;
    job.helpers = threads - 1;
    job.ranges = std::min(threads, kMaxRanges);
    const int64_t each = job.chunks / job.ranges, extra = job.chunks % job.ranges; // the first `extra` get one more
    for (int r = 0; r < job.ranges; ++r) {
      job.range[r].next.store(each * r + std::min<int64_t>(r, extra), std::memory_order_relaxed);
      job.range[r].end = each * (r + 1) + std::min<int64_t>(r + 1, extra);
    }
    while (static_cast<int>(workers_) < job.helpers) {
      std::thread(&Pool::serve, this).detach();
      ++workers_;
    }
    keepOffCallersCpu();
    current_ = &job;
    generation_.fetch_add(1, std::memory_order_release);
    lock.unlock();
    wake_.notify_all();
    work(job, 0);
    while (job.finished.load(std::memory_order_acquire) < job.chunks) std::this_thread::yield();
    lock.lock();
    current_ = nullptr; // no thread joins the job from now on
    lock.unlock();
    while (job.users.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    return true;
  }

  static thread_local bool inPool;

private:
#if defined(__linux__)
  /// Keeps the pool's threads off the CPU the caller runs on. Woken while
  /// the machine's other CPUs look busy (on a VM: a vCPU the hypervisor
  /// descheduled while it idled), a pool thread is queued on the waking
  /// thread's CPU, where it cannot run until that thread's time slice ends:
  /// the caller then did every chunk itself, and a pool thread that finally
  /// ran there spun beside it (0.5 ms loops took 4-16 ms; on the 2-core
  /// development VM after 20 ms idle, half the jobs ran without their pool
  /// thread). A pool thread allowed every CPU but the caller's is woken on
  /// another one. The masks change only when the caller has moved to another
  /// CPU since the last job; a failing sched_setaffinity (a sandbox that
  /// forbids it) leaves the thread where the scheduler puts it.
  void keepOffCallersCpu() {
    const int cpu = sched_getcpu();
    if (cpu < 0 || cpu == avoided_ || !CPU_ISSET(cpu, &allowed_) || CPU_COUNT(&allowed_) < 2) return;
    avoided_ = cpu;
    for (pid_t tid : tids_) keepOff(tid);
  }
  /// Allows thread `tid` every CPU of the process but avoided_ (under mutex_).
  void keepOff(pid_t tid) const {
    if (avoided_ < 0) return;
    cpu_set_t mask = allowed_;
    CPU_CLR(avoided_, &mask);
    sched_setaffinity(tid, sizeof mask, &mask);
  }
  /// The CPUs the process may run on (its main thread's mask), read once.
  cpu_set_t allowed_ = [] {
    cpu_set_t m;
    if (sched_getaffinity(getpid(), sizeof m, &m) != 0) CPU_ZERO(&m);
    return m;
  }();
  int avoided_ = -1;
  std::vector<pid_t> tids_;
#else
  void keepOffCallersCpu() {}
#endif

  /// Runs the chunks of thread `me`'s range, then any left in the others.
  /// Each thread's share is the same part of every job with the same number
  /// of chunks: consecutive loops over the same rows keep them on one core,
  /// which then rewrites only lines it holds. (On this 2-core VM, in the
  /// phases where moving lines between its cores is slow, 256 KB written by
  /// one core and read by the other takes 8.3 us, against 3.2 us in other
  /// phases and 2.8-3.7 us when one core does both.) Chunks claimed from one
  /// shared counter went to the threads in a different mix each time.
  /// Counters in separate ranges on lines of their own also keep the threads
  /// from taking turns on one line (one shared counter claimed per chunk made
  /// a 1,000,000-element gradient in 1,024 chunks 1.2x faster on two threads,
  /// against 1.9x split by hand).
  static void work(Job& job, int me) {
    int64_t done = 0;
    for (int k = 0; k < job.ranges; ++k) {
      Range& r = job.range[(me + k) % job.ranges];
      for (int64_t c = r.next.fetch_add(1, std::memory_order_relaxed); c < r.end; c = r.next.fetch_add(1, std::memory_order_relaxed)) {
        job.fn(job.ctx, c);
        ++done;
      }
    }
    if (done) job.finished.fetch_add(done, std::memory_order_release);
  }

  void serve() {
    inPool = true;
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
#if defined(__linux__)
    tids_.push_back(gettid()); // after the job that started this thread set avoided_
    keepOff(0);
#endif
    for (;;) {
      // Spin a while before sleeping: a kernel's loops come in quick
      // succession, and waking a sleeping thread costs tens of microseconds.
      lock.unlock();
      for (int i = 0; i < kSpins && generation_.load(std::memory_order_acquire) == seen; ++i) pause();
      lock.lock();
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      seen = generation_.load(std::memory_order_relaxed);
      Job* job = current_;
      if (!job || job->helpers <= 0) continue;
      const int me = job->threads - job->helpers--; // 1, 2, ...
      job->users.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      work(*job, me);
      job->users.fetch_sub(1, std::memory_order_release);
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  Job* current_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  unsigned workers_ = 0;
};

thread_local bool Pool::inPool = false;

Pool& pool() {
  static Pool* p = new Pool; // never destroyed: its threads outlive main
  return *p;
}

thread_local int callThreads = 0; // 0: defaultThreads()

} // namespace

int defaultThreads() {
  static const int n = [] {
    if (const char* e = std::getenv("ADJIT_NUM_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(e, &end, 10);
      if (end != e && *end == '\0' && v >= 1 && v <= 1024) return static_cast<int>(v);
      std::fprintf(stderr, "adjit: warning: ADJIT_NUM_THREADS='%s' ignored: expected an integer from 1 to 1024\n", e);
    }
#if defined(__linux__)
    // The CPUs this process may run on (taskset, a container's cpuset), as
    // OpenMP counts them: more threads than that would share CPUs.
    cpu_set_t allowed;
    if (sched_getaffinity(getpid(), sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
#endif
    const unsigned hw = std::thread::hardware_concurrency();
    return hw ? static_cast<int>(hw) : 1;
  }();
  return n;
}

CallThreads::CallThreads(int threads) : saved_(callThreads) { callThreads = threads; }
CallThreads::~CallThreads() { callThreads = saved_; }

} // namespace adjit::runtime

extern "C" int64_t adjit_parallel_threads() noexcept {
  using namespace adjit::runtime;
  return Pool::inPool ? 1 : (callThreads > 0 ? callThreads : defaultThreads());
}

extern "C" void adjit_parallel_for(void (*fn)(void*, int64_t), void* ctx, int64_t chunks) noexcept {
  using namespace adjit::runtime;
  const int threads = std::min<int64_t>(adjit_parallel_threads(), chunks);
  if (threads > 1 && !Pool::inPool) {
    Job job;
    job.fn = fn;
    job.ctx = ctx;
    job.chunks = chunks; // threads, helpers and ranges: set by run
    if (pool().run(job, threads)) return;
  }
  for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
}
