// test/unit/test_map.cpp — adjit::map: a function over every slice of a
// leading axis of run-time length, against a loop of jit calls; one
// compilation for every N; structures, broadcast arguments, threads, errors.
#include "Check.h"

#include <random>
#include <thread>

using namespace adjit;
using namespace adjit::test;

namespace {

/// The bytes of row i of a.
std::string rowBytes(const Array& a, int64_t i) { return bytesOf(row(a, i)); }

/// A small function with a reduction, a matrix product and transcendental math.
auto step = [](Tensor x, Tensor w) { return tanh(matmul(w, x)) + sum(x * x) * 0.5f + exp(-x); };

} // namespace

TEST_CASE("map: bitwise equal to a loop of jit calls, one compilation for every N") {
  const Array w = randomArray({DType::f32, {6, 6}}, 1);
  auto one = jit(step);
  auto all = map(step, {.in_axes = {0, std::nullopt}, .name = "mapped_step"});
  int compiles = 0;
  set_compile_listener([&](const CompileEvent& e) { compiles += e.function == "mapped_step"; });
  for (int64_t n : {1, 7, 300}) {
    const Array xs = randomArray({DType::f32, {n, 6}}, static_cast<unsigned>(n));
    const Array ys = all(xs, w);
    REQUIRE(ys.type() == Type{DType::f32, {n, 6}});
    for (int64_t i = 0; i < n; ++i) {
      INFO("n = " << n << ", instance " << i);
      CHECK(rowBytes(ys, i) == bytesOf(one(row(xs, i), w)));
    }
  }
  set_compile_listener({});
  CHECK(compiles == 1);
  CHECK(all.cache_size() == 1);
  // Another per-instance signature is another compilation.
  all(randomArray({DType::f32, {3, 4}}, 5), randomArray({DType::f32, {4, 4}}, 6));
  CHECK(all.cache_size() == 2);
}

TEST_CASE("map: N = 0 gives empty outputs without running an instance") {
  int calls = 0;
  auto f = [&](Tensor x) {
    debug_callback([&](const std::vector<Array>&) { ++calls; }, {x});
    return std::make_tuple(sum(x), x * 2.0);
  };
  auto [s, d] = map(f)(Array(Type{DType::f64, {0, 3}}));
  CHECK(s.type() == Type{DType::f64, {0}});
  CHECK(d.type() == Type{DType::f64, {0, 3}});
  CHECK(calls == 0);
  // N = 1: one instance, its callback once.
  auto [s1, d1] = map(f)(f64({1, 2, 3}).reshaped({1, 3}));
  CHECK(calls == 1);
  CHECK(s1.to_vector<double>() == std::vector<double>{6});
  CHECK(d1.to_vector<double>() == std::vector<double>{2, 4, 6});
}

TEST_CASE("map: broadcast arguments, C++ scalars and structures in and out") {
  const Array xs = randomArray({DType::f64, {5, 3}}, 2), bs = randomArray({DType::f64, {5}}, 3);
  const Array m = randomArray({DType::f64, {3, 3}}, 4);
  auto f = [](std::tuple<Tensor, Tensor> xb, Tensor m, Tensor scale) {
    auto [x, b] = xb;
    return std::make_pair(matmul(m, x) * scale + b, std::vector<Tensor>{sum(x), max(x)});
  };
  auto mapped = map(f, {.in_axes = {0, std::nullopt, std::nullopt}});
  auto [ys, stats] = mapped(std::make_tuple(xs, bs), m, 2.5);
  REQUIRE(stats.size() == 2);
  CHECK(ys.type() == Type{DType::f64, {5, 3}});
  CHECK(stats[0].type() == Type{DType::f64, {5}});
  auto one = jit(f);
  for (int64_t i = 0; i < 5; ++i) {
    auto [y, st] = one(std::make_tuple(row(xs, i), row(bs, i)), m, 2.5);
    CHECK(rowBytes(ys, i) == bytesOf(y));
    CHECK(rowBytes(stats[0], i) == bytesOf(st[0]));
    CHECK(rowBytes(stats[1], i) == bytesOf(st[1]));
  }
}

