// test/unit/test_inplace.cpp — dynamic_update_slice updating its operand in
// place (codegen::InPlace): the plan gives the result the operand's buffer
// only where nothing reads that buffer afterwards, and results equal the
// interpreter's in every case that forbids it (the operand read again, an
// argument, a constant, viewed, read by the update itself, read by a later
// kernel, an output), in chains of updates, and in scan and fori_loop bodies
// with gradients.
#include "Check.h"

#include <numeric>

using namespace adjit;
using namespace adjit::test;

namespace {

/// The plan's kernels that write a dynamic_update_slice: `inPlace` of them
/// into their operand's buffer, `copies` into one of their own.
struct Updates {
  int inPlace = 0, copies = 0;
  int shared = 0; ///< outputs a caller may pass in a parameter's buffer (a loop body's carry)
};
Updates updatesIn(const std::string& plan) {
  Updates u;
  std::size_t at = 0;
  while (at < plan.size()) {
    const std::size_t end = std::min(plan.find('\n', at), plan.size());
    const std::string line = plan.substr(at, end - at);
    at = end + 1;
    if (line.find("may share the buffer of param") != std::string::npos) ++u.shared;
    if (line.find("dynamic_update_slice") == std::string::npos) continue;
    if (line.find("update in place") != std::string::npos) ++u.inPlace;
    else if (line.find(" write ") != std::string::npos) ++u.copies;
  }
  return u;
}

/// Checks that the JIT (at -O2 and -O0) computes what the interpreter does
/// (products round alike up to the vector width: relative 1e-12 in f64) and
/// returns the plan of the -O2 compilation.
template <class F, class... A> std::string agrees(F f, const A&... args) {
  Module m = trace(f, args.type()...);
  m.verify();
  const std::vector<Array> want = m.interpret("f", {Array(args)...});
  for (int level : {2, 0}) {
    const Array got = jit(f, {.opt_level = level})(args...);
    ADJIT_CHECK_CLOSE(got, want.at(0), 1e-12);
  }
  return jit(f).lower(args...).plan;
}

Array counting(Shape s, double scale) {
  std::vector<double> v(static_cast<std::size_t>(num_elements(s)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * (static_cast<double>(i % 7) - 3.0) + 0.01 * static_cast<double>(i);
  return Array(v, s);
}

const Array a = counting({6, 4}, 0.5), b = counting({4, 5}, -0.25), u = counting({2, 5}, 1.5);

} // namespace

TEST_CASE("in place: an update of a value the function computes and reads there last writes the window into its buffer") {
  // x is a matmul's result, read by the update only: the result is x's buffer
  auto f = [](Tensor a, Tensor b, Tensor u, Tensor i) { return dynamic_update_slice(matmul(a, b), u, {i, i}) * 2.0; };
  for (int32_t i : {0, 3, 4, 9, -2}) {
    CAPTURE(i);
    const std::string plan = agrees(f, a, b, u, Array(i));
    const Updates n = updatesIn(plan);
    CHECK(n.inPlace == 1);
    CHECK(n.copies == 0);
  }
  // an update read before, by a kernel that runs earlier: still in place
  auto earlier = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    Tensor s = sum(x);
    return dynamic_update_slice(x, u, {i, i}) * s;
  };
  CHECK(updatesIn(agrees(earlier, a, b, u, Array(int32_t{2}))).inPlace == 1);
  // a chain of updates, each into the first one's buffer (an unrolled ring buffer)
  auto chain = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    for (int k = 0; k < 4; ++k) x = dynamic_update_slice(x, u * static_cast<double>(k + 1), {i + full({}, k, DType::i32), i});
    return x + 1.0;
  };
  const Updates n = updatesIn(agrees(chain, a, b, u, Array(int32_t{1})));
  CHECK(n.inPlace == 4);
  CHECK(n.copies == 0);
}

