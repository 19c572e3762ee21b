// ops/OpTable.h — one record of named hooks per op: its type rule, reference
// evaluation, folding, lowering and planning facts, VJP and JVP. Generic code — printer,
// parser, verifier, interpreter, passes, codegen driver — reads this table and
// never switches on the op kind.
#pragma once

#include "ir/IR.h"

#include <fmt/format.h>

#include <array>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

namespace llvm { class Value; }
namespace adjit::codegen { struct EmitBase; struct ScalarCtx; struct ElementCtx; struct LowerCtx; struct VectorUnit; }
namespace adjit::autodiff { struct VjpCtx; struct JvpCtx; }

namespace adjit::ir {

/// Types a type rule reads: either contiguous (a span) or references to the
/// function's own types (how ops are created: copying each operand's type,
/// its shape on the heap, was a sixth of creating an op).
class TypeRefs {
public:
  class iterator {
  public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = Type;
    using difference_type = std::ptrdiff_t;
    using pointer = const Type*;
    using reference = const Type&;
    iterator() = default;
    iterator(const TypeRefs* r, std::size_t i) : r_(r), i_(i) {}
    const Type& operator*() const { return (*r_)[i_]; }
    const Type* operator->() const { return &(*r_)[i_]; }
    const Type& operator[](difference_type k) const { return (*r_)[i_ + static_cast<std::size_t>(k)]; }
    iterator& operator++() { ++i_; return *this; }
    iterator operator++(int) { iterator t = *this; ++i_; return t; }
    iterator& operator--() { --i_; return *this; }
    iterator operator--(int) { iterator t = *this; --i_; return t; }
    iterator& operator+=(difference_type k) { i_ += static_cast<std::size_t>(k); return *this; }
    iterator& operator-=(difference_type k) { i_ -= static_cast<std::size_t>(k); return *this; }
    friend iterator operator+(iterator a, difference_type k) { return a += k; }
    friend iterator operator+(difference_type k, iterator a) { return a += k; }
    friend iterator operator-(iterator a, difference_type k) { return a -= k; }
    friend difference_type operator-(const iterator& a, const iterator& b) {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    friend bool operator==(const iterator& a, const iterator& b) { return a.i_ == b.i_; }
    friend auto operator<=>(const iterator& a, const iterator& b) { return a.i_ <=> b.i_; }

  private:
    const TypeRefs* r_ = nullptr;
    std::size_t i_ = 0;
  };

  TypeRefs() = default;
  TypeRefs(std::span<const Type> types) : base_(types.data()), n_(types.size()) {} // NOLINT: implicit, like a span
  TypeRefs(const std::vector<Type>& types) : TypeRefs(std::span<const Type>(types)) {} // NOLINT
  static TypeRefs of(std::span<const Type* const> refs) {
    TypeRefs r;
    r.refs_ = refs.data();
    r.n_ = refs.size();
    return r;
  }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const Type& operator[](std::size_t i) const { return refs_ ? *refs_[i] : base_[i]; }
  const Type& back() const { return (*this)[n_ - 1]; }
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, n_}; }
  TypeRefs subspan(std::size_t from, std::size_t count = std::dynamic_extent) const {
    TypeRefs r = *this;
    const std::size_t n = count == std::dynamic_extent ? n_ - from : count;
    if (refs_) r.refs_ += from;
    else r.base_ += from;
    r.n_ = n;
    return r;
  }
  TypeRefs first(std::size_t count) const { return subspan(0, count); }
  TypeRefs last(std::size_t count) const { return subspan(n_ - count, count); }

private:
  const Type* base_ = nullptr;
  const Type* const* refs_ = nullptr;
  std::size_t n_ = 0;
};

/// What a type rule sees: operand types, attributes, referenced functions.
/// `fail` raises the user error "<op>: <message>" at the op's location.
struct InferCtx {
  std::string_view opName;
  TypeRefs operands;
  const Attrs& attrs;
  std::span<const Function* const> callees;
  const Location& loc;
  /// Which of `attrs`' entries the rule read (bit i: entry i). An attribute
  /// the rule never reads is unknown to the op: an error, not silently kept.
  mutable uint64_t read = 0;

  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    failMessage(fmt::format(f, std::forward<A>(a)...));
  }
  [[noreturn]] void failMessage(const std::string& msg) const;

  // Attribute readers that report a missing or mistyped attribute as a user error.
  int64_t integer(std::string_view name) const;
  bool boolean(std::string_view name, std::optional<bool> dflt = {}) const;
  const std::vector<int64_t>& ints(std::string_view name) const;
  DType dtype(std::string_view name) const;
  const Array& array(std::string_view name) const;
  const std::string& string(std::string_view name) const;
  /// Reads an axis attribute and checks 0 <= axis < rank. The IR holds an
  /// axis counted from the front (the tracer normalises a negative one), so
  /// every hook of the op may index with it as it is.
  int64_t axis(std::string_view name, int64_t rank) const;
  /// Checks operand `i` has a floating dtype ("exp: expected a floating-point operand, got i32[3]").
  void expectFloat(std::size_t i) const;
  /// Checks all operands have the same type.
  void expectSameTypes() const;
  /// Checks `a` and `b` have one dtype ("mismatched dtypes f32[3] and f64[3];
  /// use cast(x, DType::f64) to convert one of them").
  void expectSameDtype(const Type& a, const Type& b) const;
};

