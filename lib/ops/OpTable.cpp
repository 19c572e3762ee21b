// ops/OpTable.cpp — assembles the op table from Ops.def and the family files,
// and the generic helpers of the hook contexts.
#include "ops/Common.h"

#include "ir/Text.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>

namespace adjit::ops {

static Table buildTable() {
  Table t{{
#define ADJIT_OP(Id, mnemonic, arity, traits) OpInfo{mnemonic, arity, traits, {}},
#include "ops/Ops.def"
  }};
  defineArithOps(t);
  defineMathOps(t);
  defineLogicOps(t);
  defineCreationOps(t);
  defineShapeOps(t);
  defineIndexingOps(t);
  defineReduceOps(t);
  defineLinalgOps(t);
  defineCallOps(t);
  defineControlFlowOps(t);
  defineGradientOps(t);
  defineCallbackOps(t);
  return t;
}

static Table& table() {
  static Table t = buildTable();
  return t;
}

const OpInfo& info(OpKind k) { return table()[static_cast<std::size_t>(k)]; }

IdentityTable::IdentityTable(std::size_t ops) {
  std::size_t capacity = 16;
  while (capacity < 2 * ops) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

void identityKey(std::string& key, const ir::Op& op, const std::vector<ir::ValueId>& map) {
  auto appendRaw = [&](const void* p, std::size_t n) { key.append(static_cast<const char*>(p), n); };
  key.clear();
  const auto kind = static_cast<uint32_t>(op.kind);
  appendRaw(&kind, sizeof kind);
  const auto count = static_cast<uint32_t>(op.operands.size());
  appendRaw(&count, sizeof count);
  const std::size_t at = key.size();
  for (ir::ValueId o : op.operands) appendRaw(&map[static_cast<std::size_t>(o)], sizeof(ir::ValueId));
  if (count == 2 && info(op.kind).has(kCommutative)) {
    ir::ValueId pair[2];
    std::memcpy(pair, key.data() + at, sizeof pair);
    if (pair[1] < pair[0]) {
      std::swap(pair[0], pair[1]);
      std::memcpy(key.data() + at, pair, sizeof pair);
    }
  }
  for (const auto& c : op.callees) {
    key += '@';
    key += c;
    key += '\0';
  }
  for (const auto& [k, v] : op.attrs.entries()) {
    key += k;
    key += '=';
    ir::appendAttrBytes(key, v);
  }
}

std::optional<OpKind> lookup(std::string_view mnemonic) {
  static const std::unordered_map<std::string_view, OpKind> byName = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (std::size_t i = 0; i < ir::kNumOps; ++i) m.emplace(table()[i].name, static_cast<OpKind>(i));
    return m;
  }();
  auto it = byName.find(mnemonic);
  if (it == byName.end()) return std::nullopt;
  return it->second;
}

std::span<const OpKind> allOps() {
  static const std::array<OpKind, ir::kNumOps> all = [] {
    std::array<OpKind, ir::kNumOps> a{};
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<OpKind>(i);
    return a;
  }();
  return all;
}

std::optional<ir::Folded> noFold(const ir::FoldCtx&) { return std::nullopt; }

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

namespace adjit::ir {

void InferCtx::failMessage(const std::string& msg) const {
  throw Error(std::string(opName) + ": " + msg, loc);
}

static const Attr& need(const InferCtx& c, std::string_view name) {
  const auto& entries = c.attrs.entries();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].first != name) continue;
    if (i < 64) c.read |= uint64_t{1} << i;
    return entries[i].second;
  }
  c.fail("missing attribute '{}'", name);
}

template <class T> static const T& needAs(const InferCtx& c, std::string_view name, const char* what) {
  const Attr& a = need(c, name);
  if (!std::holds_alternative<T>(a)) c.fail("attribute '{}' must be {}", name, what);
  return std::get<T>(a);
}

int64_t InferCtx::integer(std::string_view name) const { return needAs<int64_t>(*this, name, "an integer"); }
bool InferCtx::boolean(std::string_view name, std::optional<bool> dflt) const {
  if (dflt && !attrs.has(name)) return *dflt;
  return needAs<bool>(*this, name, "true or false");
}
const std::vector<int64_t>& InferCtx::ints(std::string_view name) const {
  return needAs<std::vector<int64_t>>(*this, name, "a list of integers");
}
DType InferCtx::dtype(std::string_view name) const { return needAs<DType>(*this, name, "a dtype"); }
const Array& InferCtx::array(std::string_view name) const { return needAs<Array>(*this, name, "a dense array"); }
const std::string& InferCtx::string(std::string_view name) const { return needAs<std::string>(*this, name, "a string"); }

int64_t InferCtx::axis(std::string_view name, int64_t rank) const {
  const int64_t a = integer(name);
  if (a < 0 || a >= rank)
    fail("{} {} is out of range for an operand of rank {}: expected 0 <= {} < {} (the tracer counts negative axes "
         "from the end; the IR holds them counted from the front)",
         name, a, rank, name, rank);
  return a;
}

void InferCtx::expectFloat(std::size_t i) const {
  if (!is_floating(operands[i].dtype))
    fail("expected a floating-point operand, got {}", operands[i].str());
}

void InferCtx::expectSameDtype(const Type& a, const Type& b) const {
  if (a.dtype == b.dtype) return;
  // Suggest the dtype that holds both best: floating over integer, then the wider.
  auto order = [](DType d) { return d == DType::i1 ? 0 : d == DType::i32 ? 1 : d == DType::i64 ? 2 : d == DType::f32 ? 3 : 4; };
  const DType to = order(a.dtype) > order(b.dtype) ? a.dtype : b.dtype;
  fail("mismatched dtypes {} and {}; use cast(x, DType::{}) to convert one of them", a.str(), b.str(), name_of(to));
}

void InferCtx::expectSameTypes() const {
  for (std::size_t i = 1; i < operands.size(); ++i) {
    expectSameDtype(operands[0], operands[i]);
    if (operands[i].shape != operands[0].shape)
      fail("incompatible shapes {} and {}", operands[0].str(), operands[i].str());
  }
}

bool FoldCtx::isSplat(std::size_t i, double v) const { return i < splats.size() && splats[i] && *splats[i] == v; }

} // namespace adjit::ir
