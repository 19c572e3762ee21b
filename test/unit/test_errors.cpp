// test/unit/test_errors.cpp — user mistakes raise adjit::Error with the op, the
// expected and actual types, and the user's source line. One case per error.
#include "Check.h"

using namespace adjit;
using test::errorOf;

static const Type F3{DType::f32, {3}}, F4{DType::f32, {4}};

TEST_CASE("shape mismatch names the op, both types and the source line") {
  int line = 0;
  Error e = errorOf([&] {
    trace([&](Tensor a, Tensor b) { line = __LINE__; return a + b; }, F3, F4);
  });
  CHECK(e.message() == "add: incompatible shapes f32[3] and f32[4]");
  CHECK(e.location().line == static_cast<uint32_t>(line));
  CHECK(std::string(e.location().file).find("test_errors.cpp") != std::string::npos);
  CHECK(std::string(e.what()).find("test_errors.cpp:" + std::to_string(line)) != std::string::npos);
}

TEST_CASE("dtype mismatch") {
  Error e = errorOf([] { trace([](Tensor a, Tensor b) { return mul(a, b); }, F3, Type{DType::f64, {3}}); });
  CHECK(e.message() == "mul: mismatched dtypes f32[3] and f64[3]; use cast(x, DType::f64) to convert one of them");
  CHECK(e.location().line == __LINE__ - 2);
  // The hint names the dtype that holds both: floating over integer, then the wider.
  CHECK(errorOf([] { trace([](Tensor a, Tensor b) { return a < b; }, Type{DType::i64, {3}}, F3); }).message() ==
        "lt: mismatched dtypes i64[3] and f32[3]; use cast(x, DType::f32) to convert one of them");
  CHECK(errorOf([] { trace([](Tensor a, Tensor b) { return matmul(a, b); }, Type{DType::f64, {2, 3}}, Type{DType::f32, {3, 2}}); })
            .message() == "matmul: mismatched dtypes f64[2,3] and f32[3,2]; use cast(x, DType::f64) to convert one of them");
  // Logical ops need i1 operands: no hint to cast one to the other's dtype.
  CHECK(errorOf([] { trace([](Tensor a, Tensor b) { return logical_and(a > 0.0f, b); }, F3, F3); }).message() ==
        "and: expected i1 operands, got f32[3]");
}

TEST_CASE("float op on integers, float scalar with integer tensor") {
  CHECK(errorOf([] { trace([](Tensor a) { return exp(a); }, Type{DType::i32, {2}}); }).message() ==
        "exp: expected a floating-point operand, got i32[2]");
  CHECK(errorOf([] { trace([](Tensor a) { return a * 0.5; }, Type{DType::i32, {2}}); }).message() ==
        "mul: cannot combine the floating-point scalar 0.5 with the integer tensor i32[2]; cast one of them");
}

TEST_CASE("reshape that does not preserve size, bad -1") {
  CHECK(errorOf([] { trace([](Tensor a) { return reshape(a, {2, 2}); }, F3); }).message() ==
        "reshape: cannot reshape f32[3] (3 elements) to [2,2] (4 elements)");
  CHECK(errorOf([] { trace([](Tensor a) { return reshape(a, {2, -1}); }, F3); }).message() ==
        "reshape: cannot reshape f32[3] (3 elements) to [2,-1]");
}

TEST_CASE("out-of-range axes and indices") {
  CHECK(errorOf([] { trace([](Tensor a) { return sum(a, {1}); }, F3); }).message() ==
        "reduce_sum: axis 1 is out of range for an operand of rank 1");
  CHECK(errorOf([] { trace([](Tensor a) { return concatenate({a, a}, 2); }, F3); }).message() ==
        "concatenate: axis 2 is out of range for rank 1");
  CHECK(errorOf([] { trace([](Tensor a) { return a[3]; }, F3); }).message() ==
        "index: index 3 is out of range for axis 0 of size 3 (f32[3])");
  CHECK(errorOf([] { trace([](Tensor a) { return transpose(a, {0, 1}); }, F3); }).message() ==
        "transpose: axis 1 is out of range for rank 1");
}

