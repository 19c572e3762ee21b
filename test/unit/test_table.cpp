// test/unit/test_table.cpp — walks the op table: every op has every hook.
#include "Check.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Verifier.h"
#include "jit/Engine.h"
#include "ir/OpInfo.h"
#include "autodiff/Rules.h"
#include "batching/Rules.h"
#include "codegen/Lowering.h"

#include <adjit/adjit.h>

#include <doctest/doctest.h>

#include <random>
#include <regex>
#include <set>

using namespace adjit;

TEST_CASE("every op has its hooks") {
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    INFO("op " << info.name);
    CHECK(!info.name.empty());
    CHECK(bool(info.infer));
    CHECK(bool(info.eval));
    CHECK(bool(info.fold));
    const codegen::Lowering& low = codegen::lowering(k);
    const autodiff::Rules& ad = autodiff::rules(k);
    // Exactly one lowering hook, and `scalar` exactly for elementwise ops.
    int lowerings = (low.scalar != nullptr) + (low.element != nullptr) + (low.lower != nullptr) +
                    (low.reduce != nullptr);
    CHECK(lowerings == 1);
    CHECK((low.scalar != nullptr) == info.has(ir::kElementwise));
    // Ops that read operand buffers must write whole results.
    if (low.has(codegen::kMaterializesOperands)) CHECK(bool(low.lower));
    // Ops that fuse loops into their tiles write whole results; a prologue
    // needs to know which operands are read by tiles, a reducing epilogue
    // the grid of the tiles.
    if (low.has(codegen::kTileEpilogue) || low.has(codegen::kTilePrologue)) CHECK(bool(low.lower));
    CHECK(low.has(codegen::kTilePrologue) == (low.tilesOperand != nullptr));
    CHECK(low.has(codegen::kTileEpilogue) == (low.tileGrid != nullptr));
    // VJP and JVP rules unless the op's results carry no gradient.
    if (!ad.has(autodiff::kNonDifferentiable)) CHECK(bool(ad.vjp));
    if (!ad.has(autodiff::kNonDifferentiable)) CHECK(bool(ad.jvp));
    // A batching rule (vmap) for every op.
    CHECK(bool(batching::rules(k).batch));
    // The mnemonic parses back to the same kind.
    REQUIRE(ir::lookup(info.name).has_value());
    CHECK(*ir::lookup(info.name) == k);
  }
}

TEST_CASE("type rules see operand types alike by reference and by value") {
  const std::vector<Type> types{{DType::f32, {2}}, {DType::f64, {3, 4}}, {DType::i32, {}}, {DType::f32, {5}}};
  std::vector<const Type*> refs;
  for (const Type& t : types) refs.push_back(&t);
  for (const ir::TypeRefs r : {ir::TypeRefs(types), ir::TypeRefs::of(refs)}) {
    REQUIRE(r.size() == 4);
    CHECK(std::vector<Type>(r.begin(), r.end()) == types);
    CHECK(r.back() == types[3]);
    CHECK(std::vector<Type>(r.subspan(1).begin(), r.subspan(1).end()) == std::vector<Type>(types.begin() + 1, types.end()));
    CHECK(std::vector<Type>(r.first(2).begin(), r.first(2).end()) == std::vector<Type>(types.begin(), types.begin() + 2));
    CHECK(r.last(1)[0] == types[3]);
    CHECK(r.end() - r.begin() == 4);
    CHECK(&r[1] == &types[1]); // never a copy
  }
  // An op of more operands than the builder keeps inline (eight).
  auto f = jit([](Tensor x) {
    std::vector<Tensor> parts;
    for (int i = 0; i < 11; ++i) parts.push_back(x * float(i));
    return concatenate(parts);
  });
  const Array y = f(Array(std::vector<float>{1, 2}));
  REQUIRE(y.size() == 22);
  for (int i = 0; i < 11; ++i) {
    CHECK(y.data<float>()[2 * i] == float(i));
    CHECK(y.data<float>()[2 * i + 1] == 2.0f * float(i));
  }
}

TEST_CASE("mnemonics are unique and unknown names are rejected") {
  CHECK(!ir::lookup("no_such_op").has_value());
  std::set<std::string_view> names;
  for (ir::OpKind k : ir::allOps()) CHECK(names.insert(ir::info(k).name).second);
}

