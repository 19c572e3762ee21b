// test/unit/test_jit.cpp — adjit::jit: signatures, caching, structures, threads,
// nested calls, inspection of compilation stages.
#include "Check.h"

#include "jit/Background.h"
#include "jit/Engine.h"
#include "runtime/ThreadPool.h"
#include "jit/Partition.h"

#include <llvm/AsmParser/Parser.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace adjit;
using namespace adjit::test;

TEST_CASE("compiles once per signature") {
  int traces = 0;
  auto f = jit([&](Tensor x) { ++traces; return x * 2; });
  CHECK(f(Array(1.0f)).item<float>() == 2.0f);
  CHECK(f(Array(3.0f)).item<float>() == 6.0f);
  CHECK(traces == 1);
  CHECK(f(Array(3.0)).item<double>() == 6.0);
  CHECK(f(f32({1, 2})).to_vector<float>() == std::vector<float>{2, 4});
  CHECK(traces == 3);
  CHECK(f.cache_size() == 3);
}

TEST_CASE("a kernel cache hit runs neither adjit's passes nor LLVM") {
  auto f = [](Tensor x) { return sin(x) * 3.0f + 1.0f; };
  auto a = jit(f);
  const Array x = f32({1, 2});
  const Array first = a(x);
  const engine::Counters before = engine::counters();
  std::vector<CompileEvent> events;
  set_compile_listener([&](const CompileEvent& e) { events.push_back(e); });
  auto b = jit(f); // another jitted function tracing to the same IR
  const Array second = b(x);
  set_compile_listener({});
  b(f32({1, 2, 3})); // another signature: compiled, not reported
  const engine::Counters after = engine::counters();
  REQUIRE(events.size() == 1);
  CHECK(events[0].cache == CompileEvent::Cache::memory_hit);
  CHECK(events[0].signature == "(f32[2]) -> (f32[2])");
  CHECK(events[0].llvm_ms == 0);
  CHECK(after.memoryHits == before.memoryHits + 1);
  // The f32[3] signature only: compiled, or found in the disk cache (which
  // earlier runs of this test may have filled).
  CHECK(after.passRuns + after.diskHits == before.passRuns + before.diskHits + 1);
  CHECK(after.llvmRuns + after.diskHits == before.llvmRuns + before.diskHits + 1);
  CHECK(second.to_vector<float>() == first.to_vector<float>());
}

TEST_CASE("C++ scalars of each dtype as arguments") {
  auto f = jit([](Tensor a, Tensor b, Tensor c, Tensor d) {
    return std::make_tuple(a + 1, b + 1, c + 1, d + 1);
  });
  auto [a, b, c, d] = f(1.5f, 2.5, int32_t{3}, int64_t{4});
  CHECK(a.dtype() == DType::f32);
  CHECK(a.item<float>() == 2.5f);
  CHECK(b.dtype() == DType::f64);
  CHECK(b.item<double>() == 3.5);
  CHECK(c.dtype() == DType::i32);
  CHECK(c.item<int32_t>() == 4);
  CHECK(d.dtype() == DType::i64);
  CHECK(d.item<int64_t>() == 5);
}

TEST_CASE("nested structures in and out") {
  auto f = jit([](std::pair<Tensor, std::vector<Tensor>> in, std::array<Tensor, 2> w) {
    Tensor acc = in.first;
    for (const Tensor& t : in.second) acc = acc + t;
    return std::make_tuple(acc * w[0], std::vector<Tensor>{w[1], acc});
  });
  std::pair<Array, std::vector<Array>> in{f32({1, 2}), {f32({10, 20}), f32({100, 200})}};
  std::array<Array, 2> w{Array(2.0f), Array(-1.0f)};
  auto [x, rest] = f(in, w);
  CHECK(x.to_vector<float>() == std::vector<float>{222, 444});
  REQUIRE(rest.size() == 2);
  CHECK(rest[0].item<float>() == -1.0f);
  CHECK(rest[1].to_vector<float>() == std::vector<float>{111, 222});
  // A vector of another length is another signature.
  in.second.pop_back();
  CHECK(std::get<0>(f(in, w)).to_vector<float>() == std::vector<float>{22, 44});
}