TEST_CASE("matmul shapes: the contracting axes that disagree, in the operands as given") {
  auto mm = [](Shape a, Shape b, MatmulOptions o = {}) {
    return errorOf([&] { trace([&](Tensor x, Tensor y) { return matmul(x, y, o); }, Type{DType::f32, a}, Type{DType::f32, b}); })
        .message();
  };
  CHECK(mm({32, 100}, {784, 128}) == "matmul: the contracting axes disagree: axis 1 of f32[32,100] has 100, but axis 0 of f32[784,128] has 784");
  CHECK(mm({100, 32}, {784, 128}, {.transpose_a = true}) ==
        "matmul: the contracting axes disagree: axis 0 of f32[100,32] (transpose_a) has 100, but axis 0 of f32[784,128] has 784");
  CHECK(mm({32, 100}, {128, 784}, {.transpose_b = true}) ==
        "matmul: the contracting axes disagree: axis 1 of f32[32,100] has 100, but axis 1 of f32[128,784] (transpose_b) has 784");
  CHECK(mm({5, 32, 100}, {784}) == "matmul: the contracting axes disagree: axis 2 of f32[5,32,100] has 100, but axis 0 of f32[784] has 784");
  // The same rule in IR text, where both operands have one rank.
  Error e = errorOf([] {
    Module::parse("func @f(%a: f32[32,100], %b: f32[128,784]) -> (f32[32,128]) {\n"
                  "  %c = matmul(%a, %b) {transpose_b = true} : f32[32,128]\n  return %c\n}");
  });
  CHECK(e.message() == "matmul: the contracting axes disagree: axis 1 of f32[32,100] has 100, but axis 1 of f32[128,784] (transpose_b) has 784");
  CHECK(e.location().line == 2);
}

TEST_CASE("jitted function called with the wrong kind of arguments") {
  // The wrong number is a compile-time error (test/compile_fail/jit_arity.cpp).
  auto f = jit([](Tensor a, Tensor b) { return a + b; }, {.name = "plus"});
  CHECK(errorOf([&] { f(Array(1.0f), Array(2.0)); }).message() ==
        "add: mismatched dtypes f32[] and f64[]; use cast(x, DType::f64) to convert one of them");
}

TEST_CASE("grad's mistakes found while tracing point at the line that called grad") {
  auto nonScalar = grad([](Tensor a) { return a * a; });
  uint32_t line = __LINE__ - 1;
  Error e = errorOf([&] { nonScalar(Array(std::vector<float>{1, 2})); });
  CHECK(e.message() == "grad: the function must return a floating-point scalar, got f32[2]");
  CHECK(e.location().line == line);
  CHECK(std::string(e.location().file).find("test_errors.cpp") != std::string::npos);

  auto integer = value_and_grad([](Tensor a, Tensor b) { return sum(a * cast(b, DType::f32)); }, argnums<0, 1>);
  line = __LINE__ - 1;
  e = errorOf([&] { integer(Array(1.0f), Array(int32_t{2})); });
  CHECK(e.message() == "value_and_grad: argument 1 has dtype i32; only floating-point arguments can be differentiated");
  CHECK(e.location().line == line);

  Variable v("v", Array(1.0f));
  auto ofVariables = grad([&](Tensor a) { return a * v.read(); }, std::vector<Variable>{v});
  line = __LINE__ - 1;
  e = errorOf([&] { ofVariables(Array(std::vector<float>{1, 2})); });
  CHECK(e.location().line == line);
}

TEST_CASE("a vjp cotangent of the wrong type is reported at the line that passed it") {
  auto f = [](Tensor a) { return a * a; };
  auto [y, back] = vjp(f, Array(std::vector<float>{1, 2}));
  Error e = errorOf([&, &back = back] { back(Array(1.0f)); });
  CHECK(e.message() == "vjp: the cotangent must have the output's type f32[2], got f32[]");
  CHECK(e.location().line == __LINE__ - 2);

  e = errorOf([&] {
    trace([&](Tensor a) {
      auto [ya, backA] = vjp(f, a);
      return backA(sum(ya))[0];
    }, F3);
  });
  CHECK(e.message() == "vjp: the cotangent must have the output's type f32[3], got f32[]");
  CHECK(e.location().line == __LINE__ - 4);
}