/// What a reference evaluation sees: the op, the argument arrays, result types,
/// and a way to run a referenced function.
struct EvalCtx {
  const Op& op;
  const Function& fn;
  std::span<const Array> args;
  std::function<std::vector<Array>(const std::string&, std::span<const Array>)> call;
  const Type& resultType(std::size_t i = 0) const { return fn.type(op.results.at(i)); }
};

/// A fold's answer: reuse an existing value, or a constant.
using Folded = std::variant<ValueId, Array>;

/// What a fold sees: the op and, for each operand, its constant value if known.
struct FoldCtx {
  const Op& op;
  const Function& fn;
  std::span<const Array* const> constants; ///< nullptr where the operand is not constant
  std::span<const std::optional<double>> splats; ///< the operand's value where all its elements are one
  const Type& type(ValueId v) const { return fn.type(v); }
  /// True when every element of operand `i` is known to equal `v` (a constant,
  /// or a broadcast or reshape of one).
  bool isSplat(std::size_t i, double v) const;
};

} // namespace adjit::ir

namespace adjit::ops {

using ir::OpKind;

enum Trait : uint32_t {
  kPure = 1u << 0,                 ///< no side effects: may be CSE'd, folded, dropped if unused
  kElementwise = 1u << 1,          ///< operands and result share a shape; lowered by a scalar body
  kCommutative = 1u << 2,          ///< operands 0 and 1 may be swapped
  kNonDifferentiable = 1u << 3,    ///< results carry no gradient
  kExpensive = 1u << 4,            ///< worth materialising rather than recomputing when reused
  kRemapsIndex = 1u << 5,          ///< reads operand elements at other indices than the result's
  kMaterializesOperands = 1u << 6, ///< its lowering reads operands from buffers, not fused
  kHasCallee = 1u << 7,            ///< references functions of the module
  kElementsFromOperand = 1u << 8,  ///< every result element is an element of operand 0 (splats stay splats)
  kHostOnly = 1u << 9,             ///< needs the adjit runtime in the process: cannot be compiled ahead of time
  kGradientIsError = 1u << 10,     ///< differentiable in form, but its VJP rule raises an error (prevent_gradient)
  kLocationInCode = 1u << 11,      ///< its compiled code reports the op's source location (kernel cache keys include it)
  kLoopPerOperand = 1u << 12,      ///< its lowering reads each operand in a loop of its own: the fusion budget bounds each operand, not their sum
  // Linearity, for checking that a custom gradient's grad_fn is linear in its
  // output gradients before forward mode transposes it (autodiff/Linearity.cpp).
  kLinear = 1u << 13,           ///< linear in its floating operands jointly (integer operands, an index or predicate, fixed)
  kLinearInEach = 1u << 14,     ///< linear in each operand while the others are fixed (mul, matmul)
  kLinearInFirst = 1u << 15,    ///< linear in operand 0 while the others are fixed (div)
  kForwardsToCallee = 1u << 16, ///< operands and results are its first callee's parameters and results, one to one
  /// Its `lower` hook honours LowerCtx::rowBegin/rowEnd: it then writes those
  /// rows of its result only, reading those rows of its operands (which keep
  /// rows: `keepsRows`), so it can run block by block in a row group.
  kRowRanges = 1u << 17,
  /// Its `lower` hook calls LowerCtx::epilogue, when set, on every tile of its
  /// (single) result once the tile's elements are final: each element in
  /// exactly one tile, a tile being rows [row0, row1) and columns [col0, col1)
  /// of the last two axes of matrix `matrix` (the leading axes, linearised).
  /// The planner then runs an elementwise consumer of the result on each tile
  /// while it is in cache (FusionPlan.h, Kernel::epilogue).
  kTileEpilogue = 1u << 18,
  /// Its `lower` hook computes operand i on the tiles it reads (matmul's
  /// packing) through LowerCtx::prologue[i], when set, instead of reading it.
  /// The planner sets it for an elementwise producer of an operand where the
  /// `tilesOperand` hook says the lowering reads that operand by tiles; the
  /// operand then never goes through memory (Kernel::prologueOf).
  kTilePrologue = 1u << 19,
};

/// Reductions over the attribute `axes` (with `keepdims`): the codegen driver
/// emits their loops itself, fusing them with other loops over the same
/// domain; the op supplies the accumulator's identity and combine step.
struct ReduceHooks {
  /// The accumulator's start, a constant of dtype t (kept in t: INT64_MAX is
  /// not a double).
  llvm::Value* (*identity)(codegen::EmitBase&, DType t);
  llvm::Value* (*combine)(codegen::EmitBase&, DType, llvm::Value* acc, llvm::Value* x);
};

/// A libm function an op's scalar lowering calls: `name` for f64, `name`+"f"
/// for f32. Declared in the op's block, so the code generator registers its
/// glibc libmvec variants with the loop vectorizer (codegen/VectorMath.cpp).
struct MathFunction {
  const char* name = nullptr; ///< null: the op calls no libm function
  int arity = 1;
  bool hasIntrinsic = false; ///< llvm.<name>.f32/.f64 exists and maps to the same vector variants
  bool vector = true;        ///< glibc's libmvec has variants (lgamma has none: vector loops call it per lane)
};

/// The hooks of one op. Exactly one of `scalar` (elementwise ops), `element`
/// (ops that compute one result element from operand elements), `reduce`
/// (reductions) or `lower` (ops that write whole results) is set.
struct Hooks {
  std::vector<Type> (*infer)(const ir::InferCtx&) = nullptr;
  std::vector<Array> (*eval)(const ir::EvalCtx&) = nullptr;
  std::optional<ir::Folded> (*fold)(const ir::FoldCtx&) = nullptr;
  llvm::Value* (*scalar)(codegen::ScalarCtx&) = nullptr;
  llvm::Value* (*element)(codegen::ElementCtx&) = nullptr;
  void (*lower)(codegen::LowerCtx&) = nullptr;
  const ReduceHooks* reduce = nullptr;
  /// The libm function `scalar` calls, if any (see MathFunction).
  MathFunction libm = {};
  /// For ops whose result is a contiguous run of operand 0's elements in the
  /// same row-major order (a reshape; a slice of whole trailing rows): the
  /// element offset where that run starts, or nullopt when this op's result is
  /// not such a run. The fusion plan then gives the result no buffer of its
  /// own: it reads the operand's buffer from that offset, copying nothing.
  std::optional<int64_t> (*view)(const Type& operand, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with an `element` hook: whether result elements [r, ...] read
  /// operand `i` at elements [r, ...] only, for every row r, given that both
  /// have the same extent on axis 0 (a slice or pad that keeps axis 0 whole,
  /// a transpose that keeps it first, a gather's indices along axis 0). Loops
  /// over the same rows that read each other's values only so may run block
  /// by block (codegen's RowGroup). Null: reads may be at any row.
  bool (*keepsRows)(const Type& operand, std::size_t i, const Type& result, const ir::Attrs&) = nullptr;
  /// For ops with kTilePrologue: whether the lowering for this vector unit
  /// reads operand `i` tile by tile (matmul's packed kernel packs both), so
  /// that a prologue can compute it there; else the planner leaves its
  /// producer a loop of its own (which may run on threads).
  bool (*tilesOperand)(std::span<const Type> operands, std::size_t i, const ir::Attrs&, const codegen::VectorUnit&) = nullptr;
  /// For ops with kTileEpilogue: the grid the lowering for this vector unit
  /// cuts each matrix of its result into, {rows, columns}: every tile it
  /// passes to the epilogue is one cell, rows [i·rows, (i+1)·rows) and
  /// columns [j·columns, (j+1)·columns) clipped to the matrix, and every cell
  /// is one tile. An epilogue that reduces then folds each cell (each row of
  /// a cell, when rows are kept) into a partial result of its own: no two
  /// threads write one, and they combine in the grid's order, so results do
  /// not depend on how the lowering shares cells among threads.
  std::pair<int64_t, int64_t> (*tileGrid)(std::span<const Type> operands, const ir::Attrs&, const codegen::VectorUnit&) = nullptr;
  /// For ops whose result is data held in an attribute (a constant): that
  /// data, or null when the op computes its elements more cheaply than a load
  /// (a splat: one repeated element, an immediate). The fusion plan reads the
  /// data from a global like a parameter's buffer: no loop computes it, slices
  /// of it are views, and code reading different rows of it is shared (an
  /// unrolled loop over a constant sequence).
  const Array* (*data)(const ir::Attrs&) = nullptr;
  /// Sets result tangents from operand tangents (forward mode). Required
  /// unless the op is kNonDifferentiable.
  void (*jvp)(const autodiff::JvpCtx&) = nullptr;
  /// Adds operand cotangents from result cotangents (reverse mode). Required
  /// unless the op is kNonDifferentiable.
  void (*vjp)(const autodiff::VjpCtx&) = nullptr;
  /// For table-driven tests: a small `.adj` module whose function @f (f64
  /// parameters) uses the op. Required for differentiable ops that are not
  /// plain floating elementwise ops (those get synthesised examples).
  const char* example = nullptr;
};

struct OpInfo {
  std::string_view name;
  int arity; ///< -1: variadic
  uint32_t traits;
  Hooks hooks;
  bool has(Trait t) const { return (traits & t) != 0; }
};

/// The table entry of an op kind.
const OpInfo& info(OpKind k);
/// The op kind spelled `mnemonic`, if any.
std::optional<OpKind> lookup(std::string_view mnemonic);
/// Every op kind, in table order.
std::span<const OpKind> allOps();

/// Replaces `key` with op's identity as bytes: kind, operands through `map`
/// (a commutative op's two in order), callees and attributes (exactly, in
/// binary: formatting them as text cost more than the lookups). Two ops
/// without side effects whose keys are equal compute the same values.
void identityKey(std::string& key, const ir::Op& op, const std::vector<ir::ValueId>& map);

/// Value numbering (transforms::cse, reverse mode): a table of ops by
/// identity. Open addressing over (hash tag, op number) slots of 8 bytes; an
/// op's key is made again only to confirm a match. Keeping every key (an
/// arena of tens of megabytes for 200,000 ops) and 32-byte slots cost more
/// in cache misses and fresh pages than the lookups.
class IdentityTable {
public:
  /// A table for up to `ops` ops.
  explicit IdentityTable(std::size_t ops);
  /// The number of an op added earlier that is identical to `op` (operands
  /// through `map`); otherwise adds `op` as `number` (< UINT32_MAX) and
  /// returns nullopt. `added(k)` is the op added as number k.
  template <class Added>
  std::optional<uint32_t> findOrAdd(const ir::Op& op, uint32_t number, const std::vector<ir::ValueId>& map, Added added) {
    const uint64_t hash = hashOf(op, map, key_);
    const auto tag = static_cast<uint32_t>(hash >> 32);
    std::size_t i = hash & mask_;
    for (; slots_[i].number != kEmpty; i = (i + 1) & mask_) {
      if (slots_[i].tag != tag) continue;
      identityKey(other_, added(slots_[i].number), map);
      if (other_ == key_) return slots_[i].number;
    }
    slots_[i] = {tag, number};
    return std::nullopt;
  }
  /// Fetches the slot `op` would take (a few ops ahead of the lookups: the
  /// table does not stay in cache while the ops stream through it).
  void prefetch(const ir::Op& op, const std::vector<ir::ValueId>& map) {
    __builtin_prefetch(&slots_[hashOf(op, map, other_) & mask_]);
  }

private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint32_t tag = 0, number = kEmpty;
  };
  static uint64_t hashOf(const ir::Op& op, const std::vector<ir::ValueId>& map, std::string& key) {
    identityKey(key, op, map);
    return std::hash<std::string_view>()(key);
  }
  std::vector<Slot> slots_;
  std::size_t mask_;
  std::string key_, other_;
};

/// Fold that never simplifies (for ops without algebraic identities).
std::optional<ir::Folded> noFold(const ir::FoldCtx&);

// Each family file fills the hooks of its ops.
using Table = std::array<OpInfo, ir::kNumOps>;
void defineArithOps(Table&);
void defineMathOps(Table&);
void defineLogicOps(Table&);
void defineCreationOps(Table&);
void defineShapeOps(Table&);
void defineIndexingOps(Table&);
void defineReduceOps(Table&);
void defineLinalgOps(Table&);
void defineCallOps(Table&);
void defineControlFlowOps(Table&);
void defineGradientOps(Table&);
void defineCallbackOps(Table&);

inline void set(Table& t, OpKind k, Hooks h) { t[static_cast<std::size_t>(k)].hooks = h; }

} // namespace adjit::ops
