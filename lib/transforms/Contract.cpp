// transforms/Contract.cpp — einsum written with broadcasting becomes a matmul.
// reduce_sum(mul(broadcast_to(a), broadcast_to(b))) reads each element of a
// and b many times through the broadcasts; as transposes, reshapes and one
// batched matmul it is the contraction it denotes (XLA's dot_general). This
// gradients produce too: the VJP of an einsum is einsums. A rewrite pattern
// names the ops it matches, unlike the generic drivers.
//
// Before: verified IR. After: the same results; the replaced mul and
// broadcasts may be dead (run dce).
#include "ir/Builder.h"
#include "ir/OpInfo.h"
#include "transforms/Passes.h"
#include "transforms/RebuildSums.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace adjit::transforms {
namespace {

using ir::OpKind;
using ir::ValueId;

/// Products smaller than this stay fused loops: a matmul's own loops and the
/// transposed copies of its operands would cost more than they save.
constexpr int64_t kMinProductElements = 4096;

/// The shortest contraction for which b is read transposed in place.
constexpr int64_t kMinTransposedK = 64;

/// The largest M and N of a product computed as dot products (A B^T) when
/// its contraction is long: up to two micro-tiles of the packed kernel.
constexpr int64_t kMaxDotSide = 32;

/// The shortest contraction for which a matrix-vector product (M or N of
/// one) is rewritten.
constexpr int64_t kMinMatvecK = 16;

/// How many times more rows than columns make a product with few columns
/// (at most kMaxDotSide) computed transposed.
constexpr int64_t kTallRatio = 8;

/// Whether a product of this type is one to compute as a matmul.
bool worthRewriting(const Type& product) { return is_floating(product.dtype) && product.size() >= kMinProductElements; }

/// One operand of the product: the value before broadcasting, and for each
/// axis of the product whether it holds that axis (size > 1) or repeats it.
struct Side {
  ValueId source;
  std::vector<char> holds; ///< per product axis
};

Side sideOf(const ir::Function& f, const std::vector<const ir::Op*>& producer, ValueId v, const Shape& product) {
  // Values made by an earlier rewrite are past the table: they are not broadcasts.
  const ir::Op* p = static_cast<std::size_t>(v) < producer.size() ? producer[static_cast<std::size_t>(v)] : nullptr;
  Side s{v, std::vector<char>(product.size(), 1)};
  if (!p || p->kind != OpKind::BroadcastTo) return s;
  s.source = p->operands[0];
  const Shape& in = f.type(s.source).shape;
  const std::size_t off = product.size() - in.size();
  for (std::size_t d = 0; d < product.size(); ++d) s.holds[d] = d >= off && in[d - off] == product[d];
  return s;
}

enum class Role : uint8_t { Unit, Batch, M, N, K };

class Rewriter {
public:
  Rewriter(ir::Module& m, ir::Function& f, const std::vector<const ir::Op*>& producer) : b_(m, f), f_(f), producer_(producer) {}

