// test/unit/test_vmap_shape.cpp — the batching rules of the shape, indexing
// and sorting ops: vmap of a small function against a loop of jit calls of
// the unbatched one, with batched and shared operands, the batch axis first
// and elsewhere, in the interpreter (the vmap pass on a traced module) and
// the JIT; and vmap(grad(f)) against a loop of gradients.
#include "Check.h"

#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <fmt/format.h>

#include <cstring>
#include <utility>

using namespace adjit;
using namespace adjit::test;

namespace {

/// Stacks equal-typed arrays along a new axis `axis`.
Array stackAt(const std::vector<Array>& rows, int64_t axis) {
  const Shape& one = rows.at(0).shape();
  if (axis < 0) axis += static_cast<int64_t>(one.size()) + 1;
  Shape s = one;
  s.insert(s.begin() + axis, static_cast<int64_t>(rows.size()));
  Array r(Type{rows[0].dtype(), s});
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= one[static_cast<std::size_t>(d)];
  const std::size_t inner = rows[0].bytes() / static_cast<std::size_t>(outer == 0 ? 1 : outer);
  char* out = static_cast<char*>(r.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (std::size_t b = 0; b < rows.size(); ++b) {
      std::memcpy(out, static_cast<const char*>(rows[b].raw()) + inner * static_cast<std::size_t>(o), inner);
      out += inner;
    }
  return r;
}

Array randomArray(Type t, uint32_t seed) {
  Array a(t);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < a.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    a.set(i, static_cast<double>((x >> 8) % 2001) / 1000.0 - 1.0);
  }
  return a;
}

/// Integers in [lo, hi] (indices, some negative or out of range on purpose).
Array randomInts(Type t, int64_t lo, int64_t hi, uint32_t seed) {
  Array a(t);
  uint32_t x = seed * 2246822519u + 7;
  for (int64_t i = 0; i < a.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    a.set(i, static_cast<double>(lo + static_cast<int64_t>((x >> 8) % static_cast<uint32_t>(hi - lo + 1))));
  }
  return a;
}

/// One argument of a checked function: its examples (one for a shared
/// argument) and the batch axis of the stacked array (nullopt: shared).
struct Arg {
  std::vector<Array> rows;
  std::optional<int64_t> axis = 0;
};

/// `n` examples of type `t` (random values from `seed`).
std::vector<Array> examples(Type t, int n, uint32_t seed) {
  std::vector<Array> r;
  for (int b = 0; b < n; ++b) r.push_back(randomArray(t, seed * 31 + static_cast<uint32_t>(b)));
  return r;
}
std::vector<Array> intExamples(Type t, int n, int64_t lo, int64_t hi, uint32_t seed) {
  std::vector<Array> r;
  for (int b = 0; b < n; ++b) r.push_back(randomInts(t, lo, hi, seed * 31 + static_cast<uint32_t>(b)));
  return r;
}

std::string axesText(const std::vector<Arg>& args) {
  std::string t;
  for (const Arg& a : args) t += (t.empty() ? "" : ",") + (a.axis ? std::to_string(*a.axis) : std::string("-"));
  return t;
}

/// Checks vmap(f, in_axes)(stacked args) against the stack of jit(f) over
/// the examples, compiled (vmap with Arrays, and jit of vmap inside a trace)
/// and interpreted (the vmap pass on f's traced module); bitwise where
/// `exact`, else to `rtol`. Returns nothing; CHECKs.
template <std::size_t N, class F> void checkVmap(F f, const std::vector<Arg>& args, bool exact, double rtol = 1e-12) {
  REQUIRE(args.size() == N);
  std::size_t size = 0;
  for (const Arg& a : args)
    if (a.axis) size = a.rows.size();
  REQUIRE(size > 0);
  auto apply = [&](auto&& g, const std::vector<Array>& v) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return g(v[I]...); }(std::make_index_sequence<N>{});
  };
  std::vector<Array> batched, first;
  std::vector<Type> types;
  std::vector<std::optional<int64_t>> axes;
  for (const Arg& a : args) {
    batched.push_back(a.axis ? stackAt(a.rows, *a.axis) : a.rows.at(0));
    first.push_back(a.rows.at(0));
    types.push_back(a.rows.at(0).type());
    axes.push_back(a.axis);
  }
  auto one = jit(f);
  std::vector<Array> wantRows;
  for (std::size_t b = 0; b < size; ++b) {
    std::vector<Array> ex;
    for (const Arg& a : args) ex.push_back(a.axis ? a.rows.at(b) : a.rows.at(0));
    wantRows.push_back(apply(one, ex));
  }
  const Array want = stackAt(wantRows, 0);
  auto same = [&](const Array& got, const char* how) {
    INFO(how << " with in_axes [" << axesText(args) << "]");
    REQUIRE(got.type() == want.type());
    if (exact) {
      CHECK(bytesOf(got) == bytesOf(want));
    } else {
      std::string why;
      CHECK_MESSAGE(close(got, want, rtol, &why), why);
    }
  };
  same(apply(vmap(f, {.in_axes = axes}), batched), "JIT");
  // the batched ops inside a jit-ed trace
  same(apply(jit([&](const auto&... xs) { return vmap(f, {.in_axes = axes})(xs...); }), batched), "jit(vmap)");
  // the interpreter: the vmap pass on the traced function
  Module m = [&]<std::size_t... I>(std::index_sequence<I...>) { return trace(f, types[I]...); }(std::make_index_sequence<N>{});
  transforms::runPipeline(m.impl(), {fmt::format("vmap(f, in_axes=[{}], axis_size={})", axesText(args), size)});
  m.verify();
  const std::string text = m.str();
  CHECK(Module::parse(text).str() == text);
  same(m.interpret("f.vmap", batched).at(0), "interpreter");
  // the result with its batch axis last
  INFO("out_axes -1 with in_axes [" << axesText(args) << "]");
  const Array last = apply(vmap(f, {.in_axes = axes, .out_axes = {-1}}), batched);
  const Array wantLast = stackAt(wantRows, -1);
  REQUIRE(last.type() == wantLast.type());
  if (exact) {
    CHECK(bytesOf(last) == bytesOf(wantLast));
  } else {
    std::string why;
    CHECK_MESSAGE(close(last, wantLast, rtol, &why), why);
  }
}