TEST_CASE("tensors outside their trace") {
  Tensor leaked;
  trace([&](Tensor a) { leaked = a; return a; }, F3);
  CHECK(errorOf([&] { trace([&](Tensor a) { return a + leaked; }, F3); }).message() ==
        "add: a Tensor was used after the trace that created it ended");
  CHECK(errorOf([&] { (void)exp(leaked); }).message() ==
        "exp: a Tensor was used outside of a trace (call the function through adjit::jit or adjit::trace)");
}

TEST_CASE("Array misuse") {
  Error e = errorOf([] { Array(std::vector<float>{1, 2, 3}, {2, 2}); });
  CHECK(e.message() == "Array: shape [2,2] has 4 elements, but 3 values were given");
  CHECK(e.location().line == __LINE__ - 2); // the constructors name the caller's line
  CHECK(std::string(e.location().file).find("test_errors.cpp") != std::string::npos);
  CHECK(errorOf([] { Array(DType::f32, {2, -1}); }).location().line == __LINE__);
  CHECK(errorOf([] { Array(Type{DType::i32, {-3}}); }).location().line == __LINE__);
  // Which also keeps every way of writing an Array unambiguous.
  CHECK(Array(std::vector<float>{7}, {}).type() == Type{DType::f32, {}});
  CHECK(Array(std::vector<int32_t>{1, 2}).type() == Type{DType::i32, {2}});
  CHECK(Array(DType::f64, {}).type() == Type{DType::f64, {}});
  CHECK(errorOf([] { Array(1.0f).data<double>(); }).message() == "Array: data of f32[] requested as f64");
  CHECK(errorOf([] { Array(std::vector<float>{1, 2}).item<float>(); }).message() ==
        "Array::item: array of type f32[2] does not have exactly one element");
}

TEST_CASE("absurd shapes are errors naming the op and shape, never a crash or a silent zero") {
  // The byte size used to wrap: a segfault, or "0 elements" and a sum of 0.
  Error e = errorOf([] { Array a(DType::f32, {4611686018427387903}); });
  CHECK(e.message() == "Array: f32[4611686018427387903] takes more than 2^62 bytes");
  CHECK(e.location().line == __LINE__ - 2);
  const int64_t big = int64_t{1} << 32;
  e = errorOf([&] { jit([&](Tensor x) { return sum(broadcast_to(x, {big, big})); })(1.0f); });
  CHECK(e.message() == "broadcast_to: shape [4294967296,4294967296] has more than 2^62 elements");
  CHECK(e.location().line == __LINE__ - 2);
  CHECK(errorOf([&] { trace([](Tensor x) { return x; }, Type{DType::f64, {big, big}}); }).message() ==
        "shape [4294967296,4294967296] has more than 2^62 elements");
}

TEST_CASE("errors name the function the user called, at the user's line") {
  // x[i] points at the user's line, not at tensor.h; where and take are named
  // as written, not as the ops they build (select, gather).
  Error e = errorOf([] { trace([](Tensor x) { return x[5]; }, F3); });
  CHECK(e.message() == "index: index 5 is out of range for axis 0 of size 3 (f32[3])");
  CHECK(e.location().line == __LINE__ - 2);
  CHECK(std::string(e.location().file).find("test_errors.cpp") != std::string::npos);
  e = errorOf([] { trace([](Tensor x, Tensor y) { return where(x > 0.0f, x, y); }, F3, Type{DType::f64, {3}}); });
  CHECK(e.message() == "where: branches must have one type, got f32[3] and f64[3]");
  CHECK(e.location().line == __LINE__ - 2);
  e = errorOf([] { trace([](Tensor x, Tensor i) { return take(x, i); }, F3, Type{DType::f32, {2}}); });
  CHECK(e.message() == "take: indices must be i32 or i64, got f32[2]");
  CHECK(e.location().line == __LINE__ - 2);
  // `!x` cannot capture its own line (Tensor's bool conversion, which rejects
  // `if (x)`, rules out operator!(At)): it names the line that made x.
  int made = 0;
  e = errorOf([&] {
    trace([&](Tensor x) {
      made = __LINE__ + 1;
      Tensor twice = x * 2.0f;
      return !twice;
    }, F3);
  });
  CHECK(e.message() == "not: expected an i1 operand, got f32[3]");
  CHECK(e.location().line == static_cast<uint32_t>(made));
  CHECK(errorOf([] { trace([](Tensor x) { return !x; }, F3); }).message() == "not: expected an i1 operand, got f32[3]");
}