TEST_CASE("returning a parameter, or one value twice") {
  auto f = jit([](Tensor x) { return std::make_tuple(x, x * 3, x * 3); });
  auto [a, b, c] = f(f32({1, 2}));
  CHECK(a.to_vector<float>() == std::vector<float>{1, 2});
  CHECK(b.to_vector<float>() == std::vector<float>{3, 6});
  CHECK(c.to_vector<float>() == std::vector<float>{3, 6});
}

TEST_CASE("a call's results: up to four held in place, more on the heap") {
  // detail::CallResults: each result must come out once, in order, whichever storage held it.
  auto four = jit([](Tensor x) { return std::make_tuple(x + 1, x + 2, x * 3, std::vector<Tensor>{}); });
  auto six = jit([](Tensor x) { return std::vector<Tensor>{x + 1, x + 2, x + 3, x + 4, x + 5, x * x}; });
  for (int call = 0; call < 2; ++call) {
    auto [a, b, c, none] = four(f32({1, 2}));
    CHECK(a.to_vector<float>() == std::vector<float>{2, 3});
    CHECK(b.to_vector<float>() == std::vector<float>{3, 4});
    CHECK(c.to_vector<float>() == std::vector<float>{3, 6});
    CHECK(none.empty());
    const std::vector<Array> r = six(f32({1, 2}));
    REQUIRE(r.size() == 6);
    for (int i = 0; i < 5; ++i) CHECK(r[static_cast<std::size_t>(i)].to_vector<float>() == std::vector<float>{2.0f + i, 3.0f + i});
    CHECK(r[5].to_vector<float>() == std::vector<float>{1, 4});
  }
}

TEST_CASE("many threads call one jitted function") {
  auto f = jit([](Tensor x, Tensor y) { return sum(x * y); });
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        float v = static_cast<float>(t + i);
        int n = 1 + (i % 3); // three signatures, compiled concurrently
        Array x(std::vector<float>(static_cast<std::size_t>(n), v));
        if (f(x, x).item<float>() != v * v * static_cast<float>(n)) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(f.cache_size() == 3);
}

