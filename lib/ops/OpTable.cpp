// ops/OpTable.cpp — hands each layer its part of every op's block (the IR its
// semantics, autodiff its derivative rules, codegen its lowering), and the
// helpers the family files share.
#include "ops/Common.h"

#include "ir/Text.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>

namespace adjit::ops {

namespace {

void registerAll() {
  static constexpr std::array<Traits, ir::kNumOps> traits{{
#define ADJIT_OP(Id, mnemonic, arity, traits) traits,
#include "ir/Ops.def"
  }};
  Table t{};
  defineArithOps(t);
  defineMathOps(t);
  defineLogicOps(t);
  defineBitsOps(t);
  defineCreationOps(t);
  defineShapeOps(t);
  defineIndexingOps(t);
  defineReduceOps(t);
  defineSortOps(t);
  defineConvOps(t);
  defineLinalgOps(t);
  defineLinalgSolveOps(t);
  defineCallOps(t);
  defineControlFlowOps(t);
  defineGradientOps(t);
  defineCallbackOps(t);
  defineSpectralOps(t);
  // Each layer gets its part of every op's block.
  for (OpKind k : ir::allOps()) {
    const Hooks& h = t[static_cast<std::size_t>(k)];
    const Traits& tr = traits[static_cast<std::size_t>(k)];
    ir::define(k, tr.ir, h.infer, h.eval, h.fold);
    autodiff::define(k, {.traits = tr.autodiff, .jvp = h.jvp, .vjp = h.vjp});
    // An op of no operands (a constant) reads nothing batched: it never needs a rule.
    batching::define(k, {.batch = h.batch                      ? h.batch
                                  : (tr.ir & ir::kElementwise) ? batching::elementwiseBatch
                                  : ir::info(k).arity == 0     ? batching::neverBatched
                                                               : nullptr});
    sparsity::define(k, {.deps = h.deps ? h.deps : (tr.ir & ir::kElementwise) ? sparsity::elementwiseDeps : nullptr});
    codegen::define(k, {.traits = tr.codegen, .scalar = h.scalar, .element = h.element, .lower = h.lower,
                        .reduce = h.reduce, .libm = h.libm, .view = h.view, .keepsRows = h.keepsRows,
                        .lastAxisShift = h.lastAxisShift, .swapsLastAxes = h.swapsLastAxes,
                        .tilesOperand = h.tilesOperand, .tileGrid = h.tileGrid,
                        .tileColumnAxes = h.tileColumnAxes, .data = h.data, .inPlace = h.inPlace,
                        .lapack = h.lapack, .materializedOperands = h.materializedOperands});
  }
}

// The tables are filled when the library is loaded, before any code that
// could read them runs: every entry point of the library is reached from
// outside it, after its static initialisers.
const bool gRegistered = (registerAll(), true);
} // namespace

std::optional<ir::Folded> foldIfSameType(const ir::FoldCtx& c) {
  if (c.type(c.op.operands[0]) == c.type(c.op.results[0])) return ir::Folded{c.op.operands[0]};
  return std::nullopt;
}

std::vector<int64_t> stridesOf(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (std::size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    idx[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return idx;
}

int64_t ravel(std::span<const int64_t> idx, const Shape& s) {
  int64_t l = 0;
  for (std::size_t d = 0; d < s.size(); ++d) l = l * s[d] + idx[d];
  return l;
}

std::vector<Type> inferFloatUnary(const ir::InferCtx& c) {
  c.expectFloat(0);
  return {c.operands[0]};
}

std::vector<Type> inferNumericUnary(const ir::InferCtx& c) {
  if (c.operands[0].dtype == DType::i1)
    c.fail("expected a numeric operand, got {}", c.operands[0].str());
  return {c.operands[0]};
}

std::vector<Type> inferNumericBinary(const ir::InferCtx& c) {
  c.expectSameTypes();
  if (c.operands[0].dtype == DType::i1)
    c.fail("expected numeric operands, got {}", c.operands[0].str());
  return {c.operands[0]};
}

std::vector<Type> inferFloatBinary(const ir::InferCtx& c) {
  c.expectSameTypes();
  c.expectFloat(0);
  return {c.operands[0]};
}

std::vector<int64_t> readAxes(const ir::InferCtx& c, int64_t rank) {
  std::vector<int64_t> axes = c.ints("axes");
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank)
      c.fail("axis {} is out of range for an operand of rank {}", a, rank);
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    c.fail("axes {} repeat an axis", shape_str(c.ints("axes")));
  return axes;
}

} // namespace adjit::ops
