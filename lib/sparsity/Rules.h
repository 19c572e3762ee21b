// sparsity/Rules.h — each op's dependency rule (which operand elements each
// result element reads), what a rule sees, the rules shared by families of
// ops, and the analysis that runs them over a function: the structural
// pattern of a Jacobian, and of a Hessian. Owned here, by the analysis;
// filled by the op's block in lib/ops at start-up (ops/OpTable.cpp), next to
// its derivative and batching rules.
//
// The analysis walks a function's ops once, in order. Every value carries,
// per element, the sorted set of input elements it depends on (`Deps`, in
// CSR form); an op's rule says which operand elements each result element
// reads, one *term* at a time (`SparsityCtx::term`), and the driver unions
// their sets. A term is one product-like piece of the element's expression:
// matmul's C[i,j] = Σ_k A[i,k]·B[k,j] has K terms of two reads each, an
// elementwise op one term, a sum one term per summand.
//
// With Hessians asked for, every element also carries the pairs of inputs
// its second derivative couples (as SparseConnectivityTracer.jl's Hessian
// tracers do): an element's pairs are those of every element it reads, plus,
// within each term, the pairs the op itself makes. Which reads of a term
// interact comes from the op's linearity traits (autodiff/Rules.h):
// nonlinear ops pair every two reads, a read with itself included;
// kLinearInEach ops (mul, matmul) pair reads of different operands;
// kLinearInFirst ops (div) every two reads but two of operand 0; kLinear
// ops none. Two interacting reads couple every input of one's set with every
// input of the other's. So a rule gives its terms once and is exact for both
// patterns: `x*y` couples x and y, `x+y` does not, `exp(x)` couples x with
// itself, and pairs reach a result only through elements it reads.
#pragma once

#include "ir/IR.h"

#include <adjit/array.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace adjit::sparsity {

/// An unordered pair of input elements, first ≤ second.
using Pair = std::pair<int64_t, int64_t>;

/// Per element of a value, the sorted, distinct input elements it depends on
/// (compressed rows: element e's set is idx[ptr[e], ptr[e + 1])) and, when
/// the analysis tracks Hessians, the sorted, distinct pairs of inputs its
/// second derivative couples (hidx[hptr[e], hptr[e + 1]); hptr empty: none).
struct Deps {
  std::vector<int64_t> ptr{0};
  std::vector<int64_t> idx;
  std::vector<int64_t> hptr;
  std::vector<Pair> hidx;

  int64_t elements() const { return static_cast<int64_t>(ptr.size()) - 1; }
  std::span<const int64_t> of(int64_t e) const {
    return {idx.data() + ptr[static_cast<std::size_t>(e)],
            static_cast<std::size_t>(ptr[static_cast<std::size_t>(e) + 1] - ptr[static_cast<std::size_t>(e)])};
  }
  std::span<const Pair> pairsOf(int64_t e) const {
    if (hptr.empty()) return {};
    return {hidx.data() + hptr[static_cast<std::size_t>(e)],
            static_cast<std::size_t>(hptr[static_cast<std::size_t>(e) + 1] - hptr[static_cast<std::size_t>(e)])};
  }
  /// n elements that depend on nothing.
  static Deps none(int64_t n);
  /// n elements, element e depending on input `first + e` alone.
  static Deps identity(int64_t n, int64_t first);
  bool operator==(const Deps&) const = default;
};

/// One operand element a term reads.
struct Read {
  uint32_t operand = 0;
  int64_t element = 0;
};

/// Which reads of a term a rule's op couples in its second derivative.
enum class Couples {
  byTraits, ///< as the op's linearity traits say (see the file comment)
  distinct, ///< every two different reads, none with itself (a product of its reads: reduce_prod)
  nothing,  ///< none: the op is linear in its reads wherever it is differentiable (max, abs, clip)
};

class Analysis;

/// What a rule sees.
struct SparsityCtx {
  const ir::Op& op;
  const ir::Function& fn;
  Analysis& analysis;