TEST_CASE("kernels of one key compiled and freed by racing threads") {
  // Each iteration's jitted function is new, so its kernel is freed when it
  // goes: another thread's compile of the same key may load while the old
  // kernel is being destroyed (its code must be gone first, or symbols clash).
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        try {
          auto f = jit([](Tensor x) { return sum(x * 3.0f); });
          const float v = static_cast<float>(t * 100 + i);
          if (f(Array(std::vector<float>{v, 1.0f})).item<float>() != 3 * (v + 1)) ++wrong;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(errors == 0);
  CHECK(wrong == 0);
}

TEST_CASE("a kernel compiled again while its previous copy is being freed") {
  // The freed kernel's weak reference has expired but its code is still
  // loaded: the new load must replace it, and the old destructor must not
  // unload the new code.
  auto body = [](Tensor x) { return sum(x * 7.0f); };
  const Array x = f32({1, 2});
  auto* first = new Jitted<decltype(body)>(jit(body));
  CHECK((*first)(x).item<float>() == 21.0f);
  engine::testing::delayKernelTeardown(std::chrono::milliseconds(300));
  std::thread freeing([&] { delete first; }); // waits 300 ms inside ~Kernel
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto second = jit(body);
  CHECK(second(x).item<float>() == 21.0f); // compiled and loaded meanwhile
  freeing.join();
  engine::testing::delayKernelTeardown(std::chrono::milliseconds(0));
  CHECK(second(x).item<float>() == 21.0f); // still loaded after the old copy went
}

TEST_CASE("a function traced while another thread compiles and calls the same jitted function") {
  // Thread A's trace blocks until thread B has compiled and run another
  // signature of the same function: a lock held while tracing would hang here.
  std::atomic<bool> bDone{false};
  auto f = jit([&](Tensor x) {
    if (x.shape().size() == 1 && x.shape()[0] == 2) {
      for (int i = 0; i < 2000 && !bDone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return x * 2.0f;
  });
  bool aSawB = false;
  std::thread a([&] {
    f(f32({1, 2}));
    aSawB = bDone;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::thread b([&] {
    CHECK(f(f32({1, 2, 3})).to_vector<float>() == std::vector<float>{2, 4, 6});
    bDone = true;
  });
  b.join();
  a.join();
  CHECK(aSawB);
}

TEST_CASE("callers waiting for a failed compilation get its error; a later call tries again") {
  std::atomic<int> traces{0};
  std::atomic<bool> fail{true};
  auto f = jit([&](Tensor x) {
    ++traces;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (fail) throw Error("refused");
    return x + 1.0f;
  });
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      try {
        f(Array(1.0f));
      } catch (const Error& e) {
        if (e.message() == "refused") ++errors;
      }
    });
  for (auto& th : threads) th.join();
  CHECK(errors == 4);
  CHECK(traces >= 1);
  fail = false;
  CHECK(f(Array(1.0f)).item<float>() == 2.0f);
  CHECK(f.cache_size() == 1);
}

TEST_CASE("a jitted function that calls itself on Arrays while being traced is an error, not a hang") {
  std::function<Array(const Array&)> self;
  auto f = jit([&](Tensor x) {
    self(Array(1.0f));
    return x;
  }, {.name = "selfish"});
  self = [&](const Array& a) { return f(a); };
  CHECK_THROWS_WITH_AS(f(Array(1.0f)),
                       doctest::Contains("jit: function 'selfish' called itself, with the same argument types, while being traced"),
                       Error);
}

TEST_CASE("stress: eight threads compile, call, free and recompile, sharing variables") {
  // Run under ThreadSanitizer in CI (.ci/run). ADJIT_STRESS_ROUNDS scales it.
  const int rounds = [] {
    const char* e = std::getenv("ADJIT_STRESS_ROUNDS");
    return e ? std::max(1, std::atoi(e)) : 40;
  }();
  Variable counter("counter", Array(0.0f), /*trainable=*/false);
  auto shared = jit([](Tensor x, Tensor y) { return sum(x * y) + 1.0f; }, {.name = "shared"});
  auto bump = jit([&](Tensor by) { return counter.assign(counter.read() + by); }, {.name = "bump"});
  auto outer = jit([&](Tensor x) { return shared(x, x) * 2.0f; }, {.name = "outer"});
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        try {
          const auto n = static_cast<std::size_t>(1 + (i + t) % 4); // four signatures, compiled concurrently
          const float v = static_cast<float>(t + 1);
          Array x(std::vector<float>(n, v));
          if (shared(x, x).item<float>() != v * v * static_cast<float>(n) + 1) ++wrong;
          if (outer(x).item<float>() != 2 * (v * v * static_cast<float>(n) + 1)) ++wrong;
          bump(Array(1.0f));
          // A function of its own: compiled (or found in the kernel cache),
          // called, and freed at the end of the iteration.
          auto own = jit([k = static_cast<float>(i % 3)](Tensor z) { return sum(z * k); });
          if (own(Array(std::vector<float>{v, 1.0f})).item<float>() != static_cast<float>(i % 3) * (v + 1)) ++wrong;
          if (auto g = grad([](Tensor z) { return sum(z * z); })(Array(std::vector<float>{v})).to_vector<float>();
              g != std::vector<float>{2 * v})
            ++wrong;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  CHECK(errors == 0);
  CHECK(wrong == 0);
  CHECK(counter.value().item<float>() == static_cast<float>(8 * rounds));
  CHECK(shared.cache_size() == 4);
}

TEST_CASE("stages can be inspected") {
  auto f = jit([](Tensor x) { return sum(tanh(x) * 1.0f); }, {.name = "probe"});
  CompiledStages s = f.lower(Type{DType::f32, {1024}});
  CHECK(s.traced_adj.find("func @probe(%0: f32[1024]) -> (f32[])") != std::string::npos);
  CHECK(s.traced_adj.find("mul(") != std::string::npos);
  CHECK(s.optimized_adj.find("mul(") == std::string::npos); // x * 1 folded away
  CHECK(s.llvm_ir.find("tanhf") != std::string::npos);
  CHECK(s.optimized_llvm_ir.find("_ZGV") != std::string::npos); // vectorised through libmvec
  CHECK(!s.assembly.empty());
}

TEST_CASE("optimisation levels agree, and a bad level is an error") {
  for (int level : {0, 1, 2, 3}) {
    auto f = jit([](Tensor x) { return logsumexp(x); }, {.opt_level = level});
    CHECK(f(f64({1, 2, 3})).item<double>() == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0))));
  }
  auto bad = jit([](Tensor x) { return x; }, {.opt_level = 7});
  CHECK_THROWS_AS(bad(Array(1.0f)), Error);
}

TEST_CASE("large intermediates and chains fuse and stay correct") {
  const int n = 300000;
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = static_cast<float>(i % 100) * 0.01f;
  auto f = jit([](Tensor x) {
    Tensor a = exp(x);      // used twice: materialised once
    Tensor b = a * a + a;   // fused
    return std::make_pair(sum(b), max(b));
  });
  auto [s, m] = f(Array(xs));
  double want = 0, wantMax = 0;
  for (float x : xs) {
    double a = std::exp(static_cast<double>(x));
    want += a * a + a;
    wantMax = std::max(wantMax, a * a + a);
  }
  CHECK(s.item<double>() == doctest::Approx(want).epsilon(1e-4));
  CHECK(m.item<double>() == doctest::Approx(wantMax).epsilon(1e-5));
}

TEST_CASE("constant tables of every size and dtype, in small and in partitioned modules") {
  // Tables of 4 KiB and more are compiled into an object of their own (as
  // bytes); smaller ones stay in the kernel's module. Both must read back
  // exactly, as must i1 and i32 data, in a module small enough for one
  // object and in one large enough to be optimised in partitions.
  const int64_t n = 6000;
  std::vector<double> table(static_cast<std::size_t>(n));
  std::vector<float> small(100);
  std::vector<int32_t> index(static_cast<std::size_t>(n));
  std::vector<bool> mask(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    table[static_cast<std::size_t>(i)] = 0.001 * static_cast<double>((i * 7919) % 1009) - 0.5;
    index[static_cast<std::size_t>(i)] = static_cast<int32_t>((i * 4099) % n);
    mask[static_cast<std::size_t>(i)] = i % 3 == 0;
  }
  for (std::size_t i = 0; i < small.size(); ++i) small[i] = 0.25f * static_cast<float>(i);
  const Array tableA(table), smallA(small), indexA(index), maskA = test::i1(mask);
  auto gathered = [&](const Tensor& x) {
    Tensor g = take(constant(tableA), constant(indexA), 0) * x;
    return where(constant(maskA), g, x + cast(sum(constant(smallA)), DType::f64));
  };
  std::vector<double> xs(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs[static_cast<std::size_t>(i)] = 1.0 + 1e-4 * static_cast<double>(i);
  const Array x(xs);
  auto small_ = jit([&](Tensor x) { return gathered(x); });
  const std::vector<double> got = small_(x).to_vector<double>();
  double smallSum = 0;
  for (float v : small) smallSum += v;
  for (std::size_t i = 0; i < xs.size(); ++i)
    REQUIRE(got[i] == (mask[i] ? table[static_cast<std::size_t>(index[i])] * xs[i] : xs[i] + smallSum));
  // Hundreds of ops per point: several LLVM functions, compiled in
  // partitions on a machine with two cores or more.
  auto chain = [&](Tensor x) {
    Tensor y = gathered(x);
    for (int i = 0; i < 2100; ++i) y = i % 3 == 0 ? sin(y) : i % 3 == 1 ? y * (1.0 + 1e-4 * i) : y + 1e-3 * i;
    return y * take(constant(tableA), constant(indexA), 0);
  };
  Module m = trace(chain, x.type());
  const Array want = m.interpret("f", {x}).at(0);
  ADJIT_CHECK_CLOSE(jit(chain)(x), want, 1e-12);
}

TEST_CASE("module partitions keep a loop's callees, and what they call, with the loop") {
  // @k0 and @k1 are a plan's functions, called once; @step is a loop body
  // (inlinable, called in @k0's loop) and calls @leaf; @shared is code
  // called from two places, hence noinline, in @k1's loop.
  const char* text = R"(
define void @entry(ptr %p) {
  call void @k0(ptr %p)
  call void @k1(ptr %p)
  call void @shared(ptr %p)
  ret void
}
define internal void @k0(ptr %p) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %n, %loop ]
  call void @step(ptr %p)
  %n = add i64 %i, 1
  %done = icmp eq i64 %n, 100
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
define internal void @step(ptr %p) {
  %v = load double, ptr %p
  %w = fmul double %v, 2.0
  store double %w, ptr %p
  call void @leaf(ptr %p)
  ret void
}
define internal void @leaf(ptr %p) {
  %v = load double, ptr %p
  %w = fadd double %v, 1.0
  store double %w, ptr %p
  ret void
}
define internal void @k1(ptr %p) noinline {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %n, %loop ]
  call void @shared(ptr %p)
  %v = load double, ptr %p
  %a = fmul double %v, 3.0
  %b = fadd double %a, 1.0
  %c = fmul double %b, %a
  %d = fadd double %c, %b
  %e = fmul double %d, %c
  %f = fadd double %e, %d
  %g = fmul double %f, %e
  %h = fadd double %g, %f
  store double %h, ptr %p
  %n = add i64 %i, 1
  %done = icmp eq i64 %n, 100
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
define internal void @shared(ptr %p) noinline {
  store double 0.0, ptr %p
  ret void
}
)";
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic err;
  std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(text, err, ctx);
  REQUIRE(m);
  std::map<std::string, unsigned> part = engine::assignParts(*m, 2);
  REQUIRE(part.size() == 6);
  CHECK(part["step"] == part["k0"]);
  CHECK(part["leaf"] == part["k0"]); // called by a loop body
  CHECK(part["k1"] != part["k0"]);   // the two largest clusters, balanced
  // One part, or one cluster: nothing to split.
  CHECK(engine::assignParts(*m, 1).empty());
  const std::vector<std::string> bitcode = engine::splitModule(*m, 2, "t");
  CHECK(bitcode.size() == 2);
}

