// ops/Shape.cpp — reshape, broadcast_to, transpose, slice, pad, pad_sum, concatenate.
// All but pad_sum and concatenate compute a result element from one operand
// element, so they fuse into their consumers' loops; those two place each
// operand into the result (placeOperands).
#include "codegen/Emitter.h"
#include "autodiff/JvpCtx.h"
#include "autodiff/VjpCtx.h"
#include "ops/Common.h"

#include <llvm/IR/Module.h>

#include <map>
#include <optional>
#include <tuple>

namespace adjit::ops {
namespace {

using codegen::AxisShift;
using codegen::ElementCtx;
using codegen::Index;
using codegen::LowerCtx;
using ir::EvalCtx;
using ir::InferCtx;

/// Result of mapping each result element to an operand element by index.
template <class Map> Array gatherBy(const Array& x, const Type& rt, Map map) {
  Array r(rt);
  const std::size_t w = size_of(x.dtype());
  for (int64_t i = 0; i < r.size(); ++i) {
    int64_t src = map(unravel(i, rt.shape));
    std::memcpy(static_cast<char*>(r.raw()) + i * w, static_cast<const char*>(x.raw()) + src * w, w);
  }
  return r;
}

/// What a reshape or a broadcast keeps of what is known of its operand's
/// elements beyond a splat (which the fold pass carries itself): the ramp
/// and the identity matrices, when the result's elements in row-major order
/// are the operand's, repeated whole.
std::optional<ir::Folded> keepOrder(const ir::FoldCtx& c) {
  const ir::Known& k = c.known[0];
  if (!k.ramp && !k.eye) return std::nullopt;
  return ir::Folded{ir::Known{.splat = {}, .ramp = k.ramp, .eye = k.eye}};
}

/// The operand index of a reshape's result element at c.index, from its
/// dims, where no division is needed: axes of extent 1 aside, the two shapes
/// split into runs of equal extent, and each run of the operand is one axis
/// (kept, or the merge of the result's run). A linear position would make
/// an operand that is not contiguous (a broadcast) divide it back into dims,
/// in the innermost loop: an unrolled GMM gradient's reshape of [5, 1000] to
/// [5, 1, 1000] made its [5, 2, 1000] loop scalar. Nullopt where an operand
/// axis splits across the run, or for an index given by its linear position.
std::optional<Index> reshapedIndex(const ElementCtx& c) {
  const Shape &in = c.operandType(0).shape, &out = c.resultType().shape;
  if (c.index.linearFirst || c.index.dims.size() != out.size()) return std::nullopt;
  std::vector<std::size_t> ia, oa; // axes of extent > 1
  for (std::size_t a = 0; a < in.size(); ++a) {
    if (in[a] == 0) return std::nullopt;
    if (in[a] > 1) ia.push_back(a);
  }
  for (std::size_t a = 0; a < out.size(); ++a)
    if (out[a] > 1) oa.push_back(a);
  std::vector<llvm::Value*> dims(in.size(), c.i64(0));
  std::size_t j = 0;
  for (std::size_t i : ia) { // one operand axis per run
    if (j == oa.size()) return std::nullopt;
    int64_t extent = out[oa[j]];
    llvm::Value* at = c.index.dims[oa[j++]];
    while (extent < in[i] && j < oa.size()) {
      extent *= out[oa[j]];
      at = c.b.CreateAdd(c.b.CreateMul(at, c.i64(out[oa[j]])), c.index.dims[oa[j]]);
      ++j;
    }
    if (extent != in[i]) return std::nullopt;
    dims[i] = at;
  }
  if (j != oa.size()) return std::nullopt;
  Index r = Index::ofDims(std::move(dims));
  r.linear = c.index.linear; // the same position in both shapes' row-major order
  return r;
}

struct SliceSpec {
  std::vector<int64_t> start, limit, stride;
};
SliceSpec sliceSpec(const ir::Attrs& a) { return {a.ints("start"), a.ints("limit"), a.ints("stride")}; }

/// The elements of `padded` that a pad of a tensor of shape `in` placed there
/// (row `k` of `low` and `interior`, `in.size()` entries each): a strided slice.
Tensor unpad(const Tensor& padded, const Shape& in, const std::vector<int64_t>& low,
             const std::vector<int64_t>& interior, std::size_t k = 0) {
  const std::size_t r = in.size();
  std::vector<int64_t> st(r), li(r), sd(r);
  for (std::size_t d = 0; d < r; ++d) {
    st[d] = low[k * r + d];
    sd[d] = interior[k * r + d] + 1;
    li[d] = in[d] == 0 ? st[d] : st[d] + (in[d] - 1) * sd[d] + 1;
  }
  return slice(padded, st, li, sd);
}

/// Where an operand goes in the result: element i (a multi-index) lands at
/// linear position `offset` + sum over d of i[d] * stride[d].
struct Placed {
  int64_t offset;
  std::vector<int64_t> stride;
};

/// Writes each operand of the op into the result where `placed` says, or
/// with `accumulate` adds it there (into zeros the caller wrote). An operand
/// computed inline gets a loop nest of its own. Operands with buffers at
/// constant offsets from one base (the scratch region) and of one shape and
/// stride share one loop over two constant tables, their offsets and their
/// places: a thousand operands are one loop nest, not a thousand loops, nor a
/// thousand stores of pointers (LLVM's passes and instruction selection take
/// seconds over either). In a row group's block (LowerCtx::rowBegin) one
/// loop over the block's rows zeroes each row of the result (with
/// `accumulate`) and places every operand's row in it.
void placeOperands(LowerCtx& c, const std::vector<Placed>& placed, bool accumulate) {
  const Type& rt = c.resultType();
  auto put = [&](llvm::Value* dst, llvm::Value* x) {
    if (accumulate) {
      llvm::Value* old = c.load(rt.dtype, c.results[0], dst);
      x = is_floating(rt.dtype) ? c.b.CreateFAdd(old, x) : rt.dtype == DType::i1 ? c.b.CreateOr(old, x) : c.b.CreateAdd(old, x);
    }
    c.store(rt.dtype, x, c.results[0], dst);
  };
  auto position = [&](llvm::Value* base, const Index& idx, const Shape& s, const std::vector<int64_t>& stride) {
    const auto& o = c.dims(idx, s);
    for (std::size_t d = 0; d < o.size(); ++d) base = c.b.CreateAdd(base, c.b.CreateMul(o[d], c.i64(stride[d])));
    return base;
  };
  if (c.rowBegin) {
    // One loop over rows rather than one per operand: the BA Jacobian's two
    // assemblies of 11 operands were 24 loops over a block's 80 rows.
    bool matrices = false;
    llvm::Instruction* latch = c.loopRange(c.rowBegin, c.rowEnd, [&](llvm::Value* row) {
      const Shape rowShape(rt.shape.begin() + 1, rt.shape.end());
      auto rowAt = [&](const Index& idx, const Shape& s) {
        std::vector<llvm::Value*> d{row};
        const auto& rest = c.dims(idx, s);
        d.insert(d.end(), rest.begin(), rest.end());
        return Index::ofDims(std::move(d));
      };
      if (accumulate)
        c.loopNest(rowShape, [&](const Index& i) {
          c.store(rt.dtype, c.constant(rt.dtype, 0), c.results[0], c.linear(rowAt(i, rowShape), rt.shape));
        });
      for (std::size_t k = 0; k < placed.size(); ++k) {
        const Shape& s = c.operandType(k).shape;
        const Shape rest(s.begin() + 1, s.end());
        matrices = matrices || !rest.empty();
        c.loopNest(rest, [&](const Index& i) {
          const Index at = rowAt(i, rest);
          put(position(c.i64(placed[k].offset), at, s, placed[k].stride), c.operand(k, at));
        });
      }
    });
    // A matrix operand's few elements per row go a row of the result apart:
    // vectorised along the rows, that is strided stores and run-time checks,
    // slower than scalar code. ADBench BA's Jacobian: LLVM 150-165 -> 122-130
    // ms on two threads, and the derivative no slower (ba3 10.4 -> 9.6 ms).
    if (matrices) codegen::setLoopHints(latch, {codegen::noVectorizeHint(c.ctx())});
    return;
  }
  struct Source {
    std::size_t operand;
    int64_t byteOffset;
  };
  const llvm::DataLayout& dl = c.llvmModule().getDataLayout();
  // Classes in order of first operand: ordering by the base pointer's
  // address would make the emitted code differ from run to run.
  using Class = std::tuple<Shape, std::vector<int64_t>, llvm::Value*>;
  std::map<Class, std::size_t> index;
  std::vector<std::pair<Class, std::vector<Source>>> classes;
  for (std::size_t k = 0; k < placed.size(); ++k) {
    const Shape& s = c.operandType(k).shape;
    if (!c.hasBuffer(k)) {
      c.loopNest(s, [&](const Index& idx) { put(position(c.i64(placed[k].offset), idx, s, placed[k].stride), c.operand(k, idx)); });
      continue;
    }
    llvm::APInt off(64, 0);
    llvm::Value* base = c.operandBuffer(k)->stripAndAccumulateConstantOffsets(dl, off, /*AllowNonInbounds=*/true);
    Class key{s, placed[k].stride, base};
    auto [it, fresh] = index.try_emplace(key, classes.size());
    if (fresh) classes.push_back({std::move(key), {}});
    classes[it->second].second.push_back({k, off.getSExtValue()});
  }
  for (const auto& [cls, members] : classes) {
    const auto& [s, stride, base] = cls;
    if (members.size() == 1) {
      const std::size_t k = members[0].operand;
      c.loopNest(s, [&](const Index& idx) { put(position(c.i64(placed[k].offset), idx, s, stride), c.operand(k, idx)); });
      continue;
    }
    Array from(Type{DType::i64, {static_cast<int64_t>(members.size())}}), to(from.type());
    for (std::size_t j = 0; j < members.size(); ++j) {
      elems<int64_t>(from)[j] = members[j].byteOffset;
      elems<int64_t>(to)[j] = placed[members[j].operand].offset;
    }
    llvm::Value *fromTable = c.globalConstant(from), *toTable = c.globalConstant(to);
    c.loop(static_cast<int64_t>(members.size()), [&](llvm::Value* j) {
      llvm::Value* src = c.b.CreateInBoundsGEP(c.b.getInt8Ty(), base, c.load(DType::i64, fromTable, j));
      llvm::Value* dst = c.load(DType::i64, toTable, j);
      c.loopNest(s, [&](const Index& idx) { put(position(dst, idx, s, stride), c.load(rt.dtype, src, c.linear(idx, s))); });
    });
  }
}

/// `attrs` with `value` put at the front of each of the `rows` rows of the
/// integer-list attribute `name` (a rule's per-axis list, one row per
/// operand, given the batch axis).
ir::Attrs prependPerRow(const ir::Attrs& attrs, std::string_view name, std::size_t rows, int64_t value) {
  const std::vector<int64_t>& in = attrs.ints(name);
  ADJIT_ASSERT(rows > 0 && in.size() % rows == 0, "prependPerRow: the list does not split into rows");
  const std::size_t r = in.size() / rows;
  std::vector<int64_t> out;
  for (std::size_t k = 0; k < rows; ++k) {
    out.push_back(value);
    const auto row = in.begin() + static_cast<std::ptrdiff_t>(k * r);
    out.insert(out.end(), row, row + static_cast<std::ptrdiff_t>(r));
  }
  ir::Attrs a = attrs;
  a.set(std::string(name), out);
  return a;
}

/// The op once on the whole batch (its operands given the batch axis where
/// unbatched) with attributes `attrs`: its one result is batched.
void batchedWith(const batching::BatchCtx& c, const ir::Attrs& attrs) {
  std::vector<Tensor> xs;
  for (std::size_t i = 0; i < c.arity(); ++i) xs.push_back(c.bx(i));
  c.result(0, c.reapply(xs, attrs).at(0));
}

} // namespace

void defineShapeOps(Table& t) {
  // reshape {shape}: same elements in row-major order
  set(t, OpKind::Reshape, {
      .infer = [](const InferCtx& c) {
        const Shape& s = c.ints("shape");
        for (int64_t d : s)
          if (d < 0) c.fail("negative dimension in shape {}", shape_str(s));
        if (num_elements(s) != c.operands[0].size())
          c.fail("cannot reshape {} ({} elements) to {} ({} elements)", c.operands[0].str(),
                 c.operands[0].size(), shape_str(s), num_elements(s));
        return std::vector<Type>{Type{c.operands[0].dtype, s}};
      },
      .eval = [](const EvalCtx& c) { return std::vector<Array>{c.args[0].reshaped(c.resultType().shape)}; },
      // reshape(x) = x at x's own shape; else the same elements in the same order
      .fold = [](const ir::FoldCtx& c) {
        if (auto same = foldIfSameType(c)) return same;
        return keepOrder(c);
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        if (std::optional<Index> at = reshapedIndex(c)) return c.operand(0, *at);
        return c.operand(0, Index::ofLinear(c.linear(c.index, c.resultType().shape)));
      },
      // the same elements in the same order: a view from element 0
      .view = [](const Type&, const Type&, const ir::Attrs&) -> std::optional<int64_t> { return 0; },
      // row-major: with the same extent on axis 0, row r holds the same elements
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; },
      // d reshape = reshape back
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) { c.grad(0, [&] { return reshape(c.dy(), c.x(0).shape()); }); },
      // the batch axis leads the shape: [B] + shape (row-major, example b stays whole)
      .batch = [](const batching::BatchCtx& c) { batchedWith(c, batching::prependDim(c.op.attrs, "shape", c.size)); },
      .deps = sparsity::movementDeps,
  });

  // broadcast_to {shape}: numpy broadcasting, dimensions aligned on the right
  set(t, OpKind::BroadcastTo, {
      .infer = [](const InferCtx& c) {
        const Shape& in = c.operands[0].shape;
        const Shape& out = c.ints("shape");
        bool ok = in.size() <= out.size();
        for (std::size_t i = 0; ok && i < in.size(); ++i) {
          int64_t o = out[out.size() - in.size() + i];
          ok = in[i] == o || in[i] == 1;
        }
        if (!ok) c.fail("cannot broadcast {} to shape {}", c.operands[0].str(), shape_str(out));
        return std::vector<Type>{Type{c.operands[0].dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const Shape& in = c.args[0].shape();
        const Type& rt = c.resultType();
        const std::size_t off = rt.shape.size() - in.size();
        return std::vector<Array>{gatherBy(c.args[0], rt, [&](const std::vector<int64_t>& o) {
          std::vector<int64_t> i(in.size());
          for (std::size_t d = 0; d < in.size(); ++d) i[d] = in[d] == 1 ? 0 : o[d + off];
          return ravel(i, in);
        })};
      },
      // broadcast_to(x) = x at x's own shape; a broadcast along new leading
      // axes only (x's axes of 1 in front aside) repeats x's elements whole
      .fold = [](const ir::FoldCtx& c) {
        if (auto same = foldIfSameType(c)) return same;
        const Shape &in = c.type(c.op.operands[0]).shape, &out = c.type(c.op.results[0]).shape;
        auto core = std::find_if(in.begin(), in.end(), [](int64_t d) { return d != 1; });
        const auto n = static_cast<std::size_t>(in.end() - core);
        if (!std::equal(core, in.end(), out.end() - static_cast<std::ptrdiff_t>(n))) return std::optional<ir::Folded>{};
        return keepOrder(c);
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Shape& in = c.operandType(0).shape;
        const auto& o = c.dims(c.index, c.resultType().shape);
        const std::size_t off = o.size() - in.size();
        std::vector<llvm::Value*> i(in.size());
        for (std::size_t d = 0; d < in.size(); ++d) i[d] = in[d] == 1 ? c.i64(0) : o[d + off];
        return c.operand(0, Index::ofDims(std::move(i)));
      },
      // axis 0 is the operand's axis 0 only when no axis is added in front
      .keepsRows = [](const Type& in, std::size_t, const Type& out, const ir::Attrs&) { return in.rank() == out.rank(); },
      // the operand's last axis, when not broadcast, is the result's
      .lastAxisShift = [](const Type& in, std::size_t, const Type& out, const ir::Attrs&) -> std::optional<AxisShift> {
        if (in.shape.empty() || in.shape.back() != out.shape.back()) return std::nullopt;
        return AxisShift{.shift = 0, .first = 0, .end = out.shape.back()};
      },
      // the VJP of a broadcast is a sum over the broadcast dimensions
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          Shape in = c.x(0).shape(), out = c.y().shape();
          const std::size_t lead = out.size() - in.size();
          std::vector<int64_t> axes;
          for (std::size_t d = 0; d < out.size(); ++d)
            if (d < lead || (in[d - lead] == 1 && out[d] != 1)) axes.push_back(static_cast<int64_t>(d));
          if (axes.empty()) return reshape(c.dy(), in);
          return reshape(sum(c.dy(), axes, true), in);
        });
      },
      // [B, in...] to [B, out...]: axes of extent 1 go between the batch axis
      // and the operand's so that broadcasting (aligned on the right) keeps
      // the batch axis first
      .batch = [](const batching::BatchCtx& c) {
        const Shape& in = c.type(0).shape;
        const Shape& out = c.resultType().shape;
        Tensor x = c.x(0);
        if (in.size() < out.size()) {
          Shape s(out.size() + 1, 1);
          s[0] = c.size;
          std::copy(in.begin(), in.end(), s.end() - static_cast<std::ptrdiff_t>(in.size()));
          x = reshape(x, s);
        }
        c.result(0, c.reapply({x}, batching::prependDim(c.op.attrs, "shape", c.size)).at(0));
      },
      .deps = sparsity::movementDeps,
  });

  // transpose {perm}: result dim i is operand dim perm[i]
  set(t, OpKind::Transpose, {
      .infer = [](const InferCtx& c) {
        const auto& perm = c.ints("perm");
        const Shape& in = c.operands[0].shape;
        std::vector<bool> seen(in.size());
        bool ok = perm.size() == in.size();
        for (std::size_t i = 0; ok && i < perm.size(); ++i) {
          ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(in.size()) && !seen[perm[i]];
          if (ok) seen[perm[i]] = true;
        }
        if (!ok) c.fail("perm {} is not a permutation of the {} axes of {}", shape_str(perm), in.size(), c.operands[0].str());
        Shape out(in.size());
        for (std::size_t i = 0; i < perm.size(); ++i) out[i] = in[perm[i]];
        return std::vector<Type>{Type{c.operands[0].dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const auto& perm = c.op.attrs.ints("perm");
        const Shape& in = c.args[0].shape();
        return std::vector<Array>{gatherBy(c.args[0], c.resultType(), [&](const std::vector<int64_t>& o) {
          std::vector<int64_t> i(in.size());
          for (std::size_t d = 0; d < perm.size(); ++d) i[perm[d]] = o[d];
          return ravel(i, in);
        })};
      },
      // transpose(x) {perm = identity} = x; identity matrices swapped are identity matrices
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        const auto& perm = c.op.attrs.ints("perm");
        const auto r = static_cast<int64_t>(perm.size());
        auto fixed = [&](int64_t upTo) {
          for (int64_t d = 0; d < upTo; ++d)
            if (perm[static_cast<std::size_t>(d)] != d) return false;
          return true;
        };
        if (fixed(r)) return ir::Folded{c.op.operands[0]};
        if (r >= 2 && fixed(r - 2) && perm[static_cast<std::size_t>(r - 2)] == r - 1 && c.identity(0))
          return ir::Folded{ir::Known{.splat = {}, .eye = c.identity(0)}};
        return std::nullopt;
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const auto& perm = c.op.attrs.ints("perm");
        const auto& o = c.dims(c.index, c.resultType().shape);
        std::vector<llvm::Value*> i(perm.size());
        for (std::size_t d = 0; d < perm.size(); ++d) i[perm[d]] = o[d];
        return c.operand(0, Index::ofDims(std::move(i)));
      },
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs& a) { return a.ints("perm").at(0) == 0; },
      .swapsLastAxes = [](const Type&, const Type&, const ir::Attrs& a) {
        const auto& perm = a.ints("perm");
        const std::size_t r = perm.size();
        if (r < 2 || perm[r - 2] != static_cast<int64_t>(r - 1) || perm[r - 1] != static_cast<int64_t>(r - 2)) return false;
        for (std::size_t d = 0; d + 2 < r; ++d)
          if (perm[d] != static_cast<int64_t>(d)) return false;
        return true;
      },
      // transpose back with the inverse permutation
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] {
          const auto& perm = c.op.attrs.ints("perm");
          std::vector<int64_t> inv(perm.size());
          for (std::size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
          return transpose(c.dy(), inv);
        });
      },
      // the batch axis stays first: perm' = [0, perm + 1]
      .batch = [](const batching::BatchCtx& c) {
        std::vector<int64_t> perm{0};
        for (int64_t p : c.op.attrs.ints("perm")) perm.push_back(p + 1);
        ir::Attrs a = c.op.attrs;
        a.set("perm", perm);
        batchedWith(c, a);
      },
      .deps = sparsity::movementDeps,
  });

  // slice {start, limit, stride}: elements start + k*stride < limit along each axis
  set(t, OpKind::Slice, {
      .infer = [](const InferCtx& c) {
        const Shape& in = c.operands[0].shape;
        const auto &st = c.ints("start"), &li = c.ints("limit"), &sd = c.ints("stride");
        if (st.size() != in.size() || li.size() != in.size() || sd.size() != in.size())
          c.fail("start, limit and stride must each have {} entries for {}", in.size(), c.operands[0].str());
        Shape out(in.size());
        for (std::size_t d = 0; d < in.size(); ++d) {
          if (sd[d] <= 0) c.fail("stride {} along axis {} must be positive", sd[d], d);
          if (st[d] < 0 || st[d] > li[d] || li[d] > in[d])
            c.fail("slice [{}:{}] along axis {} is out of bounds for {}", st[d], li[d], d, c.operands[0].str());
          out[d] = (li[d] - st[d] + sd[d] - 1) / sd[d];
        }
        return std::vector<Type>{Type{c.operands[0].dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        SliceSpec s = sliceSpec(c.op.attrs);
        const Shape& in = c.args[0].shape();
        return std::vector<Array>{gatherBy(c.args[0], c.resultType(), [&](const std::vector<int64_t>& o) {
          std::vector<int64_t> i(in.size());
          for (std::size_t d = 0; d < in.size(); ++d) i[d] = s.start[d] + o[d] * s.stride[d];
          return ravel(i, in);
        })};
      },
      .fold = foldIfSameType,
      .element = [](ElementCtx& c) -> llvm::Value* {
        SliceSpec s = sliceSpec(c.op.attrs);
        const auto& o = c.dims(c.index, c.resultType().shape);
        std::vector<llvm::Value*> i(o.size());
        for (std::size_t d = 0; d < o.size(); ++d) {
          i[d] = c.b.CreateAdd(c.i64(s.start[d]), c.b.CreateMul(o[d], c.i64(s.stride[d])));
          if (auto r = c.knownRange(o[d])) c.setRange(i[d], s.start[d] + r->first * s.stride[d], s.start[d] + r->second * s.stride[d]);
        }
        return c.operand(0, Index::ofDims(std::move(i)));
      },
      // Contiguous when, below some axis p, only one index is kept per axis and
      // above p every axis is whole (axis p itself: any range with stride 1):
      // then the result is the run starting at the first selected element.
      .view = [](const Type& in, const Type& out, const ir::Attrs& a) -> std::optional<int64_t> {
        SliceSpec s = sliceSpec(a);
        const std::size_t rank = in.shape.size();
        if (out.size() == 0) return std::nullopt;
        std::size_t p = rank; // the first axis, from the right, that is not whole
        while (p > 0 && out.shape[p - 1] == in.shape[p - 1]) --p;
        if (p > 0) {
          --p;
          if (out.shape[p] > 1 && s.stride[p] != 1) return std::nullopt;
          for (std::size_t d = 0; d < p; ++d)
            if (out.shape[d] != 1) return std::nullopt;
        }
        int64_t offset = 0;
        for (std::size_t d = 0; d < rank; ++d) offset = offset * in.shape[d] + s.start[d];
        return offset;
      },
      // with axis 0 as long as the operand's, it is whole: from row 0, every row
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; },
      // element j of the last axis reads start + j (stride 1)
      .lastAxisShift = [](const Type&, std::size_t, const Type& out, const ir::Attrs& a) -> std::optional<AxisShift> {
        SliceSpec s = sliceSpec(a);
        if (out.shape.empty() || s.stride.back() != 1) return std::nullopt;
        return AxisShift{.shift = s.start.back(), .first = 0, .end = out.shape.back()};
      },
      // zero-pad the cotangent back to the operand's shape
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        Shape in = c.x(0).shape(), out = c.y().shape();
        if (num_elements(out) == 0) return; // nothing was read: no cotangent
        c.grad(0, [&] {
          const auto &st = c.op.attrs.ints("start"), &sd = c.op.attrs.ints("stride");
          std::vector<int64_t> lo(in.size()), hi(in.size()), it(in.size());
          for (std::size_t d = 0; d < in.size(); ++d) {
            lo[d] = st[d];
            hi[d] = in[d] - 1 - (st[d] + (out[d] - 1) * sd[d]);
            it[d] = sd[d] - 1;
          }
          return pad(c.dy(), lo, hi, it);
        });
      },
      // the whole batch axis: start 0, limit B, stride 1
      .batch = [](const batching::BatchCtx& c) {
        ir::Attrs a = batching::prependDim(c.op.attrs, "start", 0);
        a = batching::prependDim(a, "limit", c.size);
        batchedWith(c, batching::prependDim(a, "stride", 1));
      },
      .deps = sparsity::movementDeps,
  });

  // pad {low, high, interior}: zeros around (low/high) and between (interior) elements
  set(t, OpKind::Pad, {
      .infer = [](const InferCtx& c) {
        const Type& in = c.operands[0];
        const auto &lo = c.ints("low"), &hi = c.ints("high"), &it = c.ints("interior");
        if (lo.size() != in.shape.size() || hi.size() != in.shape.size() || it.size() != in.shape.size())
          c.fail("low, high and interior must each have {} entries for {}", in.shape.size(), in.str());
        Shape out(in.shape.size());
        for (std::size_t d = 0; d < out.size(); ++d) {
          if (lo[d] < 0 || hi[d] < 0 || it[d] < 0) c.fail("padding along axis {} must not be negative", d);
          out[d] = lo[d] + hi[d] + in.shape[d] + (in.shape[d] > 0 ? (in.shape[d] - 1) * it[d] : 0);
        }
        return std::vector<Type>{Type{in.dtype, out}};
      },
      .eval = [](const EvalCtx& c) {
        const auto &lo = c.op.attrs.ints("low"), &it = c.op.attrs.ints("interior");
        const Array& x = c.args[0];
        Array r(c.resultType());
        const std::size_t w = size_of(x.dtype());
        for (int64_t i = 0; i < x.size(); ++i) {
          auto idx = unravel(i, x.shape());
          for (std::size_t d = 0; d < idx.size(); ++d) idx[d] = lo[d] + idx[d] * (it[d] + 1);
          std::memcpy(static_cast<char*>(r.raw()) + ravel(idx, r.shape()) * w, static_cast<const char*>(x.raw()) + i * w, w);
        }
        return std::vector<Array>{std::move(r)};
      },
      .fold = foldIfSameType,
      .element = [](ElementCtx& c) -> llvm::Value* {
        const auto &lo = c.op.attrs.ints("low"), &it = c.op.attrs.ints("interior");
        const Shape& in = c.operandType(0).shape;
        if (num_elements(in) == 0) return c.constant(c.resultType().dtype, 0); // all padding
        const Shape& out = c.resultType().shape;
        const auto& o = c.dims(c.index, out);
        llvm::Value* inside = c.b.getTrue();
        std::vector<llvm::Value*> i(o.size());
        for (std::size_t d = 0; d < o.size(); ++d) {
          // Where the loop's index range (a peeled loop's piece) puts every
          // point of this axis inside the operand, or every point outside
          // it: no select, no clamp, and consecutive reads.
          if (it[d] == 0) {
            const auto [first, last] = c.range(o[d], out[d]);
            if (last < lo[d] || first >= lo[d] + in[d]) return c.constant(c.resultType().dtype, 0);
            if (first >= lo[d] && last < lo[d] + in[d]) {
              i[d] = lo[d] == 0 ? o[d] : c.b.CreateNSWSub(o[d], c.i64(lo[d]));
              c.setRange(i[d], first - lo[d], last - lo[d]);
              continue;
            }
          }
          llvm::Value* t = c.b.CreateSub(o[d], c.i64(lo[d]));
          llvm::Value* q = c.b.CreateSDiv(t, c.i64(it[d] + 1));
          llvm::Value* onGrid = c.b.CreateICmpEQ(c.b.CreateSRem(t, c.i64(it[d] + 1)), c.i64(0));
          llvm::Value* inRange = c.b.CreateAnd(c.b.CreateICmpSGE(t, c.i64(0)), c.b.CreateICmpSLT(q, c.i64(in[d])));
          inside = c.b.CreateAnd(inside, c.b.CreateAnd(onGrid, inRange));
          // Clamp so the (discarded) load outside stays in bounds.
          i[d] = c.intrinsic(llvm::Intrinsic::smin, {{c.intrinsic(llvm::Intrinsic::smax, {{q, c.i64(0)}}), c.i64(in[d] - 1)}});
        }
        llvm::Value* v = c.operand(0, Index::ofDims(std::move(i)));
        return c.b.CreateSelect(inside, v, c.constant(c.resultType().dtype, 0));
      },
      // with axis 0 as long as the operand's, nothing is padded along it
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; },
      // without interior padding, element j of the last axis reads j - low
      // where that is inside the operand
      .lastAxisShift = [](const Type& in, std::size_t, const Type&, const ir::Attrs& a) -> std::optional<AxisShift> {
        const auto &lo = a.ints("low"), &it = a.ints("interior");
        if (in.shape.empty() || it.back() != 0) return std::nullopt;
        return AxisShift{.shift = -lo.back(), .first = lo.back(), .end = lo.back() + in.shape.back()};
      },
      // the kept elements' cotangent: a strided slice
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        c.grad(0, [&] { return unpad(c.dy(), c.x(0).shape(), c.op.attrs.ints("low"), c.op.attrs.ints("interior")); });
      },
      // nothing padded along the batch axis
      .batch = [](const batching::BatchCtx& c) {
        ir::Attrs a = batching::prependDim(c.op.attrs, "low", 0);
        a = batching::prependDim(a, "high", 0);
        batchedWith(c, batching::prependDim(a, "interior", 0));
      },
      .deps = sparsity::movementDeps,
  });

  // pad_sum {shape, low, interior}: the sum of the operands, each zero-padded
  // to `shape`. Element i of operand k lands at low[k] + i * (interior[k] + 1)
  // along each axis (row k of `low` and `interior`, rank entries each);
  // regions may overlap. The pad-sum pass makes it from sums of pads (the
  // gradient of many slices of one tensor): each operand is added into its
  // region in a loop of its own, where a sum of pads tests every pad at every
  // element.
  set(t, OpKind::PadSum, {
      .infer = [](const InferCtx& c) {
        const Shape& s = c.ints("shape");
        const auto &lo = c.ints("low"), &it = c.ints("interior");
        const std::size_t r = s.size(), k = c.operands.size();
        if (k == 0) c.fail("expected at least one operand");
        for (int64_t d : s)
          if (d < 0) c.fail("negative dimension in shape {}", shape_str(s));
        if (lo.size() != k * r || it.size() != k * r)
          c.fail("low and interior must each have {} entries ({} operands of rank {}), got {} and {}", k * r, k, r,
                 lo.size(), it.size());
        const DType dt = c.operands[0].dtype;
        for (std::size_t i = 0; i < k; ++i) {
          const Type& x = c.operands[i];
          if (x.dtype != dt || x.rank() != static_cast<int64_t>(r))
            c.fail("operand {} is {}; expected a {} tensor of rank {}", i, x.str(), name_of(dt), r);
          for (std::size_t d = 0; d < r; ++d) {
            const int64_t l = lo[i * r + d], step = it[i * r + d];
            if (l < 0 || step < 0)
              c.fail("operand {}: low and interior along axis {} must not be negative, got {} and {}", i, d, l, step);
            if (x.shape[d] == 0) continue;
            int64_t span = 0, last = 0;
            if (__builtin_mul_overflow(x.shape[d] - 1, step + 1, &span) || __builtin_add_overflow(l, span, &last) ||
                last >= s[d])
              c.fail("operand {} ({}) placed at {} with interior {} does not fit axis {} of {}", i, x.str(), l, step,
                     d, shape_str(s));
          }
        }
        return std::vector<Type>{Type{dt, s}};
      },
      .eval = [](const EvalCtx& c) {
        const auto &lo = c.op.attrs.ints("low"), &it = c.op.attrs.ints("interior");
        Array r(c.resultType());
        const std::size_t rank = r.shape().size();
        dispatch(r.dtype(), [&](auto tag) {
          using T = decltype(tag);
          T* out = elems<T>(r);
          for (std::size_t k = 0; k < c.args.size(); ++k) {
            const Array& x = c.args[k];
            const T* in = elems<T>(x);
            for (int64_t i = 0; i < x.size(); ++i) {
              auto idx = unravel(i, x.shape());
              for (std::size_t d = 0; d < rank; ++d) idx[d] = lo[k * rank + d] + idx[d] * (it[k * rank + d] + 1);
              T& o = out[ravel(idx, r.shape())];
              if constexpr (std::is_same_v<T, bool>) o = o || in[i];
              else o = wrap(o, in[i], std::plus<>{});
            }
          }
        });
        return std::vector<Array>{std::move(r)};
      },
      .fold = noFold,
      // zeros, then each operand added into its region
      .lower = [](LowerCtx& c) {
        const auto &lo = c.op.attrs.ints("low"), &it = c.op.attrs.ints("interior");
        const Type& rt = c.resultType();
        const std::size_t rank = rt.shape.size();
        const std::vector<int64_t> strides = stridesOf(rt.shape);
        if (!c.rowBegin) // (a block's rows are zeroed as they are placed)
          c.loopNest(rt.shape, [&](const Index& i) { c.store(rt.dtype, c.constant(rt.dtype, 0), c.results[0], c.linear(i, rt.shape)); });
        std::vector<Placed> placed(c.op.operands.size(), Placed{0, std::vector<int64_t>(rank)});
        for (std::size_t k = 0; k < placed.size(); ++k)
          for (std::size_t d = 0; d < rank; ++d) {
            placed[k].offset += lo[k * rank + d] * strides[d];
            placed[k].stride[d] = (it[k * rank + d] + 1) * strides[d];
          }
        placeOperands(c, placed, /*accumulate=*/true);
      },
      // an operand with axis 0 as long as the result's is placed from row 0, one row apart
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs&) { return true; },
      // each operand's cotangent: its region of the result's
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        for (std::size_t k = 0; k < c.op.operands.size(); ++k)
          c.grad(k, [&] { return unpad(c.dy(), c.x(k).shape(), c.op.attrs.ints("low"), c.op.attrs.ints("interior"), k); });
      },
      // every operand placed from row 0 of the batch axis, one row apart;
      // unbatched ones broadcast along it (each example adds them)
      .batch = [](const batching::BatchCtx& c) {
        ir::Attrs a = batching::prependDim(c.op.attrs, "shape", c.size);
        a = prependPerRow(a, "low", c.arity(), 0);
        batchedWith(c, prependPerRow(a, "interior", c.arity(), 0));
      },
      // each operand element a term of the sum at the element it is placed on: exact
      .deps = [](const sparsity::SparsityCtx& c) {
        const auto &lo = c.op.attrs.ints("low"), &it = c.op.attrs.ints("interior");
        const Shape& rs = c.resultType().shape;
        const std::size_t rank = rs.size();
        const std::vector<int64_t> strides = stridesOf(rs);
        for (std::size_t k = 0; k < c.arity(); ++k) {
          const Shape& xs = c.type(k).shape;
          std::vector<int64_t> idx(rank, 0);
          for (int64_t i = 0; i < num_elements(xs); ++i) {
            int64_t at = 0;
            for (std::size_t d = 0; d < rank; ++d) at += (lo[k * rank + d] + idx[d] * (it[k * rank + d] + 1)) * strides[d];
            c.term(0, at, {sparsity::Read{static_cast<uint32_t>(k), i}});
            for (std::size_t d = rank; d-- > 0;) { // next index of x
              if (++idx[d] < xs[d]) break;
              idx[d] = 0;
            }
          }
        }
      },
  });

  // concatenate {axis}: operands joined along `axis`
  set(t, OpKind::Concatenate, {
      .infer = [](const InferCtx& c) {
        if (c.operands.empty()) c.fail("expected at least one operand");
        const Type& first = c.operands[0];
        int64_t axis = c.axis("axis", first.rank());
        Type out = first;
        out.shape[axis] = 0;
        for (const Type& o : c.operands) {
          bool ok = o.dtype == first.dtype && o.rank() == first.rank();
          for (int64_t d = 0; ok && d < first.rank(); ++d) ok = d == axis || o.shape[d] == first.shape[d];
          if (!ok) c.fail("operands {} and {} do not match outside axis {}", first.str(), o.str(), axis);
          out.shape[axis] += o.shape[axis];
        }
        return std::vector<Type>{out};
      },
      .eval = [](const EvalCtx& c) {
        const int64_t axis = c.op.attrs.integer("axis");
        Array r(c.resultType());
        const std::size_t w = size_of(r.dtype());
        int64_t offset = 0;
        for (const Array& x : c.args) {
          for (int64_t i = 0; i < x.size(); ++i) {
            auto idx = unravel(i, x.shape());
            idx[axis] += offset;
            std::memcpy(static_cast<char*>(r.raw()) + ravel(idx, r.shape()) * w,
                        static_cast<const char*>(x.raw()) + i * w, w);
          }
          offset += x.shape()[axis];
        }
        return std::vector<Array>{std::move(r)};
      },
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        if (c.op.operands.size() == 1) return ir::Folded{c.op.operands[0]};
        return std::nullopt;
      },
      .lower = [](LowerCtx& c) {
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const std::vector<int64_t> strides = stridesOf(c.resultType().shape);
        std::vector<Placed> placed;
        int64_t offset = 0;
        for (std::size_t k = 0; k < c.op.operands.size(); ++k) {
          placed.push_back({offset * strides[axis], strides});
          offset += c.operandType(k).shape[axis];
        }
        placeOperands(c, placed, /*accumulate=*/false);
      },
      .keepsRows = [](const Type&, std::size_t, const Type&, const ir::Attrs& a) { return a.integer("axis") != 0; },
      // each operand gets its slice of the cotangent
      .jvp = autodiff::linearJvp,
      .vjp = [](const autodiff::VjpCtx& c) {
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        Shape out = c.y().shape();
        int64_t offset = 0;
        for (std::size_t k = 0; k < c.op.operands.size(); ++k) {
          Shape s = c.x(k).shape();
          c.grad(k, [&] {
            std::vector<int64_t> st(out.size(), 0), li = out;
            st[axis] = offset;
            li[axis] = offset + s[axis];
            return slice(c.dy(), st, li);
          });
          offset += s[axis];
        }
      },
      // joined along the shifted axis; unbatched operands broadcast along the batch
      .batch = [](const batching::BatchCtx& c) { batchedWith(c, batching::shiftAxes(c.op.attrs, "axis")); },
      .deps = sparsity::movementDeps,
  });
}

} // namespace adjit::ops