  std::size_t arity() const { return op.operands.size(); }
  const Type& type(std::size_t i) const { return fn.type(op.operands.at(i)); }
  const Type& resultType(std::size_t k = 0) const { return fn.type(op.results.at(k)); }
  /// Operand i's dependencies.
  const Deps& deps(std::size_t i) const;
  /// Operand i's value when the analysis knows it (a constant, an iota, or
  /// integer arithmetic on them), else null. Rules use it to be exact where
  /// indices are fixed (a gather with constant indices).
  const Array* known(std::size_t i) const;
  /// Result element e of result k reads `reads` together, as one term of its
  /// expression (see the file comment). Terms may come in any order.
  void term(std::size_t k, int64_t e, std::span<const Read> reads, Couples couples = Couples::byTraits) const;
  void term(std::size_t k, int64_t e, std::initializer_list<Read> reads, Couples couples = Couples::byTraits) const {
    term(k, e, std::span<const Read>(reads.begin(), reads.size()), couples);
  }
  /// Sets result k's dependencies directly (rules that analyse callees);
  /// any terms given for it are dropped.
  void set(std::size_t k, Deps d) const;
  /// Records result k's value as known (rules that analyse callees: a
  /// counter a loop or call returns).
  void setKnown(std::size_t k, std::optional<Array> v) const;
  /// Analyses function `callee` of the module on arguments with these
  /// dependencies (one per parameter; null: depends on nothing); returns its
  /// outputs' dependencies (with their Hessian pairs when tracked). `known`:
  /// the arguments' values where known (null elsewhere), as `known(i)` gives.
  /// `knownOuts` (if given): the outputs' values where the analysis knows
  /// them (integer arithmetic on known values: a loop's counter).
  std::vector<Deps> call(const std::string& callee, const std::vector<const Deps*>& args,
                         const std::vector<const Array*>& known = {},
                         std::vector<std::optional<Array>>* knownOuts = nullptr) const;
};

/// The dependency rule of an op kind.
struct Rules {
  /// Gives every result element's terms (or sets whole results). Every
  /// differentiable op has one (the table test in test_sparsity.cpp says
  /// so); kNonDifferentiable ops need none (their results depend on
  /// nothing). A missing one would be analysed by `denseDeps`.
  void (*deps)(const SparsityCtx&) = nullptr;
};

/// The dependency rule of op kind k.
const Rules& rules(ir::OpKind k);
/// Sets op kind k's rule: called once per op, at start-up (ops/OpTable.cpp).
void define(ir::OpKind k, const Rules& r);

// Rules shared by families of ops.

/// Elementwise ops: result element e reads element e of every operand (a
/// rank-0 operand: its one element), in one term.
void elementwiseDeps(const SparsityCtx& c);
/// Elementwise ops whose second derivative is zero wherever it exists
/// (maximum, abs, clip: piecewise linear): elementwiseDeps coupling nothing.
void piecewiseLinearDeps(const SparsityCtx& c);
/// Elementwise ops equal to ±operand 0 by a factor piecewise constant in
/// the others (copysign, nextafter): element e reads operand 0's element e
/// alone, coupling nothing.
void piecewiseLinearFirstDeps(const SparsityCtx& c);
/// Ops whose derivative is zero wherever it exists (floor, round, sign):
/// every result depends on nothing, as forward and reverse mode say.
void zeroDeps(const SparsityCtx& c);
/// Reductions over the integer-list attribute `axes` (negative counting from
/// the end; with or without keepdims): result element r reads every operand
/// element that reduces into it, each in a term of its own (`oneTerm` false:
/// sums) or all in one term coupled as `couples` says (products, maxima).
void reduceDeps(const SparsityCtx& c, std::string_view axes, bool oneTerm, Couples couples = Couples::byTraits);
/// Ops that call one function (`call`, a custom gradient's forward): the
/// callee analysed on the operands, its outputs' dependencies the results'.
void calleeDeps(const SparsityCtx& c);
/// Ops that move elements (reshape, transpose, slice, pad, concatenate,
/// broadcast, gathers whose indices the analysis knows): every floating
/// result element is a copy of one floating operand element or of nothing
/// (padding). Found by running the op's reference evaluation once on
/// operands that hold their own element numbers (in f64). With an index
/// operand the analysis does not know, falls back to `denseDeps`.
void movementDeps(const SparsityCtx& c);
/// Any op: every result element reads every element of every operand, in
/// one term. Never wrong; exact only for ops whose every result depends on
/// all of their input (a determinant, a norm).
void denseDeps(const SparsityCtx& c);
/// Matrix ops batched over leading axes (factorisations, solves): each
/// matrix's results read every element of that matrix's operands, as
/// denseDeps does per batch element (operand 0's axes before its last two,
/// which every operand and result leads with; otherwise denseDeps).
void matrixBatchDeps(const SparsityCtx& c);
/// cumsum and cumprod along the attribute `axis` (`reverse`: from the end):
/// each result element reads the operand's elements up to it, in a term of
/// its own each (sums) or in one term coupling every two (products).
void cumulativeDeps(const SparsityCtx& c, bool product);
/// Ops that permute each row along the attribute `axis` by an order their
/// derivative treats as constant (sort): result k's element reads every
/// element of operand k's row through it, coupling nothing.
void alongAxisDeps(const SparsityCtx& c);
/// switch: the branch a known index picks, else the union of every branch's
/// pattern (the index has no derivative).
void switchDeps(const SparsityCtx& c);
/// The elementwise union of two values' dependencies (and pairs).
Deps unite(const Deps& a, const Deps& b);
/// Whether a and b hold the same sets and pairs (no pairs and an empty
/// `hptr` count as the same).
bool samePattern(const Deps& a, const Deps& b);