TEST_CASE("machine code is freed with the last copy of a jitted function") {
  engine::background::drain(); // an earlier test's optimised tier may hold its kernel until it is in place
  const std::size_t before = engine::liveKernels();
  {
    auto f = jit([](Tensor x) { return x * 12345.0 - 3; }, {.name = "ephemeral"});
    auto copy = f;
    CHECK(copy(Array(1.0)).item<double>() == 12342.0);
    CHECK(engine::liveKernels() == before + 1);
    auto g = f; // copies share the kernel
    CHECK(g(Array(2.0)).item<double>() == 24687.0);
    CHECK(engine::liveKernels() == before + 1);
  }
  CHECK(engine::liveKernels() == before);
}

TEST_CASE("identical functions share one kernel") {
  engine::background::drain(); // an earlier test's optimised tier may hold its kernel until it is in place
  auto f = jit([](Tensor x) { return x * 777.0; }, {.name = "twin"});
  auto g = jit([](Tensor x) { return x * 777.0; }, {.name = "twin"});
  const std::size_t before = engine::liveKernels();
  f(Array(1.0));
  g(Array(1.0));
  CHECK(engine::liveKernels() == before + 1);
}

TEST_CASE("split loops run on threads: bitwise identical results for every thread count") {
  // Large enough to be split (a full reduction with partials, rows of a
  // reduction, an elementwise gradient), with values whose sum depends on
  // the order of additions.
  const int64_t rows = 300, cols = 1000;
  std::vector<float> xs(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(float(i) * 0.37f) * (1 + float(i % 97) * 1e3f);
  const Array x(xs, {rows, cols});
  auto f = [](Tensor x) {
    Tensor total = sum(log1p(exp(x * 1e-3f)));             // all of x: partial sums per chunk
    Tensor perRow = logsumexp(x * 1e-3f, {1});             // rows split among threads
    return std::make_tuple(total, perRow, tanh(x * 1e-4f)); // elementwise
  };
  auto plan = jit(f, {.threads = 1}).lower(x).plan;
  CHECK(plan.find("with partials") != std::string::npos);
  CHECK(plan.find("chunks of") != std::string::npos);
  const Module m = trace(f, x.type());
  const std::vector<Array> want = m.interpret("f", {x});
  std::vector<std::string> first;
  for (int threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    auto [total, perRow, th] = jit(f, {.threads = threads})(x);
    ADJIT_CHECK_CLOSE(total, want[0], 1e-5);
    ADJIT_CHECK_CLOSE(perRow, want[1], 1e-5);
    ADJIT_CHECK_CLOSE(th, want[2], 1e-5);
    const std::vector<std::string> got = {bytesOf(total), bytesOf(perRow), bytesOf(th)};
    if (first.empty()) first = got;
    CHECK(got == first);
  }
  // Matrix products, unpacked and batched (column panels of every matrix are
  // the chunks) and packed (packing steps and column panels): each element of
  // the result is summed by one chunk in one order.
  const Array a3(std::vector<float>(xs.begin(), xs.begin() + 3 * 96 * 120), {3, 96, 120});
  const Array b3(std::vector<float>(xs.begin() + 7, xs.begin() + 7 + 3 * 120 * 100), {3, 120, 100});
  const Array a2(std::vector<float>(xs.begin(), xs.begin() + 300 * 600), {300, 600});
  const Array b2(std::vector<float>(xs.begin() + 11, xs.begin() + 11 + 600 * 400), {600, 400});
  auto mm = [](Tensor a, Tensor b) { return matmul(a, b) * 1e-3f; };
  // Packed with a tile epilogue, and with A read transposed (as in a
  // gradient): 2, 3 and 8 threads split the rows (each packs blocks of A of
  // its own; K = 600 takes two blocks of k), 9 share each block of A and
  // split its columns, and so do 2 threads on a product of few rows.
  auto act = [](Tensor a, Tensor b) { return tanh(matmul(a, b) * 1e-3f); };
  auto mt = [](Tensor a, Tensor b) { return matmul(transpose(a), b) * 1e-3f; };
  const Array aT(std::vector<float>(xs.begin() + 5, xs.begin() + 5 + 600 * 300), {600, 300});
  const Array few(std::vector<float>(xs.begin() + 3, xs.begin() + 3 + 30 * 600), {30, 600});
  const std::string direct1 = bytesOf(jit(mm, {.threads = 1})(a3, b3)), packed1 = bytesOf(jit(mm, {.threads = 1})(a2, b2));
  const std::string act1 = bytesOf(jit(act, {.threads = 1})(a2, b2)), mt1 = bytesOf(jit(mt, {.threads = 1})(aT, b2));
  const std::string few1 = bytesOf(jit(mm, {.threads = 1})(few, b2));
  for (int threads : {2, 3, 8, 9}) {
    CAPTURE(threads);
    CHECK(bytesOf(jit(mm, {.threads = threads})(a3, b3)) == direct1);
    CHECK(bytesOf(jit(mm, {.threads = threads})(a2, b2)) == packed1);
    CHECK(bytesOf(jit(act, {.threads = threads})(a2, b2)) == act1);
    CHECK(bytesOf(jit(mt, {.threads = threads})(aT, b2)) == mt1);
    CHECK(bytesOf(jit(mm, {.threads = threads})(few, b2)) == few1);
  }
  // The gradient too, and from several threads at once (the pool serves one
  // call at a time; the others run their chunks themselves).
  auto g = jit(grad([](Tensor x) { return sum(log1p(exp(x * 1e-3f))); }), {.threads = 2});
  const std::string g1 = bytesOf(jit(grad([](Tensor x) { return sum(log1p(exp(x * 1e-3f))); }), {.threads = 1})(x));
  std::vector<std::thread> callers;
  std::atomic<int> differ{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int i = 0; i < 20; ++i)
        if (bytesOf(g(x)) != g1) ++differ;
    });
  for (auto& c : callers) c.join();
  CHECK(differ == 0);
  CHECK_THROWS_WITH_AS(jit(f, {.threads = -1}), doctest::Contains("threads must be 0 (the default) or positive, got -1"), Error);
}

