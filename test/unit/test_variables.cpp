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
