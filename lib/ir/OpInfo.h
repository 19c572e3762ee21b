// ir/OpInfo.h — what the IR knows of each op kind: its name and arity (from
// Ops.def), its core traits, and its semantic rules: the type rule, the
// reference evaluation and the fold. The op's block in lib/ops registers them
// (ops/OpTable.cpp); generic IR code (builder, printer, parser, verifier,
// interpreter, folding) reads this table and never switches on the op kind.
// The derivative rules live in autodiff/Rules.h, the lowering and planning
// facts in codegen/Lowering.h.
#pragma once

#include "ir/IR.h"

#include <fmt/format.h>

#include <array>
#include <functional>
#include <iterator>
#include <optional>
#include <span>
#include <string_view>

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

/// What the fold pass knows of a value's elements without knowing each one.
/// `ramp` and `eye` describe the elements read in row-major order, so a
/// reshape keeps them, and so does a broadcast that only repeats the whole
/// value along new leading axes.
struct Known {
  std::optional<double> splat; ///< every element is this value
  int64_t ramp = 0; ///< > 0: element k is k mod ramp (an integer iota along the last axis)
  /// > 0: element k is 1 where k mod eye² is a multiple of eye + 1, else 0:
  /// identity matrices of eye × eye one after another (one_hot of a ramp).
  int64_t eye = 0;
};

/// What is known of the elements of `a` (a constant), in one pass over them.
Known knownOf(const Array& a);

/// A fold's answer in the form of another op put in the op's place: over
/// values defined before the op, with the op's result type.
struct Rewrite {
  OpKind kind;
  ValueList operands;
  Attrs attrs;
};

/// A fold's answer: reuse an existing value, a constant, another op in the
/// op's place, or the op kept with facts about its result (for the folds of
/// the ops that read it).
using Folded = std::variant<ValueId, Array, Rewrite, Known>;

/// What a fold sees: the op and, for each operand, its constant value and
/// what else is known of its elements.
struct FoldCtx {
  const Op& op;
  const Function& fn;
  std::span<const Array* const> constants; ///< nullptr where the operand is not constant
  std::span<const Known> known;            ///< what is known of each operand's elements
  const Type& type(ValueId v) const { return fn.type(v); }
  /// True when every element of operand `i` is known to equal `v` (a constant,
  /// or a broadcast or reshape of one).
  bool isSplat(std::size_t i, double v) const;
  /// The n where operand `i` is known to be identity matrices [..., n, n] (its
  /// last two axes n × n and its elements `Known::eye` of n), else 0.
  int64_t identity(std::size_t i) const;
};

/// What the IR layer knows of an op kind without running it.
enum Trait : uint32_t {
  kPure = 1u << 0,                ///< no side effects: may be CSE'd, folded, dropped if unused
  kElementwise = 1u << 1,         ///< operands and result share a shape; result element i reads operand elements i
  kCommutative = 1u << 2,         ///< operands 0 and 1 may be swapped
  kElementsFromOperand = 1u << 3, ///< every result element is an element of operand 0 (splats stay splats)
  kHasCallee = 1u << 4,           ///< references functions of the module
  kForwardsToCallee = 1u << 5,    ///< operands and results are its first callee's parameters and results, one to one
  kHostOnly = 1u << 6,            ///< needs the adjit runtime in the process: cannot be compiled ahead of time
  kLocationInCode = 1u << 7,      ///< its compiled code reports the op's source location (kernel cache keys include it)
};

/// The IR's table entry of an op kind.
struct OpInfo {
  std::string_view name; ///< the mnemonic
  int arity = 0;         ///< -1: variadic
  uint32_t traits = 0;   ///< Trait bits
  std::vector<Type> (*infer)(const InferCtx&) = nullptr;
  std::vector<Array> (*eval)(const EvalCtx&) = nullptr;
  std::optional<Folded> (*fold)(const FoldCtx&) = nullptr;
  bool has(Trait t) const { return (traits & t) != 0; }
};

/// The table entry of an op kind.
const OpInfo& info(OpKind k);
/// The op kind spelled `mnemonic`, if any.
std::optional<OpKind> lookup(std::string_view mnemonic);
/// Every op kind, in table order.
std::span<const OpKind> allOps();
/// Sets op kind k's traits and rules: called once per op, at start-up, by the
/// op's block (ops/OpTable.cpp); name and arity come from Ops.def.
void define(OpKind k, uint32_t traits, decltype(OpInfo::infer) infer, decltype(OpInfo::eval) eval,
            decltype(OpInfo::fold) fold);

/// Replaces `key` with op's identity as bytes: kind, operands through `map`
/// (a commutative op's two in order), callees and attributes (exactly, in
/// binary: formatting them as text cost more than the lookups). Two ops
/// without side effects whose keys are equal compute the same values.
void identityKey(std::string& key, const Op& op, const std::vector<ValueId>& map);

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
  std::optional<uint32_t> findOrAdd(const Op& op, uint32_t number, const std::vector<ValueId>& map, Added added) {
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
  void prefetch(const Op& op, const std::vector<ValueId>& map) {
    __builtin_prefetch(&slots_[hashOf(op, map, other_) & mask_]);
  }

private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint32_t tag = 0, number = kEmpty;
  };
  static uint64_t hashOf(const Op& op, const std::vector<ValueId>& map, std::string& key) {
    identityKey(key, op, map);
    return std::hash<std::string_view>()(key);
  }
  std::vector<Slot> slots_;
  std::size_t mask_;
  std::string key_, other_;
};

/// Fold that never simplifies (for ops without algebraic identities).
std::optional<Folded> noFold(const FoldCtx&);

} // namespace adjit::ir