// Loops (sparsity/Loops.cpp). A step of a loop is its body analysed on the
// step's operands; the loop's pattern is the steps' composed, not unrolled in
// the IR.

/// scan: the body analysed once per step, in the loop's order, on the
/// carries' dependencies so far and the step's slices of the scanned
/// operands; each stacked result's step t is the body's output at step t.
/// Exact (as exact as the body's rules). Without scanned operands the walk
/// stops once a step leaves the carries (and their known values) unchanged:
/// every later step is the same.
void scanDeps(const SparsityCtx& c);
/// while: while the condition's value is known (it reads only values the
/// analysis knows: a counter from constants), step by step, exact. Once it
/// is not (it reads the carries' data), the union over every further trip
/// count: the carries' sets grow by the body's pattern until a step adds
/// nothing (a fixed point, reached within 2·(carry elements) + 2 steps;
/// sets only grow). Conservative: a superset of the pattern at any trip count.
void whileDeps(const SparsityCtx& c);
/// while_vjp: its forward loop as `whileDeps` (keeping each step's
/// residuals), then its backward loop: with a known trip count step by step,
/// last step first (exact); else to a fixed point on the union of every
/// step's residuals (conservative).
void whileVjpDeps(const SparsityCtx& c);

/// Where a function's floating parameters start in the flattened numbering
/// of inputs, parameter by parameter (integer ones take no numbers).
struct Inputs {
  std::vector<Deps> params; ///< one per parameter
  int64_t count = 0;        ///< how many input elements in all
};
/// Parameter p of `fn` numbered from the floating parameters before it;
/// with `wrt` (one flag per parameter), only those flagged count: the
/// others are constants (no columns).
Inputs numberParams(const ir::Function& fn, const std::vector<bool>& wrt = {});

/// The analysis of one function (and the functions its ops call).
class Analysis {
public:
  /// `hessian`: track the Hessian's pairs too (costs more).
  Analysis(const ir::Module& m, bool hessian) : module_(m), hessian_(hessian) {}

  /// Dependencies of fn's outputs, given its parameters'. Linear in fn's
  /// size times the sets' sizes; a loop over ops, nesting only where an op
  /// calls a function (so as deep as functions nest, not as programs grow).
  /// `knownOuts` (if given): fn's outputs' values where the analysis knows them.
  std::vector<Deps> run(const ir::Function& fn, const std::vector<const Deps*>& params,
                        const std::vector<const Array*>& knownParams = {},
                        std::vector<std::optional<Array>>* knownOuts = nullptr);

  bool hessian() const { return hessian_; }
  const ir::Module& module() const { return module_; }

  // Internal, for SparsityCtx.
  struct Frame;

private:
  const ir::Module& module_;
  bool hessian_;
  Frame* frame_ = nullptr;
  friend struct SparsityCtx;
};

} // namespace adjit::sparsity