  /// The contraction computing `r` (a reduce_sum of a mul), appended to the
  /// function, or -1 when `r` is not one worth rewriting.
  ValueId rewrite(const ir::Op& r, const std::vector<int>& uses) {
    // An operand made by an earlier rewrite (a sum of a contraction) is past
    // the tables, and no mul.
    const std::size_t in = static_cast<std::size_t>(r.operands[0]);
    if (in >= producer_.size() || in >= uses.size()) return -1;
    const ir::Op* mul = producer_[in];
    if (!mul || mul->kind != OpKind::Mul || uses[in] != 1) return -1;
    // Copies: creating ops below appends to f.types.
    const Type pt = f_.type(r.operands[0]);
    const Shape resultShape = f_.type(r.results[0]).shape;
    if (!worthRewriting(pt)) return -1;
    const Shape& P = pt.shape;
    const Side a = sideOf(f_, producer_, mul->operands[0], P), b = sideOf(f_, producer_, mul->operands[1], P);
    std::vector<char> reduced(P.size(), 0);
    for (int64_t ax : r.attrs.ints("axes")) reduced[static_cast<std::size_t>(ax < 0 ? ax + static_cast<int64_t>(P.size()) : ax)] = 1;
    std::vector<Role> role(P.size());
    bool hasK = false, hasMN = false;
    for (std::size_t d = 0; d < P.size(); ++d) {
      if (P[d] == 1) role[d] = Role::Unit;
      else if (reduced[d]) {
        if (!a.holds[d] || !b.holds[d]) return -1; // a plain sum of one side: not a contraction
        role[d] = Role::K;
        hasK = true;
      } else if (a.holds[d] && b.holds[d]) role[d] = Role::Batch;
      else if (a.holds[d]) role[d] = Role::M, hasMN = true;
      else if (b.holds[d]) role[d] = Role::N, hasMN = true;
      else return -1; // neither side varies along a kept axis
    }
    if (!hasK || !hasMN) return -1;
    loc_ = r.loc;
    Side A0 = a, B0 = b;
    // a as [batch, M, K], b as [batch, K, N], then matmul. Each side keeps
    // its innermost axis innermost, a transpose flag saying which way it
    // lies: what transposing remains moves whole rows. Except a b whose rows
    // of K are short: a kernel reading B^T packs it element by element, which
    // costs as much as the product when K is small (the GMM's K = D = 10).
    int64_t kSize = 1;
    for (std::size_t d = 0; d < P.size(); ++d)
      if (role[d] == Role::K) kSize *= P[d];
    int64_t mSize = 1, nSize = 1;
    for (std::size_t d = 0; d < P.size(); ++d) {
      if (role[d] == Role::M) mSize *= P[d];
      if (role[d] == Role::N) nSize *= P[d];
    }
    // A matrix-vector product with a short contraction stays a fused loop:
    // that loop reads each element of the matrix side once, times an
    // element of the vector, which is all the product does. As a matmul the
    // matrix side is first copied into the product's layout (batch axes
    // first) and a kernel runs per batch for a few multiply-adds. (ht's
    // Jacobian: a [5, 12, 300] table combined over each triangle's 3 corners
    // became 100 products [60, 3] x [3, 1] behind a transposed copy of the
    // table, half of the Jacobian's time.)
    if ((mSize == 1 || nSize == 1) && kSize < kMinMatvecK) return -1;
    // A tall product with few columns (a GMM gradient's 1,000 x 20 from
    // K = 20) is computed transposed, C^T = B^T A^T: the kernels' column
    // panels are then full, and the tall side's copy with K before M is
    // often one a neighbouring contraction made already.
    if (nSize <= kMaxDotSide && mSize >= kTallRatio * nSize) {
      std::swap(A0, B0);
      std::swap(mSize, nSize);
      for (Role& x : role) x = x == Role::M ? Role::N : x == Role::N ? Role::M : x;
    }
    // A long contraction into a small matrix (the gradient of a GMM's Q_k:
    // 20x20 from 1,000 points) is dot products: both sides with K innermost,
    // A B^T, which the dot kernel reads in place. Its other layouts make the
    // packed kernel's tiles mostly padding.
    const bool dots = kSize >= kMinTransposedK && mSize <= kMaxDotSide && nSize <= kMaxDotSide;
    const bool ta = !dots && innermost(A0, role) == Role::M;
    const bool tb = dots || (innermost(B0, role) == Role::K && kSize >= kMinTransposedK);
    const ValueId A = ta ? operand(A0, P, role, {Role::Batch, Role::K, Role::M}) : operand(A0, P, role, {Role::Batch, Role::M, Role::K});
    const ValueId B = tb ? operand(B0, P, role, {Role::Batch, Role::N, Role::K}) : operand(B0, P, role, {Role::Batch, Role::K, Role::N});
    ir::Attrs flags;
    if (ta) flags.set("transpose_a", true);
    if (tb) flags.set("transpose_b", true);
    const ValueId C = b_.create1(OpKind::Matmul, {A, B}, std::move(flags), loc_);
    // [batch..., M..., N...] back to the kept axes in the product's order.
    std::vector<std::size_t> kept;
    for (Role want : {Role::Batch, Role::M, Role::N})
      for (std::size_t d = 0; d < P.size(); ++d)
        if (role[d] == want) kept.push_back(d);
    Shape keptShape;
    for (std::size_t d : kept) keptShape.push_back(P[d]);
    std::vector<int64_t> perm(kept.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::sort(perm.begin(), perm.end(), [&](int64_t x, int64_t y) { return kept[static_cast<std::size_t>(x)] < kept[static_cast<std::size_t>(y)]; });
    ValueId out = transpose(reshape(C, keptShape), perm);
    return reshape(out, resultShape);
  }

private:
  /// The role of the side's innermost varying axis.
  static Role innermost(const Side& s, const std::vector<Role>& role) {
    for (std::size_t d = role.size(); d-- > 0;)
      if (s.holds[d] && role[d] != Role::Unit) return role[d];
    return Role::Unit;
  }

  /// The side's source as a rank-3 [groups...] array: its axes of the given
  /// roles, in that order, each group flattened.
  ValueId operand(const Side& s, const Shape& P, const std::vector<Role>& role, std::initializer_list<Role> groups) {
    // The source's axes that vary, in the product's order (others have size 1).
    std::vector<std::size_t> axes;
    for (std::size_t d = 0; d < P.size(); ++d)
      if (s.holds[d] && role[d] != Role::Unit) axes.push_back(d);
    Shape squeezed;
    for (std::size_t d : axes) squeezed.push_back(P[d]);
    std::vector<int64_t> perm;
    Shape grouped;
    for (Role g : groups) {
      int64_t size = 1;
      for (std::size_t i = 0; i < axes.size(); ++i)
        if (role[axes[i]] == g) {
          perm.push_back(static_cast<int64_t>(i));
          size *= P[axes[i]];
        }
      grouped.push_back(size);
    }
    return reshape(transpose(reshape(s.source, squeezed), perm), grouped);
  }

  // Reshapes and transposes are made once per value and shape or order:
  // the sides of a gradient's contractions are often the same transposed
  // copy (cse ran before this pass), which is then stored once.
  ValueId reshape(ValueId v, const Shape& shape) {
    if (f_.type(v).shape == shape) return v;
    auto [it, fresh] = made_.try_emplace({v, 'r', shape}, -1);
    if (fresh) {
      ir::Attrs attrs;
      attrs.set("shape", std::vector<int64_t>(shape));
      it->second = b_.create1(OpKind::Reshape, {v}, std::move(attrs), loc_);
    }
    return it->second;
  }

  ValueId transpose(ValueId v, const std::vector<int64_t>& perm) {
    if (std::is_sorted(perm.begin(), perm.end())) return v;
    auto [it, fresh] = made_.try_emplace({v, 't', perm}, -1);
    if (fresh) {
      ir::Attrs attrs;
      attrs.set("perm", perm);
      it->second = b_.create1(OpKind::Transpose, {v}, std::move(attrs), loc_);
    }
    return it->second;
  }

  std::map<std::tuple<ValueId, char, std::vector<int64_t>>, ValueId> made_;

  ir::Builder b_;
  ir::Function& f_;
  const std::vector<const ir::Op*>& producer_;
  Location loc_;
};

} // namespace

void contract(ir::Module& m) {
  for (auto& fp : m.functions) {
    ir::Function& f = *fp;
    std::vector<int> uses(f.types.size(), 0);
    for (const ir::Op& op : f.ops)
      for (ValueId o : op.operands) ++uses[static_cast<std::size_t>(o)];
    for (ValueId o : f.outputs) ++uses[static_cast<std::size_t>(o)];
    // Most functions have no candidate: leave them untouched. (An unrolled
    // LSTM's gradient sums thousands of small products; rebuilding its
    // 227,000-op list for them took 22 ms and rewrote none.)
    std::vector<char> isMul(f.types.size(), 0);
    bool candidate = false;
    for (const ir::Op& op : f.ops) {
      if (op.kind == OpKind::Mul) isMul[static_cast<std::size_t>(op.results[0])] = 1;
      candidate = candidate || (op.kind == OpKind::ReduceSum && isMul[static_cast<std::size_t>(op.operands[0])] &&
                                worthRewriting(f.type(op.operands[0])));
    }
    if (!candidate) continue;
    // New ops are appended where the reduction stood. The rewriter reads
    // muls and broadcasts through the old list: those are copied.
    rebuildSums<Rewriter>(
        m, f, [&](Rewriter& rw, const ir::Op& op) { return rw.rewrite(op, uses); },
        [](OpKind k) { return k == OpKind::Mul || k == OpKind::BroadcastTo; });
  }
}

} // namespace adjit::transforms