TEST_CASE("the pool runs every chunk once, whatever the chunk and thread counts") {
  // Threads run their own range, then take chunks from the others' ranges;
  // each chunk must still run exactly once, the last ones included.
  for (int threads : {1, 2, 3, 8})
    for (int64_t chunks : {1, 2, 3, 5, 17, 64, 1000, 1024, 4099}) {
      CAPTURE(threads);
      CAPTURE(chunks);
      std::vector<std::atomic<int>> runs(static_cast<std::size_t>(chunks));
      const runtime::CallThreads scope(threads);
      adjit_parallel_for([](void* ctx, int64_t c) { static_cast<std::atomic<int>*>(ctx)[c].fetch_add(1); }, runs.data(), chunks);
      int64_t once = 0;
      for (const auto& r : runs) once += r.load() == 1;
      CHECK(once == chunks);
    }
}

TEST_CASE("each thread starts at its own contiguous share of the chunks") {
  // 8 chunks on 2 threads: the caller's share is 0-3, the pool thread's 4-7.
  // Chunk 0 waits (up to 10 s) for another thread to start a chunk, so the
  // caller cannot take the pool thread's chunks first; the pool thread must
  // then start at 4, the first of its share, and not at 1.
  struct State {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int64_t> firstElsewhere{-1};
  } st;
  const runtime::CallThreads scope(2);
  adjit_parallel_for(
      [](void* ctx, int64_t c) {
        auto& s = *static_cast<State*>(ctx);
        if (std::this_thread::get_id() != s.caller) {
          int64_t none = -1;
          s.firstElsewhere.compare_exchange_strong(none, c);
        } else if (c == 0) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (s.firstElsewhere.load() < 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        }
      },
      &st, 8);
  CHECK(st.firstElsewhere.load() == 4);
}