TEST_CASE("an op's keepsRows claim holds: perturbing one row of the operand changes that row of the result only") {
  // One op per function, its operands the parameters; which operands keep
  // rows, as the hook says (with operand and result of one extent on axis 0).
  struct Case {
    const char* text;
    std::vector<bool> keeps;
  };
  const Case cases[] = {
      {"func @f(%0: f64[4,6]) -> (f64[4,2,3]) {\n  %1 = reshape(%0) {shape = [4, 2, 3]} : f64[4,2,3]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,6]) -> (f64[8,3]) {\n  %1 = reshape(%0) {shape = [8, 3]} : f64[8,3]\n  return %1\n}", {false}},
      {"func @f(%0: f64[4,1]) -> (f64[4,3]) {\n  %1 = broadcast_to(%0) {shape = [4, 3]} : f64[4,3]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4]) -> (f64[4,4]) {\n  %1 = broadcast_to(%0) {shape = [4, 4]} : f64[4,4]\n  return %1\n}", {false}},
      {"func @f(%0: f64[4,2,3]) -> (f64[4,3,2]) {\n  %1 = transpose(%0) {perm = [0, 2, 1]} : f64[4,3,2]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,4,3]) -> (f64[4,4,3]) {\n  %1 = transpose(%0) {perm = [1, 0, 2]} : f64[4,4,3]\n  return %1\n}", {false}},
      {"func @f(%0: f64[4,5]) -> (f64[4,2]) {\n  %1 = slice(%0) {limit = [4, 4], start = [0, 1], stride = [1, 2]} : f64[4,2]\n  return %1\n}", {true}},
      {"func @f(%0: f64[5,2]) -> (f64[5,2]) {\n  %1 = slice(%0) {limit = [5, 2], start = [0, 0], stride = [1, 1]} : f64[5,2]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,2]) -> (f64[4,6]) {\n  %1 = pad(%0) {high = [0, 2], interior = [0, 1], low = [0, 1]} : f64[4,6]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,2]) -> (f64[4,2]) {\n  %1 = pad(%0) {high = [0, 0], interior = [0, 0], low = [0, 0]} : f64[4,2]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,5], %1: i32[3]) -> (f64[4,3]) {\n  %2 = gather(%0, %1) {axis = 1} : f64[4,3]\n  return %2\n}", {true, false}},
      {"func @f(%0: f64[5,3], %1: i32[4,2]) -> (f64[4,2,3]) {\n  %2 = gather(%0, %1) {axis = 0} : f64[4,2,3]\n  return %2\n}", {false, true}},
      {"func @f(%0: i32[4]) -> (f64[4,3]) {\n  %1 = one_hot(%0) {depth = 3, dtype = f64} : f64[4,3]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,4]) -> (f64[4,4]) {\n  %1 = tril(%0) {k = 0} : f64[4,4]\n  return %1\n}", {true}},
      {"func @f(%0: f64[4,2], %1: f64[4,2]) -> (f64[4,4]) {\n  %2 = pad_sum(%0, %1) {interior = [0, 0, 0, 0], low = [0, 0, 0, 2], shape = [4, 4]} : f64[4,4]\n  return %2\n}", {true, true}},
      {"func @f(%0: f64[2,2], %1: f64[2,2]) -> (f64[4,2]) {\n  %2 = pad_sum(%0, %1) {interior = [0, 0, 0, 0], low = [0, 0, 2, 0], shape = [4, 2]} : f64[4,2]\n  return %2\n}", {false, false}},
      {"func @f(%0: f64[4,2], %1: f64[4,3]) -> (f64[4,5]) {\n  %2 = concatenate(%0, %1) {axis = 1} : f64[4,5]\n  return %2\n}", {true, true}},
      {"func @f(%0: f64[2,3], %1: f64[2,3]) -> (f64[4,3]) {\n  %2 = concatenate(%0, %1) {axis = 0} : f64[4,3]\n  return %2\n}", {false, false}},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const Module m = Module::parse(c.text);
    const ir::Function& f = *m.impl().lookup("f");
    REQUIRE(f.ops.size() == 1);
    const ir::Op& op = f.ops[0];
    const ir::OpInfo& info = ir::info(op.kind);
    REQUIRE(bool(codegen::lowering(op.kind).keepsRows));
    const Type& out = f.type(op.results[0]);
    std::vector<Array> args;
    for (std::size_t i = 0; i < op.operands.size(); ++i) {
      Array a(f.type(op.operands[i]));
      for (int64_t e = 0; e < a.size(); ++e) a.set(e, is_floating(a.dtype()) ? 0.25 * double(e) - 1 : double(e % 3));
      args.push_back(std::move(a));
    }
    const Array base = m.interpret("f", args)[0];
    for (std::size_t i = 0; i < op.operands.size(); ++i) {
      const Type& in = f.type(op.operands[i]);
      const bool claim = !in.shape.empty() && in.shape[0] == out.shape[0] && codegen::lowering(op.kind).keepsRows(in, i, out, op.attrs);
      CHECK(claim == c.keeps[i]);
      if (!claim) continue;
      // Perturb each row of operand i: only that row of the result may change.
      const int64_t rows = in.shape[0], perIn = in.size() / rows, perOut = out.size() / rows;
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<Array> changed = args;
        for (int64_t e = r * perIn; e < (r + 1) * perIn; ++e)
          changed[i].set(e, is_floating(in.dtype) ? changed[i].get(e) + 1.5 : double((int64_t(changed[i].get(e)) + 1) % 3));
        const Array got = m.interpret("f", changed)[0];
        for (int64_t e = 0; e < out.size(); ++e)
          if (e / perOut != r) CHECK(got.get(e) == base.get(e));
      }
    }
  }
}