TEST_CASE("in place: never where the operand's buffer is read afterwards or is not the function's") {
  const Array i(int32_t{1});
  // x read again after the update: the update is computed where it is read
  auto readAfter = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    return dynamic_update_slice(x, u, {i, i}) + x;
  };
  CHECK(updatesIn(agrees(readAfter, a, b, u, i)).inPlace == 0);
  // x read by an elementwise op before the update in program order, fused
  // into the loop that reads the update: that kernel runs after it
  auto fusedReader = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    Tensor s = x * 3.0;
    return dynamic_update_slice(x, u, {i, i}) + s;
  };
  CHECK(updatesIn(agrees(fusedReader, a, b, u, i)).inPlace == 0);
  // x read by a kernel one level later than the update's (it waits for
  // another matmul): the update copies x into a buffer of its own
  auto laterKernel = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    Tensor q = matmul(matmul(a, transpose(a)), x);
    Tensor w = sum(x * q);
    return dynamic_update_slice(x, u, {i, i}) * w;
  };
  const Updates later = updatesIn(agrees(laterKernel, a, b, u, i));
  CHECK(later.inPlace == 0);
  CHECK(later.copies == 1);
  // x an argument of the function: the caller's buffer is never written
  auto argument = [](Tensor x, Tensor u, Tensor i) { return dynamic_update_slice(x, u, {i, i}) * 2.0; };
  const Array x = counting({4, 5}, 1.0);
  CHECK(updatesIn(agrees(argument, x, u, i)).inPlace == 0);
  Array before = x;
  jit(argument)(x, u, i);
  CHECK(bytesOf(x) == bytesOf(before));
  // x a constant: its global is never written, and a second call sees it unchanged
  auto fromConstant = [](Tensor u, Tensor i) {
    Tensor c = adjit::constant(counting({4, 5}, 2.0));
    return dynamic_update_slice(c, u, {i, i}) * 2.0;
  };
  CHECK(updatesIn(agrees(fromConstant, u, i)).inPlace == 0);
  auto jc = jit(fromConstant);
  const Array first = jc(u, i);
  CHECK(bytesOf(jc(u, Array(int32_t{3}))) != bytesOf(first));
  CHECK(bytesOf(jc(u, i)) == bytesOf(first));
  // x viewed (a reshape of it) and the view read after the update
  auto viewed = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    Tensor v = reshape(x, {30});
    Tensor r = dynamic_update_slice(x, u, {i, i});
    return sum(r) + v;
  };
  CHECK(updatesIn(agrees(viewed, a, b, u, i)).inPlace == 0);
  // the update computed from x at other indices: rows of x (a view of its
  // buffer), or a column window (read inline)
  auto fromRows = [](Tensor a, Tensor b, Tensor i) {
    Tensor x = matmul(a, b);
    return dynamic_update_slice(x, slice(x, {2, 0}, {4, 5}), {i, i}) * 2.0;
  };
  CHECK(updatesIn(agrees(fromRows, a, b, i)).inPlace == 0);
  auto fromColumns = [](Tensor a, Tensor b, Tensor i) {
    Tensor x = matmul(a, b);
    return dynamic_update_slice(x, slice(x, {0, 1}, {2, 4}) + 1.0, {i, i}) * 2.0;
  };
  CHECK(updatesIn(agrees(fromColumns, a, b, i)).inPlace == 0);
  auto shifted = [](Tensor a, Tensor b, Tensor i) {
    Tensor x = matmul(a, b);
    return dynamic_update_slice(x, dynamic_slice(x, {i, i}, {2, 5}), {i + full({}, 1, DType::i32), i}) * 2.0;
  };
  CHECK(updatesIn(agrees(shifted, a, b, Array(int32_t{0}))).inPlace == 0);
  // x an output of the function too
  auto output = [](Tensor a, Tensor b, Tensor u, Tensor i) {
    Tensor x = matmul(a, b);
    return std::pair{dynamic_update_slice(x, u, {i, i}) * 2.0, x};
  };
  auto [r0, x0] = jit(output)(a, b, u, i);
  Module m = trace(output, a.type(), b.type(), u.type(), i.type());
  const std::vector<Array> want = m.interpret("f", {a, b, u, i});
  ADJIT_CHECK_CLOSE(r0, want.at(0), 1e-12);
  ADJIT_CHECK_CLOSE(x0, want.at(1), 1e-12);
  CHECK(updatesIn(jit(output).lower(a, b, u, i).plan).inPlace == 0);
  // the update's result an output: the product is computed into the
  // caller's buffer for it, where the update writes the window
  auto resultOut = [](Tensor a, Tensor b, Tensor u, Tensor i) { return dynamic_update_slice(matmul(a, b), u, {i, i}); };
  CHECK(updatesIn(agrees(resultOut, a, b, u, i)).inPlace == 1);
}

TEST_CASE("in place: a ring buffer in scan and in fori_loop, values and gradients") {
  // buf <- W buf with the newest input in slot t % 4: the product is the
  // body's own buffer, which the update writes in place
  auto ring = [](Tensor w, Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      auto [buf, t] = c;
      Tensor slot = t - (t / 4) * 4;
      Tensor next = dynamic_update_slice(matmul(w, buf), reshape(x, {1, 3}), {slot, full({}, 0, DType::i32)});
      return std::pair{std::pair{next, t + full({}, 1, DType::i32)}, sum(next * next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({4, 3}, 0.0, DType::f64), full({}, 0, DType::i32)}, xs);
    return sum(ys) + sum(carry.first);
  };
  const Array w = counting({4, 4}, 0.1), xs = counting({7, 3}, 0.3);
  CHECK(updatesIn(agrees(ring, w, xs)).inPlace >= 1); // the body's update writes the product's buffer
  check_grads(ring, std::tuple{w, xs}, {.order = 1, .modes = {"rev", "fwd"}});
  // the same in fori_loop, the buffer a carry updated at the loop index
  auto fori = [](Tensor w, Tensor xs) {
    return sum(fori_loop(0, 6, [&](Tensor i, Tensor buf) {
      Tensor slot = i - (i / 4) * 4;
      return dynamic_update_slice(tanh(matmul(w, buf)), dynamic_slice(xs, {i, full({}, 0, DType::i32)}, {1, 3}),
                                  {slot, full({}, 0, DType::i32)});
    }, full({4, 3}, 0.5, DType::f64)));
  };
  CHECK(updatesIn(agrees(fori, w, xs)).inPlace == 0); // tanh's loop computes the update's elements too
  check_grads(fori, std::tuple{w, xs}, {.order = 1, .modes = {"rev", "fwd"}});
  // the plain ring buffer (the carry is the body's argument: copied, see the guide)
  auto plain = [](Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      auto [buf, t] = c;
      Tensor next = dynamic_update_slice(buf, reshape(x, {1, 3}), {t - (t / 4) * 4, full({}, 0, DType::i32)});
      return std::pair{std::pair{next, t + full({}, 1, DType::i32)}, sum(next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({4, 3}, 0.0, DType::f64), full({}, 0, DType::i32)}, xs);
    return sum(ys * ys) + sum(carry.first);
  };
  CHECK(updatesIn(agrees(plain, xs)).shared >= 1);
  check_grads(plain, std::tuple{xs}, {.order = 2, .modes = {"rev", "fwd"}});
}

