// test/unit/test_tree.cpp — adjit/tree.h: flatten, unflatten and map on nested
// structures and optional leaves, and users' structs registered with
// ADJIT_TREE / ADJIT_TREE_TEMPLATE going through jit, grad, value_and_grad,
// scan, cond, custom_gradient and GradientTape.
#include "Check.h"

using namespace adjit;
using namespace adjit::test;

namespace tree_test {

/// A model's parameters: a struct of Tensors, for traced code.
// [snippet:params]
struct Params {
  Tensor w, b;
};
ADJIT_TREE(Params, w, b)
// [/snippet:params]

/// The same as a class template: Layer<Array> on the host, Layer<Tensor> traced.
// [snippet:layer]
template <class T> struct Layer {
  T w, b;
};
ADJIT_TREE_TEMPLATE(Layer, w, b)
// [/snippet:layer]

/// A struct holding another and a vector.
template <class T> struct Net {
  Layer<T> first;
  std::vector<T> rest;
};
ADJIT_TREE_TEMPLATE(Net, first, rest)

/// sum(w * x) * b: d/dw = x * b, d/db = sum(w * x).
// [snippet:params-loss]
Tensor loss(const Params& p, const Tensor& x) { return sum(p.w * x) * p.b; }
// [/snippet:params-loss]

} // namespace tree_test

using tree_test::Layer;
using tree_test::Net;
using tree_test::Params;

static_assert(TreeTraits<Params>::kind == TreeKind::record);
static_assert(tree_static_leaves_v<Params> == 2);
static_assert(tree_static_leaves_v<std::tuple<Params, std::array<Tensor, 3>, std::pair<Tensor, float>>> == 7);
static_assert(tree_static_leaves_v<Net<Tensor>> == -1);
static_assert(std::is_same_v<tree_rebind_t<Net<Tensor>, Array>, Net<Array>>);
static_assert(std::is_same_v<tree_rebind_t<std::vector<Params>, Tensor>, std::vector<Params>>);
static_assert(is_tree_v<std::optional<Tensor>> && is_tree_v<std::nullopt_t> && !is_tree_v<std::string>);

TEST_CASE("tree: flatten, unflatten and map on nested structures") {
  const std::tuple<float, std::vector<std::pair<double, std::array<float, 2>>>, Layer<double>> t{
      1.0f, {{2.0, {3.0f, 4.0f}}, {5.0, {6.0f, 7.0f}}}, {8.0, 9.0}};
  CHECK(tree_leaf_count(t) == 9);
  const std::vector<double> flat = tree_flatten<double>(t);
  CHECK(flat == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});

  // map keeps the structure and changes the leaf type.
  const auto doubled = tree_map([](auto x) { return static_cast<int64_t>(2 * x); }, t);
  static_assert(std::is_same_v<std::decay_t<decltype(std::get<2>(doubled))>, Layer<int64_t>>);
  CHECK(std::get<1>(doubled)[1].second[1] == 14);
  CHECK(std::get<2>(doubled).b == 18);

  // unflatten takes the structure from a value (a vector's length) ...
  std::vector<double> leaves(9);
  for (std::size_t i = 0; i < leaves.size(); ++i) leaves[i] = 10.0 * static_cast<double>(i);
  const auto back = tree_unflatten(t, leaves);
  static_assert(std::is_same_v<std::decay_t<decltype(std::get<2>(back))>, Layer<double>>);
  CHECK(std::get<1>(back)[1].first == 40);
  CHECK(std::get<1>(back)[0].second[1] == 30);
  CHECK(std::get<2>(back).w == 70);
  // ... or from the type alone when the type fixes the size.
  const auto fixed = tree_unflatten<std::pair<Layer<double>, std::array<double, 2>>>(std::span<const double>(leaves.data(), 4));
  CHECK(fixed.first.b == 10);
  CHECK(fixed.second[1] == 30);
  // A wrong count is an Error.
  CHECK_THROWS_WITH(tree_unflatten(t, std::vector<double>(8)),
                    doctest::Contains("tree_unflatten: the structure has 9 leaves, but 8 were given"));

  // Arrays are leaves too: flatten and unflatten move them through unchanged.
  const Net<Array> net{{f32({1, 2}), Array(3.0f)}, {Array(4.0f), f32({5, 6, 7})}};
  const std::vector<Array> arrays = tree_flatten(net);
  REQUIRE(arrays.size() == 4);
  CHECK(arrays[3].to_vector<float>() == std::vector<float>{5, 6, 7});
  const Net<Array> again = tree_unflatten(net, arrays);
  CHECK(again.rest[1].identical(net.rest[1]));
  const Net<int64_t> sizes = tree_map([](const Array& a) { return a.size(); }, net);
  CHECK(sizes.first.w == 2);
  CHECK(sizes.rest[1] == 3);
}

