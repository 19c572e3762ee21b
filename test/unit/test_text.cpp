// test/unit/test_text.cpp — the .adj text form: round trips and parse errors.
#include "ir/Text.h"

#include <adjit/adjit.h>
#include <doctest/doctest.h>

#include <cstring>

using namespace adjit;

static std::string parseError(const std::string& text) {
  try {
    Module::parse(text, "t.adj");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("print -> parse -> print is identical, locations included") {
  auto f = [](Tensor x, Tensor y) {
    Tensor z = exp(x) * y + 1.5;
    return std::make_tuple(sum(z, {0}, true), z > 2.0, cast(z, DType::i64));
  };
  Module m = trace(f, Type{DType::f32, {2, 3}}, Type{DType::f32, {3}});
  for (bool locs : {false, true}) {
    std::string s = m.str(locs);
    CHECK(Module::parse(s).str(locs) == s);
  }
  CHECK(m.str(true).find("; loc(\"") != std::string::npos);
  CHECK(m.str(true).find("test_text.cpp") != std::string::npos);
}

TEST_CASE("constants of every dtype round-trip exactly") {
  std::string text = R"(func @f() -> (f32[3], f64[2], i32[2], i64[1], i1[2]) {
  %0 = constant() {value = dense<f32[3], [0.1, -inf, nan]>} : f32[3]
  %1 = constant() {value = dense<f64[2], [0.1, 1e-300]>} : f64[2]
  %2 = constant() {value = dense<i32[2], [-2147483648, 7]>} : i32[2]
  %3 = constant() {value = dense<i64[1], [9007199254740993]>} : i64[1]
  %4 = constant() {value = dense<i1[2], [true, false]>} : i1[2]
  return %0, %1, %2, %3, %4
}
)";
  Module m = Module::parse(text);
  CHECK(m.str() == text);
  auto out = m.interpret("f", {});
  CHECK(out[3].get<int64_t>(0) == 9007199254740993LL);
  CHECK(out[0].data<float>()[0] == 0.1f);
}

TEST_CASE("functions may call functions defined later") {
  std::string text = R"(func @main(%0: f32[2]) -> (f32[2]) {
  %1 = call @helper(%0) : f32[2]
  return %1
}

func @helper(%0: f32[2]) -> (f32[2]) {
  %1 = add(%0, %0) : f32[2]
  return %1
}
)";
  Module m = Module::parse(text);
  CHECK(m.str() == text);
  CHECK(m.interpret("main", {Array(std::vector<float>{1, 2})})[0].to_vector<float>() == std::vector<float>{2, 4});
}

TEST_CASE("parse errors name line:column and what was expected") {
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  return %1\n}") ==
        "t.adj:2:10: error: use of undefined value %1");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = frob(%0) : f32[2]\n  return %1\n}") ==
        "t.adj:2:3: error: unknown op 'frob'");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = add(%0 %0) : f32[2]\n  return %1\n}") ==
        "t.adj:2:15: error: expected ')', found '%0'");
  CHECK(parseError("func @f(%0: f32[2], %1: f32[3]) -> (f32[2]) {\n  %2 = add(%0, %1) : f32[2]\n  return %2\n}") ==
        "t.adj:2:3: error: add: incompatible shapes f32[2] and f32[3]");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = neg(%0) : f64[2]\n  return %1\n}") ==
        "t.adj:2:3: error: neg: result 0 has type f32[2], but f64[2] is written");
  CHECK(parseError("func @f(%0: q32[2]) -> (f32[2]) {") == "t.adj:1:13: error: expected a dtype (f32, f64, i32, i64, i1), found 'q32'");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = reduce_sum(%0) {axes = [3], keepdims = false} : f32[]\n  return %1\n}") ==
        "t.adj:2:3: error: reduce_sum: axis 3 is out of range for an operand of rank 1");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = call @nope(%0) : f32[2]\n  return %1\n}") ==
        "t.adj:2:13: error: no function named @nope in the module");
  CHECK(parseError("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = reshape(%0) : f32[2]\n  return %1\n}") ==
        "t.adj:2:3: error: reshape: missing attribute 'shape'");
  CHECK(parseError("func @f() -> () {\n  return\n}\nfunc @f() -> () {\n  return\n}") ==
        "t.adj:4:6: error: redefinition of function @f");
}

TEST_CASE("a line left unfinished is the error's line, not the next one") {
  // An unclosed `f32[` at the end of line 3 was reported at `return` on line 4.
  const std::string head = "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = neg(%0) : f32[2]\n";
  CHECK(parseError(head + "  %2 = neg(%1) : f32[\n  return %2\n}") ==
        "t.adj:3:21: error: expected an integer after '[', found 'return' on line 4");
  CHECK(parseError(head + "  %2 = neg(%1) : f32[2\n  return %2\n}") ==
        "t.adj:3:22: error: expected ']' after '2', found 'return' on line 4");
  CHECK(parseError(head + "  %2 = add(%1,\n  return %2\n}") == "t.adj:3:14: error: expected an operand '%name' after ',', found 'return' on line 4");
  CHECK(parseError(head + "  %2 = neg(%1) :\n") ==
        "t.adj:3:16: error: expected a dtype (f32, f64, i32, i64, i1) after ':', found end of input");
  // A finished line stays out of it: the mistake is the next line's.
  CHECK(parseError(head + "}") == "t.adj:3:1: error: expected 'return', found '}'");
  CHECK(parseError(head + "  %2 = neg(%1) : f32[2]\n  5\n}") == "t.adj:4:3: error: expected an op name, found '5'");
}