#if defined(__linux__)
TEST_CASE("the pool's threads keep off the caller's CPU") {
  // A pool thread queued on the caller's CPU cannot run until the caller's
  // time slice ends. Pinned to each of two CPUs in turn, the caller must find
  // its pool thread allowed every CPU but its own, and running elsewhere.
  cpu_set_t process;
  REQUIRE(sched_getaffinity(getpid(), sizeof process, &process) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &process)) cpus.push_back(c);
  if (cpus.size() < 2) return; // one CPU: nothing to keep off
  { // the pool reads the process's CPUs when it starts: before this thread is pinned
    const runtime::CallThreads two(2);
    adjit_parallel_for([](void*, int64_t) {}, nullptr, 2);
  }
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  struct State {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<pid_t> helper{0};
    std::atomic<int> helperCpu{-1};
  };
  for (int cpu : cpus) {
    CAPTURE(cpu);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) { // a sandbox that forbids it: so does the pool
      MESSAGE("sched_setaffinity is not allowed here: not checked");
      break;
    }
    State st;
    const runtime::CallThreads scope(2);
    adjit_parallel_for(
        [](void* ctx, int64_t c) {
          auto& s = *static_cast<State*>(ctx);
          if (std::this_thread::get_id() != s.caller) {
            s.helperCpu = sched_getcpu();
            s.helper = gettid();
          } else if (c == 0) { // wait (up to 10 s) for the pool thread
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (s.helper.load() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          }
        },
        &st, 2);
    REQUIRE(st.helper.load() != 0);
    CHECK(st.helperCpu.load() != cpu);
    cpu_set_t mask;
    REQUIRE(sched_getaffinity(st.helper.load(), sizeof mask, &mask) == 0);
    CHECK_FALSE(CPU_ISSET(cpu, &mask));
    CHECK(CPU_COUNT(&mask) == CPU_COUNT(&process) - 1);
  }
  sched_setaffinity(0, sizeof saved, &saved);
}
#endif