TEST_CASE("tree: optional leaves and std::nullopt") {
  const std::tuple<std::optional<Array>, std::vector<std::optional<Array>>, std::nullopt_t> t{
      Array(1.0f), {std::nullopt, Array(2.0f)}, std::nullopt};
  CHECK(tree_leaf_count(t) == 4);
  std::vector<bool> present;
  tree_for_each(t, [&](const auto& leaf) {
    if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, std::nullopt_t>) present.push_back(false);
    else present.push_back(leaf.has_value());
  });
  CHECK(present == std::vector<bool>{true, false, true, false});
  const auto values = tree_map(
      [](const auto& leaf) -> double {
        if constexpr (std::is_same_v<std::decay_t<decltype(leaf)>, std::nullopt_t>) return -1;
        else return leaf ? leaf->template item<double>() : -1;
      },
      t);
  CHECK(std::get<0>(values) == 1);
  CHECK(std::get<1>(values) == std::vector<double>{-1, 2});
  CHECK(std::get<2>(values) == -1);
}

TEST_CASE("tree: a class template registered with ADJIT_TREE_TEMPLATE through jit and grad on Arrays") {
  // [snippet:layer-jit]
  auto step = jit([](const Layer<Tensor>& p, const Tensor& x) { return Layer<Tensor>{p.w * x, p.b + 1.0f}; });
  const Layer<Array> r = step(Layer<Array>{f32({1, 2}), Array(0.5f)}, f32({3, 4}));
  CHECK(r.w.to_vector<float>() == std::vector<float>{3, 8});
  CHECK(r.b.item<float>() == 1.5f);

  auto df = grad([](const Layer<Tensor>& p, const Tensor& x) { return sum(p.w * x) * p.b; });
  const Layer<Array> g = df(Layer<Array>{f32({1, 2}), Array(0.5f)}, f32({3, 4}));
  // [/snippet:layer-jit]
  CHECK(g.w.to_vector<float>() == std::vector<float>{1.5f, 2.0f});
  CHECK(g.b.item<float>() == 11.0f);

  // A nested template with a vector: the compiled call returns Net<Array>.
  auto grow = jit([](const Net<Tensor>& n) {
    Net<Tensor> out = n;
    for (Tensor& t : out.rest) t = t * 2.0f;
    out.rest.push_back(n.first.w + n.first.b);
    return out;
  });
  const Net<Array> grown = grow(Net<Array>{{f32({1, 2}), Array(3.0f)}, {Array(4.0f)}});
  REQUIRE(grown.rest.size() == 2);
  CHECK(grown.rest[0].item<float>() == 8.0f);
  CHECK(grown.rest[1].to_vector<float>() == std::vector<float>{4, 5});
  CHECK(grown.first.w.to_vector<float>() == std::vector<float>{1, 2});
}

TEST_CASE("tree: a struct registered with ADJIT_TREE through grad, value_and_grad and a jitted call in a trace") {
  // [snippet:params-in-trace]
  auto update = jit([](const Params& p, const Tensor& x) { return Params{p.w - 0.5f * x, p.b * 2.0f}; });
  auto f = jit([&](const Tensor& w, const Tensor& b, const Tensor& x) {
    const Params p{w, b};
    const Params g = grad(tree_test::loss)(p, x);
    auto [value, g2] = value_and_grad(tree_test::loss)(p, x);
    const Params q = update(p, x);
    return std::make_tuple(g.w, g.b, value, g2.w, g2.b, q.w, q.b);
  });
  // [/snippet:params-in-trace]
  auto [gw, gb, value, gw2, gb2, qw, qb] = f(f32({1, 2}), Array(0.5f), f32({3, 4}));
  CHECK(gw.to_vector<float>() == std::vector<float>{1.5f, 2.0f});
  CHECK(gb.item<float>() == 11.0f);
  CHECK(value.item<float>() == 5.5f);
  CHECK(gw2.to_vector<float>() == std::vector<float>{1.5f, 2.0f});
  CHECK(gb2.item<float>() == 11.0f);
  CHECK(qw.to_vector<float>() == std::vector<float>{-0.5f, 0.0f});
  CHECK(qb.item<float>() == 1.0f);
}

TEST_CASE("tree: a registered struct as a scan carry, differentiated") {
  // carry (w, b) -> (w + x, 2 b), y = sum(w); after the three rows of xs:
  // w + [6, 6], 8 b; L = sum(final w) * final b = (w0 + w1 + 12) * 8 b.
  // [snippet:params-scan]
  auto run = [](const Params& init, const Tensor& xs) {
    auto body = [](const Params& c, const Tensor& x) { return std::pair{Params{c.w + x, c.b * 2.0f}, sum(c.w)}; };
    return scan(body, init, xs);
  };
  // [/snippet:params-scan]
  auto f = jit([&](const Tensor& w, const Tensor& b, const Tensor& xs) {
    auto [carry, ys] = run(Params{w, b}, xs);
    const Params g = grad([&](const Params& p) {
      auto [c, y] = run(p, xs);
      return sum(c.w) * c.b;
    })(Params{w, b});
    return std::make_tuple(carry.w, carry.b, ys, g.w, g.b);
  });
  auto [w, b, ys, gw, gb] = f(f32({1, 2}), Array(0.5f), f32({1, 1, 2, 2, 3, 3}, {3, 2}));
  CHECK(w.to_vector<float>() == std::vector<float>{7, 8});
  CHECK(b.item<float>() == 4.0f);
  CHECK(ys.to_vector<float>() == std::vector<float>{3, 5, 9});
  CHECK(gw.to_vector<float>() == std::vector<float>{4, 4});
  CHECK(gb.item<float>() == 120.0f);
}