// The fuzzer's find: `concatenate {axis = -1}` of two constants passed the
// type rule, and folding indexed its reference evaluation at -1. An op's hooks
// index with the attribute as it stands, so the IR admits only 0 <= axis < rank.
TEST_CASE("an op's axis in IR text is counted from the front: a negative one is an error naming it") {
  const std::string expected = "is out of range for an operand of rank 1: expected 0 <= axis < 1";
  for (const char* body : {
           "  %1 = concatenate(%0, %0) {axis = -1} : f32[4]\n  return %1",
           "  %1 = iota() {axis = -1, dtype = f32, shape = [2]} : f32[2]\n  return %0",
           "  %1 = argmax(%0) {axis = -1, dtype = i32} : i32[]\n  return %0",
           "  %1 = cumsum(%0) {axis = -1} : f32[2]\n  return %1",
           "  %1 = constant() {value = dense<i32[2], [1, 0]>} : i32[2]\n  %2 = gather(%0, %1) {axis = -1} : f32[2]\n  return %2",
       }) {
    CAPTURE(body);
    const std::string text = std::string("func @f(%0: f32[2]) -> (f32[") + (std::strstr(body, "concatenate") ? "4" : "2") + "]) {\n" + body + "\n}";
    CHECK(parseError(text).find(expected) != std::string::npos);
  }
  // The tracer counts a negative axis from the end, as numpy does.
  Module m = trace([] { return iota({2, 3}, -1, DType::f32); });
  CHECK(m.interpret(m.function_names().at(0), {})[0].to_vector<float>() == std::vector<float>{0, 1, 2, 0, 1, 2});
  CHECK_THROWS_WITH_AS(trace([] { return iota({2, 3}, -3); }), doctest::Contains("iota: axis -3 is out of range for rank 2"), Error);
}

TEST_CASE("several traced functions saved in one module, by name, and loaded back") {
  Module m = trace_named("loss", [](Tensor x) { return sum(x * x); }, Type{DType::f32, {3}});
  m.add(trace_named("predict", [](Tensor x, Tensor w) { return matmul(x, w); }, Type{DType::f32, {2, 3}}, Type{DType::f32, {3, 1}}));
  CHECK(m.function_names() == std::vector<std::string>{"loss", "predict"});
  const std::string path = "test_text_saved_module.adj";
  m.save(path);
  Module back = Module::load(path);
  CHECK(back.str() == m.str());
  CHECK(back.str(true) == m.str(true));
  CHECK(back.interpret("loss", {Array(std::vector<float>{1, 2, 3})})[0].item<float>() == 14.0f);
  CHECK_THROWS_WITH_AS(m.add(m), "error: Module::add: both modules have a function named @loss", Error);
  std::remove(path.c_str());
}

TEST_CASE("fingerprints (the kernel cache's key) tell apart everything printed, and locations only when asked") {
  const std::string base = R"(func @f(%0: f64[3]) -> (f64[]) {
  %1 = constant() {value = dense<f64[], [0.0]>} : f64[]
  %2 = broadcast_to(%1) {shape = [3]} : f64[3]
  %3 = sub(%0, %2) : f64[3]
  %4 = reduce_sum(%3) {axes = [0], keepdims = false} : f64[]
  return %4
}
)";
  auto fp = [](const std::string& text, ir::PrintOptions o = {}) { return ir::fingerprint(*ir::parse(text), o); };
  auto with = [&](std::string_view from, std::string_view to) {
    std::string t = base;
    const std::size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    return t.replace(at, from.size(), to);
  };
  const std::string same = fp(base);
  CHECK(fp(base) == same);
  CHECK(fp(ir::print(*ir::parse(base))) == same);
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"[0.0]", "[-0.0]"},                          // constant bits
           {"sub(%0, %2)", "sub(%2, %0)"},               // operand order
           {"sub(", "add("},                             // kind
           {"@f(", "@g("},                               // function name
           {"axes = [0]", "axes = [-1]"},                // attribute
       }) {
    CAPTURE(from);
    const std::string changed = with(from, to);
    CHECK(fp(changed) != same);
  }

  // The cache hashes the fingerprint in pieces as it is made: the same hash
  // as of the whole, however the bytes are split.
  {
    auto m = ir::parse(base);
    LongHash pieces;
    ir::fingerprint(*m, {}, pieces);
    CHECK(pieces.finish() == hashLong(same));
    for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{13}, same.size()}) {
      LongHash h;
      h.update(std::string_view(same).substr(0, cut)).update(std::string_view(same).substr(cut));
      CHECK(h.finish() == hashLong(same));
    }
    LongHash bytewise;
    for (char c : same) bytewise.update(std::string_view(&c, 1));
    CHECK(bytewise.finish() == hashLong(same));
    CHECK(hashLong(same) != hashLong(same + '\0')); // the length counts
  }

  // A while loop's position is in its compiled code (its iteration limit's
  // error names it); an add's is not.
  const std::string loop = R"(func @f(%x: f64[]) -> (f64[]) {
  %w = while @cond, @half(%x) {consts = 0, max_iterations = 9} : f64[]
  return %w
}
func @cond(%x: f64[]) -> (i1[]) {
  %one = constant() {value = dense<f64[], [1]>} : f64[]
  %p = gt(%x, %one) : i1[]
  return %p
}
func @half(%x: f64[]) -> (f64[]) {
  %h = constant() {value = dense<f64[], [0.5]>} : f64[]
  %y = mul(%x, %h) : f64[]
  return %y
}
)";
  const std::string loopMoved = "\n" + loop, bodyMoved = [&] {
    std::string t = loop;
    return t.insert(t.find("  %y = mul"), "\n");
  }();
  const ir::PrintOptions code{.codeLocations = true};
  CHECK(fp(loopMoved) == fp(loop));
  CHECK(fp(loopMoved, code) != fp(loop, code));
  CHECK(fp(bodyMoved, code) == fp(loop, code));
}