TEST_CASE("small loops stay on one thread") {
  // 10,000 elements of a few ops: below the split threshold.
  auto plan = jit([](Tensor x) { return sum(exp(x)); }).lower(Array(std::vector<float>(10000, 1.0f))).plan;
  CHECK(plan.find("chunks of") == std::string::npos);
}

TEST_CASE("Array: a small block freed on a thread goes to that thread's next Array of its size") {
  // A jitted function with a small result, called in a loop, gets its block
  // back without glibc (whose aligned_alloc has no thread cache: lib/ir/Array.cpp).
  const Type t{DType::f64, {25}};
  void* freed = nullptr;
  {
    Array a(t);
    freed = a.raw();
  }
  Array other(Type{DType::f64, {20}}), smaller(Type{DType::f32, {9}});
  Array again(t);
  CHECK(again.raw() == freed);
  CHECK(reinterpret_cast<std::uintptr_t>(again.raw()) % 64 == 0);
  CHECK(again.at(24) == 0.0); // zeroed as a fresh Array is
  // A thread's cached blocks are freed when it ends (the sanitizer builds
  // would report them leaked).
  std::thread([] {
    Array a(Type{DType::f64, {40}});
    CHECK(a.size() == 40);
  }).join();
}

TEST_CASE("Array::view and into: a caller's buffers are read and written in place, checked") {
  auto f = jit([](Tensor x, Tensor y) { return std::pair{x * 2.0f + y, sum(x * y)}; });
  std::vector<float> x{1, 2, 3, 4, 5, 6}, y{6, 5, 4, 3, 2, 1}, out(6, -1);
  float total = -1;
  // Inputs: views of the caller's data (read in place; a const view is read-only).
  const float* cx = x.data();
  const Array vx = Array::view(cx, {2, 3}), vy = Array::view(y.data(), {2, 3});
  CHECK(vx.is_view());
  CHECK(vx.is_read_only());
  CHECK(!vy.is_read_only());
  CHECK(vx.raw() == x.data());
  auto [a, s] = f(vx, vy);
  CHECK(a.to_vector<float>() == std::vector<float>{8, 9, 10, 11, 12, 13});
  // Outputs: written straight into views (a structure of them, or std::tie).
  f.into(std::pair{Array::view(out.data(), {2, 3}), Array::view(&total, {})}, vx, vy);
  CHECK(out == std::vector<float>{8, 9, 10, 11, 12, 13});
  CHECK(total == 56);
  Array o1 = Array::view(out.data(), {2, 3}), o2(Type{DType::f32, {}});
  x[0] = 10; // the view reads the buffer as it is now
  f.into(std::tie(o1, o2), vx, vy);
  CHECK(out[0] == 26);
  CHECK(o2.item<float>() == 110);
  // Copies own their data; moves keep the view.
  Array copy = vy;
  CHECK(!copy.is_view());
  CHECK(copy.raw() != y.data());
  Array moved = std::move(o1);
  CHECK(moved.is_view());
  CHECK(moved.raw() == out.data());
  // Mistakes: the wrong count or type, a read-only output, overlaps.
  std::vector<double> wide(6);
  CHECK_THROWS_WITH_AS(f.into(Array::view(out.data(), {2, 3}), vx, vy),
                       "error: f.into: the function returns 2 arrays, but 1 output was given", Error);
  CHECK_THROWS_WITH_AS(f.into(std::pair{Array::view(wide.data(), {2, 3}), Array::view(&total, {})}, vx, vy),
                       "error: f.into: output 0 is f64[2,3], but the function returns f32[2,3] there", Error);
  CHECK_THROWS_WITH_AS(f.into(std::pair{Array::view(cx, {2, 3}), Array::view(&total, {})}, vx, vy),
                       "error: into: output 0 is a view of const data; it cannot be written", Error);
  CHECK_THROWS_WITH_AS(f.into(std::pair{Array::view(y.data(), {2, 3}), Array::view(&total, {})}, vx, vy),
                       "error: f.into: output 0 overlaps argument 1; buffers must not overlap", Error);
  CHECK_THROWS_WITH_AS(f.into(std::pair{Array::view(out.data(), {2, 3}), Array::view(out.data() + 5, {})}, vx, vy),
                       "error: f.into: outputs 0 and 1 overlap; buffers must not overlap", Error);
  CHECK_THROWS_WITH_AS(Array::view(static_cast<float*>(nullptr), {3}), doctest::Contains("test_jit.cpp"), Error);
  CHECK_THROWS_WITH_AS(Array::view(static_cast<float*>(nullptr), {3}), doctest::Contains("Array::view: a null pointer for f32[3]"), Error);
  // Gradients and other transforms take views like any Array.
  auto g = grad([](Tensor x) { return sum(x * x); });
  std::vector<double> p{1, 2, 3}, dp(3);
  jit(g).into(Array::view(dp.data(), {3}), Array::view(p.data(), {3}));
  CHECK(dp == std::vector<double>{2, 4, 6});
}

TEST_CASE("grad(f)(x) written inline compiles once per signature for a function without state") {
  // Each grad(...) is a new object; a captureless lambda's objects share one
  // signature cache, so the later calls neither trace nor compile.
  auto calls = [] {
    double total = 0;
    for (int i = 0; i < 3; ++i) total += grad([](Tensor x) { return sum(x * x * 31.0); })(f64({1, 2})).at(1);
    return total;
  };
  const engine::Counters before = engine::counters();
  CHECK(calls() == 3 * 124.0);
  const engine::Counters after = engine::counters();
  CHECK(after.passRuns + after.memoryHits + after.diskHits - before.passRuns - before.memoryHits - before.diskHits == 1);
  // With state (a capture), each object traces for itself: the capture may differ.
  for (double k : {1.0, 2.0}) CHECK(grad([k](Tensor x) { return sum(x * k); })(f64({1})).at(0) == k);
}