TEST_CASE("map: threads change nothing but the time") {
  const Array w = randomArray({DType::f32, {6, 6}}, 7);
  const Array xs = randomArray({DType::f32, {1000, 6}}, 8);
  const Array serial = map(step, {.threads = 1, .in_axes = {0, std::nullopt}})(xs, w);
  const Array parallel = map(step, {.threads = 2, .in_axes = {0, std::nullopt}})(xs, w);
  const Array defaults = map(step, {.in_axes = {0, std::nullopt}})(xs, w);
  CHECK(bytesOf(serial) == bytesOf(parallel));
  CHECK(bytesOf(serial) == bytesOf(defaults));
}

TEST_CASE("map: calls from several threads at once share the pool and agree") {
  const Array w = randomArray({DType::f32, {6, 6}}, 11);
  const Array xs = randomArray({DType::f32, {2000, 6}}, 12);
  auto mapped = map(step, {.threads = 2, .in_axes = {0, std::nullopt}});
  const Array want = map(step, {.threads = 1, .in_axes = {0, std::nullopt}})(xs, w);
  std::vector<Array> got(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) got[t] = mapped(xs, w);
    });
  for (std::thread& t : threads) t.join();
  for (const Array& g : got) CHECK(bytesOf(g) == bytesOf(want));
  CHECK(mapped.cache_size() == 1);
}

TEST_CASE("map: the first failing instance's error, whatever the threads") {
  // Instance i runs i + 1 iterations; max_iterations = 4 stops instances 4 and up.
  auto f = [](Tensor n) {
    return while_loop([&](const Tensor& i) { return i < n; }, [](const Tensor& i) { return i + 1; }, Tensor(constant(Array(int32_t{0}))),
                      {.max_iterations = 4});
  };
  Array ns(Type{DType::i32, {50}});
  for (int64_t i = 0; i < 50; ++i) ns.set(i, static_cast<double>(i + 1));
  for (int threads : {1, 2}) {
    Error e = errorOf([&] { map(f, {.threads = threads})(ns); });
    CHECK(std::string(e.message()).find("max_iterations") != std::string::npos);
  }
  // Below the limit every instance runs.
  Array small(Type{DType::i32, {3}});
  for (int64_t i = 0; i < 3; ++i) small.set(i, static_cast<double>(i + 1));
  CHECK(map(f)(small).to_vector<int32_t>() == std::vector<int32_t>{1, 2, 3});
}

TEST_CASE("map: Variables read inside are passed whole to every instance") {
  Variable v("v", f32({1, 2, 3}));
  auto f = [&](Tensor x) { return x * v.read(); };
  CHECK(map(f)(f32({1, 1, 1, 2, 2, 2}).reshaped({2, 3})).to_vector<float>() == std::vector<float>{1, 2, 3, 2, 4, 6});
  Error e = errorOf([&] { map([&](Tensor x) { v.assign(x); return x; })(f32({1, 2, 3, 4, 5, 6}).reshaped({2, 3})); });
  CHECK(e.message() == "map: the function assigns Variable 'v': its instances would write it in no order; return the new values instead");
}

TEST_CASE("map: inside a trace it records a scan over the slices") {
  const Array w = randomArray({DType::f32, {6, 6}}, 9);
  const Array xs = randomArray({DType::f32, {4, 6}}, 10);
  auto traced = jit([](Tensor xs, Tensor w) { return map(step, {.in_axes = {0, std::nullopt}})(xs, w); });
  const Array got = traced(xs, w);
  const Array want = map(step, {.in_axes = {0, std::nullopt}})(xs, w);
  ADJIT_CHECK_CLOSE(got, want, 1e-6);
  CHECK(traced.trace(xs, w).str().find("scan") != std::string::npos);
  // Gradients flow through it as through any scan.
  auto g = grad([](Tensor xs, Tensor w) { return sum(map(step, {.in_axes = {0, std::nullopt}})(xs, w)); });
  const Array dxs = g(xs, w);
  CHECK(dxs.type() == xs.type());
}