constexpr int kB = 3; // examples per batch

} // namespace

TEST_CASE("vmap of reshape, broadcast_to, transpose equals a loop") {
  const Type t{DType::f32, {2, 3}};
  for (int64_t axis : {0, 1, -1}) {
    checkVmap<1>([](const Tensor& x) { return reshape(x, {3, 1, 2}); }, {{examples(t, kB, 1), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {4, 2, 3}); }, {{examples(t, kB, 2), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return transpose(x, {1, 0}); }, {{examples(t, kB, 3), axis}}, true);
  }
  // broadcasting along an axis of extent 1, and a scalar to a shape
  checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {2, 4, 3}); }, {{examples({DType::f64, {4, 1}}, kB, 4), 1}},
               true);
  checkVmap<1>([](const Tensor& x) { return broadcast_to(x, {2, 2}); }, {{examples({DType::i32, {}}, kB, 5), 0}}, true);
  checkVmap<1>([](const Tensor& x) { return transpose(x, {2, 0, 1}); }, {{examples({DType::f64, {2, 3, 4}}, kB, 6), 2}},
               true);
}

TEST_CASE("vmap of slice, pad, concatenate, pad_sum equals a loop") {
  const Type t{DType::f64, {4, 5}};
  for (int64_t axis : {0, 2}) {
    checkVmap<1>([](const Tensor& x) { return slice(x, {1, 0}, {4, 5}, {2, 2}); }, {{examples(t, kB, 7), axis}}, true);
    checkVmap<1>([](const Tensor& x) { return pad(x, {1, 0}, {0, 2}, {1, 1}); }, {{examples(t, kB, 8), axis}}, true);
  }
  // concatenate: both batched, one shared (either side), along each axis
  const Type u{DType::f64, {2, 5}};
  for (int64_t cat : {0, 1}) {
    const Type v = cat == 0 ? Type{DType::f64, {3, 5}} : Type{DType::f64, {2, 3}};
    auto f = [cat](const Tensor& a, const Tensor& b) { return concatenate({a, b, a}, cat); };
    checkVmap<2>(f, {{examples(u, kB, 9), 0}, {examples(v, kB, 10), 1}}, true);
    checkVmap<2>(f, {{examples(u, kB, 11), std::nullopt}, {examples(v, kB, 12), -1}}, true);
    checkVmap<2>(f, {{examples(u, kB, 13), 1}, {examples(v, 1, 14), std::nullopt}}, true);
  }
  // pad_sum with a batched and a shared addend (an exact sum: integers)
  auto ps = [](const Tensor& a, const Tensor& b) { return pad_sum({a, b, a}, {4, 5}, {{0, 0}, {1, 1}, {2, 0}}, {{1, 0}, {0, 1}, {0, 0}}); };
  const Type pa{DType::i32, {2, 5}}, pb{DType::i32, {3, 2}};
  checkVmap<2>(ps, {{intExamples(pa, kB, -9, 9, 15), 0}, {intExamples(pb, 1, -9, 9, 16), std::nullopt}}, true);
  checkVmap<2>(ps, {{intExamples(pa, 1, -9, 9, 17), std::nullopt}, {intExamples(pb, kB, -9, 9, 18), 2}}, true);
  checkVmap<2>(ps, {{intExamples(pa, kB, -9, 9, 19), 1}, {intExamples(pb, kB, -9, 9, 20), 0}}, true);
}

TEST_CASE("vmap(grad(f)) through shape ops equals a loop of gradients") {
  // Gradients of reshape, broadcast, transpose, slice, pad and concatenate
  // are made of the others: batching them batches those.
  auto f = [](const Tensor& x, const Tensor& w) {
    Tensor a = reshape(transpose(x, {1, 0}), {3, 2});
    Tensor b = concatenate({slice(a, {0, 0}, {3, 2}, {1, 2}), pad(a, {0, 1}, {0, 0}, {0, 0})}, 1); // [3, 4]
    return sum(tanh(b) * broadcast_to(w, {3, 4}) + b * b, {0, 1});
  };
  const Type tx{DType::f64, {2, 3}}, tw{DType::f64, {4}};
  checkVmap<2>([&](const Tensor& x, const Tensor& w) { return grad(f)(x, w); },
               {{examples(tx, kB, 21), 0}, {examples(tw, 1, 22), std::nullopt}}, false, 1e-12);
  checkVmap<2>([&](const Tensor& x, const Tensor& w) { return grad(f, argnums<1>)(x, w); },
               {{examples(tx, kB, 23), 1}, {examples(tw, kB, 24), 0}}, false, 1e-12);
}