TEST_CASE("in place across steps: a loop body that updates its carry as its last read of it shares the carry's buffer") {
  const Array xs = counting({9, 3}, 0.7);
  // the ring buffer: the body's output 0 may be its parameter 0's buffer
  auto ring = [](Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      auto [buf, t] = c;
      Tensor next = dynamic_update_slice(buf, reshape(x, {1, 3}), {t - (t / 4) * 4, full({}, 0, DType::i32)});
      return std::pair{std::pair{next, t + full({}, 1, DType::i32)}, sum(next * next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({4, 3}, 0.5, DType::f64), full({}, 0, DType::i32)}, xs);
    return sum(ys) + sum(carry.first * carry.first);
  };
  const std::string plan = agrees(ring, xs);
  CHECK(plan.find("output 0 may share the buffer of param 0") != std::string::npos);
  check_grads(ring, std::tuple{xs}, {.order = 1, .modes = {"rev", "fwd"}});
  // the body reads the old carry after the update: no sharing
  auto readAfter = [](Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      auto [buf, t] = c;
      Tensor next = dynamic_update_slice(buf, reshape(x, {1, 3}), {t - (t / 4) * 4, full({}, 0, DType::i32)});
      return std::pair{std::pair{next, t + full({}, 1, DType::i32)}, sum(buf * buf) + sum(next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({4, 3}, 0.5, DType::f64), full({}, 0, DType::i32)}, xs);
    return sum(ys) + sum(carry.first);
  };
  CHECK(updatesIn(agrees(readAfter, xs)).shared == 0);
  // a shift register: the update is read from the carry itself
  auto shift = [](Tensor xs) {
    auto body = [&](Tensor buf, Tensor x) {
      Tensor moved = dynamic_update_slice(buf, slice(buf, {1, 0}, {4, 3}), {full({}, 0, DType::i32), full({}, 0, DType::i32)});
      Tensor next = dynamic_update_slice(moved, reshape(x, {1, 3}), {full({}, 3, DType::i32), full({}, 0, DType::i32)});
      return std::pair{next, sum(next)};
    };
    auto [carry, ys] = scan(body, full({4, 3}, 0.0, DType::f64), xs);
    return sum(ys) + sum(carry * carry);
  };
  agrees(shift, xs);
  check_grads(shift, std::tuple{xs}, {.order = 1, .modes = {"rev", "fwd"}});
  // the carry also returned unchanged as another carry: no sharing
  auto twice = [](Tensor xs) {
    auto body = [&](const std::pair<Tensor, Tensor>& c, Tensor x) {
      Tensor next = dynamic_update_slice(c.first, reshape(x, {1, 3}), {full({}, 1, DType::i32), full({}, 0, DType::i32)});
      return std::pair{std::pair{next, c.first}, sum(next)};
    };
    auto [carry, ys] = scan(body, std::pair{full({4, 3}, 0.5, DType::f64), full({4, 3}, 0.0, DType::f64)}, xs);
    return sum(ys) + sum(carry.first) + sum(carry.second * 2.0);
  };
  CHECK(updatesIn(agrees(twice, xs)).shared == 0);
  // while_loop: the buffer filled at the loop counter until it is full
  auto fill = [](Tensor xs) {
    auto [i, buf] = while_loop([](const std::pair<Tensor, Tensor>& s) { return lt(s.first, full({}, 6, DType::i32)); },
                               [&](const std::pair<Tensor, Tensor>& s) {
                                 Tensor row = dynamic_slice(xs, {s.first, full({}, 0, DType::i32)}, {1, 3});
                                 return std::pair{s.first + full({}, 1, DType::i32),
                                                  dynamic_update_slice(s.second, row * 2.0, {s.first, full({}, 0, DType::i32)})};
                               },
                               std::pair{full({}, 0, DType::i32), full({6, 3}, 0.0, DType::f64)}, {.max_iterations = 8});
    (void)i;
    return buf;
  };
  CHECK(updatesIn(agrees(fill, xs)).shared >= 1);
  auto fillLoss = [&](Tensor xs) { return sum(fill(xs) * fill(xs)); };
  check_grads(fillLoss, std::tuple{xs}, {.order = 1, .modes = {"rev", "fwd"}});
}