TEST_CASE("map: errors name the argument, the sizes and the line") {
  const Array a = f32({1, 2, 3, 4, 5, 6}).reshaped({3, 2}), b = f32({1, 2, 3, 4}).reshaped({4, 1});
  auto add = [](Tensor x, Tensor y) { return x + sum(y); };
  {
    int line = __LINE__ + 1;
    auto m = map(add);
    Error e = errorOf([&] { m(a, b); });
    CHECK(e.message() == "map: argument 0 has 3 instances along axis 0 (f32[3,2]), but argument 1 has 4 (f32[4,1]): every "
                         "mapped argument needs the same length");
    CHECK(e.location().line == static_cast<uint32_t>(line));
    CHECK(std::string(e.location().file).find("test_map.cpp") != std::string::npos);
  }
  {
    // Leaves of one structure must agree too.
    Error e = errorOf([&] { map([](std::pair<Tensor, Tensor> p) { return p.first; })(std::make_pair(a, b)); });
    CHECK(e.message() == "map: argument 0 (leaf 0) has 3 instances along axis 0 (f32[3,2]), but argument 0 (leaf 1) has 4 "
                         "(f32[4,1]): every mapped argument needs the same length");
  }
  {
    Error e = errorOf([&] { map(add, {.in_axes = {1, std::nullopt}}); });
    CHECK(e.message() == "map: in_axes[0] is 1, but map maps along axis 0 only: give 0 (mapped) or std::nullopt (passed "
                         "whole to every instance); vmap batches along other axes");
    CHECK(e.location().line == __LINE__ - 3);
  }
  {
    Error e = errorOf([&] { map(add, {.in_axes = {0}})(a, b); });
    CHECK(e.message() == "map: in_axes has 1 entry, but the function is called with 2 arguments: give one per argument "
                         "(0: mapped, std::nullopt: passed whole)");
    CHECK(e.location().line == __LINE__ - 3);
  }
  {
    Error e = errorOf([&] { map(add)(a, 2.0f); });
    CHECK(e.message() == "map: argument 1 is a C++ scalar, which has no axis 0 to map over: pass it whole with in_axes "
                         "std::nullopt, or give an Array with a leading axis");
  }
  {
    Error e = errorOf([&] { map(add)(Array(1.0f), a); });
    CHECK(e.message() == "map: argument 0 is f32[], which has no axis 0 to map over: give it a leading axis of one entry "
                         "per instance, or pass it whole with in_axes std::nullopt");
  }
  {
    Error e = errorOf([&] { map(add, {.in_axes = {std::nullopt, std::nullopt}})(a, b); });
    CHECK(e.message() == "map: no argument is mapped (every in_axes entry is std::nullopt, or the mapped arguments have "
                         "no leaves), so the number of instances is unknown");
  }
  {
    Error e = errorOf([&] { map(add, {.threads = -1}); });
    CHECK(e.message() == "map: threads must be 0 (the default) or positive, got -1");
  }
  {
    // Inside a trace, the same checks.
    Error e = errorOf([&] {
      trace([](Tensor x, Tensor y) { return map([](Tensor p, Tensor q) { return p + sum(q); })(x, y); },
            Type{DType::f32, {3, 2}}, Type{DType::f32, {4, 1}});
    });
    CHECK(e.message() == "map: argument 0 has 3 instances along axis 0 (f32[3,2]), but argument 1 has 4 (f32[4,1]): every "
                         "mapped argument needs the same length");
  }
}

TEST_CASE("map: the guide's example") {
  // [snippet:map]
  // One step of a simulation, written for one instance.
  auto step = [](Tensor x, Tensor v, Tensor dt) { return std::make_pair(x + v * dt, v * 0.99f); };
  // Mapped over the leading axis of x and v; dt is passed whole to every instance.
  auto steps = map(step, {.in_axes = {0, 0, std::nullopt}});
  Array xs(DType::f32, {1000, 3}), vs(DType::f32, {1000, 3});
  auto [x1, v1] = steps(xs, vs, 0.01f); // 1,000 instances: x1 and v1 are f32[1000,3]
  auto [x2, v2] = steps(Array(DType::f32, {7, 3}), Array(DType::f32, {7, 3}), 0.01f); // 7, same machine code
  // [/snippet:map]
  CHECK(x1.type() == Type{DType::f32, {1000, 3}});
  CHECK(v2.type() == Type{DType::f32, {7, 3}});
  CHECK(steps.cache_size() == 1);
}
