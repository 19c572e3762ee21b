// test/unit/test_verifier.cpp — the IR's internal API: the verifier rejects
// malformed IR built through it (the parser and builder already reject
// malformed text), and an op's value lists behave as vectors.
#include "ir/Builder.h"
#include "ir/Verifier.h"
#include "transforms/Passes.h"

#include <doctest/doctest.h>

using namespace adjit;
using namespace adjit::ir;

static std::string verifyError(const Module& m) {
  try {
    verify(m);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

static Module base() {
  Module m;
  Function& f = m.add("f");
  Builder b(m, f);
  ValueId x = b.param(Type{DType::f32, {3}});
  ValueId y = b.create1(OpKind::Exp, {x});
  b.ret({y});
  return m;
}

TEST_CASE("a well-formed module verifies") { CHECK(verifyError(base()) == "no error"); }

TEST_CASE("use before definition") {
  Module m = base();
  Function& f = *m.functions[0];
  f.ops[0].operands[0] = f.ops[0].results[0];
  CHECK(verifyError(m) == "verifier: in @f: operand %1 is used before it is defined\n  in op: %1 = exp(%1) : f32[3]");
}

TEST_CASE("result type that the type rule disagrees with") {
  Module m = base();
  Function& f = *m.functions[0];
  f.types[1] = Type{DType::f64, {3}};
  CHECK(verifyError(m) == "verifier: in @f: result 0 has type f64[3], expected f32[3]\n  in op: %1 = exp(%0) : f64[3]");
}

TEST_CASE("wrong arity and bad attributes are reported through the type rule") {
  Module m = base();
  Function& f = *m.functions[0];
  f.ops[0].operands.push_back(0);
  CHECK(verifyError(m) == "verifier: in @f: exp: expected 1 operand, got 2\n  in op: %1 = exp(%0, %0) : f32[3]");
}

TEST_CASE("undefined output and missing callee") {
  Module m = base();
  m.functions[0]->outputs = {7};
  CHECK(verifyError(m) == "verifier: in @f: returns %7, which is not defined");
  Module c = base();
  Function& f = *c.functions[0];
  f.ops[0].kind = OpKind::Call;
  f.ops[0].callees = {"g"};
  CHECK(verifyError(c) == "verifier: in @f: call: no function named @g in the module\n  in op: %1 = call @g(%0) : f32[3]");
}

TEST_CASE("recursion is rejected") {
  Module m;
  Function& f = m.add("f");
  Builder b(m, f);
  ValueId x = b.param(Type{DType::f32, {}});
  b.ret({x});
  // f calls itself: build the op by hand (the builder would type-check against f's current signature).
  f.ops.push_back(Op{OpKind::Call, {x}, {f.newValue(Type{DType::f32, {}})}, {}, {"f"}, {}});
  CHECK(verifyError(m) == "verifier: in @f: function calls itself (recursion is not supported)");
}

TEST_CASE("a pass that produces invalid IR is named, with the offending op") {
  Module m = base();
  transforms::Pass broken{"break-types", "makes a result's type wrong", [](Module& mod, const std::string&) {
    mod.functions[0]->types[1] = Type{DType::i32, {3}};
  }};
  transforms::PipelineOptions o;
  o.verifyEach = true;
  try {
    transforms::runPasses(m, {{&broken, ""}}, o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.message() == "pass 'break-types' produced invalid IR: verifier: in @f: result 0 has type i32[3], expected "
                         "f32[3]\n  in op: %1 = exp(%0) : i32[3]");
  }
}

TEST_CASE("an op's value list keeps few ids inline and any number on the heap, as a vector would") {
  std::vector<ValueId> want;
  ValueList l;
  for (ValueId v = 0; v < 40; ++v) { // through the inline room and several heap growths
    l.push_back(v * 3);
    want.push_back(v * 3);
    REQUIRE(l.size() == want.size());
    CHECK(l == want);
  }
  ValueList copy = l, moved = std::move(copy);
  CHECK(moved == want);
  CHECK(copy.empty());
  ValueList small = {7, 8};
  ValueList s2 = std::move(small);
  CHECK(s2 == std::vector<ValueId>{7, 8});
  s2 = moved; // heap into inline
  CHECK(s2 == want);
  moved = {1, 2, 3}; // heap list given inline content
  CHECK(moved == std::vector<ValueId>{1, 2, 3});
  moved.insert(moved.begin() + 1, 9);
  CHECK(moved == std::vector<ValueId>{1, 9, 2, 3});
  const std::vector<ValueId> more = {5, 6};
  moved.insert(moved.begin(), more.begin(), more.end());
  CHECK(moved == std::vector<ValueId>{5, 6, 1, 9, 2, 3});
  moved.erase(moved.begin() + 1, moved.begin() + 3);
  CHECK(moved == std::vector<ValueId>{5, 9, 2, 3});
  moved.erase(moved.begin());
  CHECK(moved.vec() == std::vector<ValueId>{9, 2, 3});
  moved.resize(5, -1);
  CHECK(moved == std::vector<ValueId>{9, 2, 3, -1, -1});
  CHECK(moved.front() == 9);
  CHECK(moved.back() == -1);
  std::span<const ValueId> view = moved;
  CHECK(view.size() == 5);
  CHECK(ValueList(view) == moved);
}
