// test/unit/test_variables.cpp — variables: implicit inputs, write-back,
// identity, and gradients with respect to them.
#include "Check.h"

using namespace adjit;
using namespace adjit::test;

static double scalar(const Array& a) { return a.item<double>(); }

TEST_CASE("a variable is an implicit input, and an assignment is written back after the call") {
  Variable counter("counter", Array(0.0));
  Variable scale("scale", Array(2.0));
  auto step = jit([counter, scale](Tensor x) {
    Tensor c = counter.read();
    counter.assign(c + 1.0);
    return x * scale.read() + c;
  });
  CHECK(scalar(step(10.0)) == 20.0);
  CHECK(scalar(counter.value()) == 1.0);
  CHECK(scalar(step(10.0)) == 21.0);
  CHECK(scalar(counter.value()) == 2.0);
  CHECK(step.cache_size() == 1); // the same kernel, reading the current value each call
  Variable alias = counter;
  CHECK(alias == counter);
  CHECK(!(alias == scale));
  // A read after an assignment sees the new value.
  auto twice = jit([counter](Tensor x) {
    counter.assign(counter.read() * 10.0);
    return counter.read() + x;
  });
  CHECK(scalar(twice(0.5)) == 20.5);
  CHECK(scalar(counter.value()) == 20.0);
}

TEST_CASE("variable errors") {
  Variable v("w", Array(std::vector<float>{1, 2}));
  CHECK_THROWS_WITH_AS(jit([v](Tensor x) { return v.assign(x); })(1.0f),
                       doctest::Contains("variable 'w': assign expected f32[2], got f32[]"), Error);
  CHECK_THROWS_WITH_AS(v.read(), doctest::Contains("variable: read or assigned outside of a trace (use value() outside)"), Error);
}

TEST_CASE("gradients with respect to variables: tape and grad") {
  Variable w("w", Array(std::vector<double>{1, 2}));
  Variable frozen("frozen", Array(3.0), /*trainable=*/false);
  auto f = jit([w, frozen](Tensor x) {
    GradientTape tape(/*persistent=*/true);
    Tensor y = sum(w.read() * x) * frozen.read();
    Tensor dw = *tape.gradient(y, w);                // x * frozen
    CHECK(!tape.gradient(y, frozen).has_value());     // not trainable: not watched
    return dw;
  });
  CHECK(f(f64({5, 7})).to_vector<double>() == std::vector<double>{15, 21});
  auto loss = [w](Tensor x) { return sum(w.read() * w.read() * x); };
  auto [v, g] = value_and_grad(loss, {w})(f64({1, 10}));
  CHECK(scalar(v) == 41.0);
  CHECK(g[0].to_vector<double>() == std::vector<double>{2, 40});
  CHECK(grad(loss, {w, frozen})(f64({1, 10}))[1].item<double>() == 0.0); // unused: zeros
}

TEST_CASE("custom_gradient with variables: the documented weights example") {
  Variable weights("weights", Array(std::vector<float>{1, 1}));
  auto linearPoly = custom_gradient([weights](Tensor x) {
    Tensor w = weights.read();
    Tensor poly = w[1] * x + w[0];
    auto gradFn = [x, w](Tensor dpoly, const std::vector<Variable>& variables) {
      CHECK(variables.size() == 1);
      Tensor gradXs = dpoly * w[1];
      Tensor powers = stack({pow(x, ones_like(x)), pow(x, zeros_like(x))});
      Tensor gradVars = sum(reshape(dpoly * powers, {2, -1}), {1});
      return std::make_pair(gradXs, std::vector<Tensor>{gradVars});
    };
    return std::make_pair(poly, gradFn);
  });
  auto f = jit([linearPoly, weights](Tensor x) {
    GradientTape tape(/*persistent=*/true);
    tape.watch(x);
    Tensor poly = linearPoly(x);
    return std::make_tuple(poly, *tape.gradient(poly, x), *tape.gradient(poly, weights));
  });
  auto [poly, dx, dw] = f(f32({1, 2, 3}));
  CHECK(poly.to_vector<float>() == std::vector<float>{2, 3, 4});
  CHECK(dx.to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(dw.to_vector<float>() == std::vector<float>{6, 3}); // what the user's VJP says (the true gradient is [3, 6])
}

TEST_CASE("custom_gradient with variables: grad_fn must take them and return one gradient each") {
  Variable w("w", Array(2.0));
  int line = __LINE__ + 1;
  auto noVars = custom_gradient([w](Tensor x) { return std::make_pair(x * w.read(), [](Tensor dy) { return dy; }); });
  try {
    jit([noVars](Tensor x) { return noVars(x); })(1.0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.message() == "custom_gradient grad_fn must accept argument 'variables', since function uses variables: w");
    CHECK(e.location().line == static_cast<uint32_t>(line));
  }
  auto tooFew = custom_gradient([w](Tensor x) {
    auto gradFn = [](Tensor dy, const std::vector<Variable>&) { return std::make_pair(dy, std::vector<Tensor>{}); };
    return std::make_pair(x * w.read(), gradFn);
  });
  CHECK_THROWS_WITH_AS(grad(tooFew)(1.0), doctest::Contains("Must return gradient for each variable from custom_gradient grad_fn."), Error);
}

TEST_CASE("grad_pass_through: an assignment inside, variables get no gradient") {
  Variable x("x", Array(1.0)), z("z", Array(3.0));
  auto passThroughAssign = grad_pass_through([x](Tensor v) { return x.assign(v); });
  auto f = jit([x, z, passThroughAssign](Tensor unused) {
    GradientTape tape;
    Tensor zv = z.read();
    Tensor y = passThroughAssign(zv * zv);
    return std::make_tuple(y, *tape.gradient(y, z) + unused * 0.0);
  });
  auto [y, dydz] = f(0.0);
  CHECK(scalar(y) == 9.0);
  CHECK(scalar(dydz) == 6.0);
  CHECK(scalar(x.value()) == 9.0);

  // A moving average: its gradient with respect to the latest input is 1.
  Variable avg("avg", Array(0.0), /*trainable=*/false);
  auto update = grad_pass_through([avg](Tensor v) {
    Tensor a = avg.read() * 0.9 + v * 0.1;
    avg.assign(a);
    return a;
  });
  auto [value, g] = value_and_grad([update](Tensor v) { return update(v); })(5.0);
  CHECK(scalar(value) == doctest::Approx(0.5));
  CHECK(scalar(g) == 1.0);
  CHECK(scalar(avg.value()) == doctest::Approx(0.5));
}