TEST_CASE("tree: a scan carry of another structure is an Error naming the struct") {
  auto f = jit([](const Tensor& w, const Tensor& b, const Tensor& xs) {
    auto body = [](const Params& c, const Tensor& x) { return std::pair{Params{c.w + x, cast(c.b, DType::f64)}, c.b}; };
    return scan(body, Params{w, b}, xs).second;
  });
  CHECK_THROWS_WITH(f(f32({1, 2}), Array(0.5f), f32({1, 1}, {1, 2})),
                    doctest::Contains("(the body returned Params of (f32[2], f64[]); the initial carry is Params of "
                                      "(f32[2], f32[]))"));
}

TEST_CASE("tree: cond and fori_loop with registered structs") {
  auto f = jit([](const Tensor& w, const Tensor& b, const Tensor& pred) {
    const Params r = cond(
        pred, [](const Params& q) { return Params{q.w * 2.0f, q.b}; }, [](const Params& q) { return Params{q.w, q.b * 3.0f}; },
        Params{w, b});
    const Params l = fori_loop(0, 3, [](const Tensor&, const Params& c) { return Params{c.w + c.b, c.b}; }, Params{w, b});
    return std::make_tuple(r.w, r.b, l.w);
  });
  auto [w1, b1, l1] = f(f32({1, 2}), Array(0.5f), Array(true));
  CHECK(w1.to_vector<float>() == std::vector<float>{2, 4});
  CHECK(b1.item<float>() == 0.5f);
  CHECK(l1.to_vector<float>() == std::vector<float>{2.5f, 3.5f});
  auto [w2, b2, l2] = f(f32({1, 2}), Array(0.5f), Array(false));
  CHECK(w2.to_vector<float>() == std::vector<float>{1, 2});
  CHECK(b2.item<float>() == 1.5f);
}

TEST_CASE("tree: custom_gradient taking and returning registered structs") {
  // Takes Params: grad_fn returns the gradients in the arguments' structure
  // (a deliberately different rule, so the test sees it is used), and
  // std::nullopt for x.
  auto scaled = custom_gradient([](const Params& p, const Tensor& x) {
    auto grad_fn = [x](const Tensor& dy) { return std::make_tuple(Params{dy * 10.0f * x, dy * sum(x)}, std::nullopt); };
    return std::make_pair(sum(p.w * x) * p.b, grad_fn);
  });
  // Returns Params: grad_fn takes one cotangent per leaf.
  auto twice = custom_gradient([](const Params& p) {
    auto grad_fn = [](const Tensor& dw, const Tensor& db) { return Params{dw * 2.0f, db * 3.0f}; };
    return std::make_pair(Params{p.w * 2.0f, p.b * 3.0f}, grad_fn);
  });
  auto f = jit([&](const Tensor& w, const Tensor& b, const Tensor& x) {
    const Params g = grad([&](const Params& p) { return scaled(p, x); })(Params{w, b});
    const Params h = grad([&](const Params& p) {
      const Params q = twice(p);
      return sum(q.w) + q.b;
    })(Params{w, b});
    return std::make_tuple(g.w, g.b, h.w, h.b);
  });
  auto [gw, gb, hw, hb] = f(f32({1, 2}), Array(0.5f), f32({3, 4}));
  CHECK(gw.to_vector<float>() == std::vector<float>{30, 40});
  CHECK(gb.item<float>() == 7.0f);
  CHECK(hw.to_vector<float>() == std::vector<float>{2, 2});
  CHECK(hb.item<float>() == 3.0f);
}

TEST_CASE("tree: GradientTape gradients in a registered template's structure") {
  bool bHasGradient = true;
  auto f = jit([&](const Tensor& w, const Tensor& b, const Tensor& x) {
    GradientTape tape;
    tape.watch(w);
    const Tensor y = sum(w * x) * b;
    const Layer<std::optional<Tensor>> g = tape.gradient(y, Layer<Tensor>{w, b});
    bHasGradient = g.b.has_value();
    return *g.w;
  });
  CHECK(f(f32({1, 2}), Array(0.5f), f32({3, 4})).to_vector<float>() == std::vector<float>{1.5f, 2.0f});
  CHECK_FALSE(bHasGradient); // b is not watched: no gradient
}