namespace {

/// The variants of op `info` the dtype test runs: its example with its
/// floating types rewritten to `dtype`, or, for an elementwise op without an
/// example, the op applied to `dtype[3]` parameters (its result type from its
/// type rule). Null where the parser or the type rule rejects the variant.
std::shared_ptr<ir::Module> dtypeVariant(const ir::OpInfo& info, ir::OpKind k, DType dtype) {
  try {
    if (const char* example = test::opExample(info.name)) {
      static const std::regex floatType("f(32|64)\\[");
      auto m = std::shared_ptr<ir::Module>(ir::parse(std::regex_replace(example, floatType, std::string(name_of(dtype)) + "["), "variant"));
      ir::verify(*m);
      return m;
    }
    if (!info.has(ir::kElementwise) || info.arity < 1) return nullptr;
    auto m = std::make_shared<ir::Module>();
    ir::Function& f = m->add("f");
    ir::Builder b(*m, f);
    ir::ValueList operands;
    for (int i = 0; i < info.arity; ++i) operands.push_back(b.param(Type{dtype, {3}}));
    b.ret({b.create1(k, operands)});
    ir::verify(*m);
    return m;
  } catch (const Error&) {
    return nullptr;
  }
}

} // namespace

TEST_CASE("every op, on every dtype its type rule accepts, computes compiled what the interpreter computes") {
  int compiled = 0;
  for (ir::OpKind k : ir::allOps()) {
    const ir::OpInfo& info = ir::info(k);
    if (info.has(ir::kHostOnly)) continue;
    for (const DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::i1}) {
      const std::shared_ptr<ir::Module> m = dtypeVariant(info, k, dtype);
      if (!m) continue;
      INFO("op " << info.name << " on " << name_of(dtype) << ":\n" << ir::print(*m));
      const ir::Function& f = *m->lookup("f");
      std::mt19937 rng(7);
      std::vector<Array> args;
      for (ir::ValueId p : f.params) {
        Array a(f.type(p));
        for (int64_t i = 0; i < a.size(); ++i) {
          const DType d = a.dtype();
          a.set(i, d == DType::i1 ? double(rng() % 2) : is_floating(d) ? 0.3 + double(rng() % 1000) / 700.0 : double(int(rng() % 7) - 3));
        }
        args.push_back(std::move(a));
      }
      std::shared_ptr<engine::Kernel> kernel = engine::compile({.module = *m, .function = "f"});
      std::vector<detail::Leaf> leaves;
      for (const Array& a : args) leaves.push_back({a.raw(), &a.type()});
      std::vector<Array> want, got;
      try {
        want = ir::interpret(*m, "f", args);
      } catch (const Error& e) { // an op that raises on these values (loop_limit): so must its code
        CHECK_THROWS_WITH_AS(engine::run(*kernel, leaves, got), e.what(), Error);
        continue;
      }
      engine::run(*kernel, leaves, got);
      REQUIRE(got.size() == want.size());
      for (std::size_t o = 0; o < got.size(); ++o) ADJIT_CHECK_CLOSE(got[o], want[o], 1e-5);
      ++compiled;
    }
  }
  CHECK(compiled > 150);
}
