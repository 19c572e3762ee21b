// ir/OpInfo.cpp — the IR's op table (names and arities from Ops.def; traits
// and rules registered by the op blocks in lib/ops), op identity for value
// numbering, and the helpers type rules use.
#include "ir/OpInfo.h"

#include "ir/Text.h"
#include "support/Assert.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

namespace adjit::ir {

namespace {
using Table = std::array<OpInfo, kNumOps>;
// Constant-initialised, so it is whole before any code runs; the op blocks
// fill in traits and rules from a static initialiser (ops/OpTable.cpp).
Table gTable{{
#define ADJIT_OP(Id, mnemonic, arity, traits) OpInfo{mnemonic, arity},
#include "ir/Ops.def"
}};
} // namespace

const OpInfo& info(OpKind k) { return gTable[static_cast<std::size_t>(k)]; }

void define(OpKind k, uint32_t traits, decltype(OpInfo::infer) infer, decltype(OpInfo::eval) eval,
            decltype(OpInfo::fold) fold) {
  OpInfo& e = gTable[static_cast<std::size_t>(k)];
  e.traits = traits;
  e.infer = infer;
  e.eval = eval;
  e.fold = fold;
}

IdentityTable::IdentityTable(std::size_t ops) {
  std::size_t capacity = 16;
  while (capacity < 2 * ops) capacity *= 2;
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

void identityKey(std::string& key, const Op& op, const std::vector<ValueId>& map) {
  auto appendRaw = [&](const void* p, std::size_t n) { key.append(static_cast<const char*>(p), n); };
  key.clear();
  const auto kind = static_cast<uint32_t>(op.kind);
  appendRaw(&kind, sizeof kind);
  const auto count = static_cast<uint32_t>(op.operands.size());
  appendRaw(&count, sizeof count);
  const std::size_t at = key.size();
  for (ValueId o : op.operands) appendRaw(&map[static_cast<std::size_t>(o)], sizeof(ValueId));
  if (count == 2 && info(op.kind).has(kCommutative)) {
    ValueId pair[2];
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
    appendAttrBytes(key, v);
  }
}

std::optional<Folded> noFold(const FoldCtx&) { return std::nullopt; }

std::optional<OpKind> lookup(std::string_view mnemonic) {
  static const std::unordered_map<std::string_view, OpKind> byName = [] {
    std::unordered_map<std::string_view, OpKind> m;
    for (std::size_t i = 0; i < kNumOps; ++i) m.emplace(gTable[i].name, static_cast<OpKind>(i));
    return m;
  }();
  auto it = byName.find(mnemonic);
  if (it == byName.end()) return std::nullopt;
  return it->second;
}

std::span<const OpKind> allOps() {
  static const std::array<OpKind, kNumOps> all = [] {
    std::array<OpKind, kNumOps> a{};
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<OpKind>(i);
    return a;
  }();
  return all;
}

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

bool FoldCtx::isSplat(std::size_t i, double v) const { return i < known.size() && known[i].splat && *known[i].splat == v; }

int64_t FoldCtx::identity(std::size_t i) const {
  if (i >= known.size() || known[i].eye == 0) return 0;
  const Shape& s = type(op.operands[i]).shape;
  const std::size_t r = s.size();
  return r >= 2 && s[r - 1] == known[i].eye && s[r - 2] == known[i].eye ? known[i].eye : 0;
}

Known knownOf(const Array& a) {
  Known k;
  const int64_t n = a.size();
  if (n == 0) return k;
  bool uniform = true;
  for (int64_t i = 1; i < n && uniform; ++i) uniform = a.at(i) == a.at(0);
  if (uniform) k.splat = a.at(0);
  // A ramp: 0, 1, ..., p - 1 repeated, p the place of the first zero after the start.
  if (is_integer(a.dtype()) && a.at(0) == 0) {
    int64_t p = 1;
    while (p < n && a.at(p) != 0) ++p;
    bool ramp = true;
    for (int64_t i = 0; i < n && ramp; ++i) ramp = a.at(i) == static_cast<double>(i % p);
    if (ramp) k.ramp = p;
  }
  // Identity matrices: the second 1 (after the one at 0) comes at e + 1.
  if (a.dtype() != DType::i1 && a.at(0) == 1) {
    int64_t second = 1;
    while (second < n && a.at(second) == 0) ++second;
    const int64_t e = std::max<int64_t>(second - 1, 1); // [1, 1, ...]: 1 × 1 identities
    bool eye = second < n || n == 1;
    for (int64_t i = 0; i < n && eye; ++i) eye = a.at(i) == ((i % (e * e)) % (e + 1) == 0 ? 1.0 : 0.0);
    if (eye) k.eye = e;
  }
  return k;
}

} // namespace adjit::ir
