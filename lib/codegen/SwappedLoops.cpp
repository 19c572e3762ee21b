// codegen/SwappedLoops.cpp — loops whose last two axes' loops are exchanged
// (Kernel::swapped): a transpose computed along its operand's rows and
// stored through tiles transposed in registers (FunctionEmitter::emitSwapped).
#include "codegen/Emitter.h"
#include "codegen/FunctionEmitter.h"
#include "codegen/FusionPlan.h"
#include "codegen/Lowering.h"
#include "support/Assert.h"

#include <llvm/IR/Intrinsics.h>

#include <algorithm>

namespace adjit::codegen {

/// A loop with its last two axes' loops exchanged (Kernel::swapped): the
/// root O[..., a, b] = T[..., b, a] is computed along T's rows (a inside),
/// G rows at a time (G: a vector's lanes of its dtype): each row into a local
/// buffer [G, A] (in segments of A when that passes kMaxTileBytes) with
/// consecutive reads, then the buffer to O in G x G blocks,
/// each transposed in registers (log2 G rounds of two-vector shuffles) and
/// stored as G vectors along b. The rows after the last whole G, and the a's
/// after the last whole block, are stored element by element. Measured on
/// the Hessian of Rosenbrock R^100 (bench/vmap_bench.cpp, batched against
/// the scan, interleaved): in O's order the loop gathers T's two buffer
/// reads, 0.68-0.78x at AVX-512; exchanged with its store scattered,
/// 0.98-1.10x; through the tile, 1.56-1.76x (x86-64-v2: 0.70-0.85x before,
/// 1.20-1.25x; x86-64-v3, whose four-lane gathers were cheap, 1.15-1.26x
/// before, 1.33-1.47x). Five runs each, load 4-7.
void FunctionEmitter::emitSwapped(const Kernel& k, LowerCtx& c, llvm::Value* out) {
  // The tile is a stack buffer, and threads' stacks may be small: wider
  // rows go through it in segments of this many bytes at most.
  constexpr int64_t kMaxTileBytes = 8192;
  const Shape& domain = k.domain;
  const std::size_t rank = domain.size();
  const int64_t A = domain[rank - 2], B = domain[rank - 1];
  const Shape lead(domain.begin(), domain.end() - 2);
  const ir::ValueId root = k.roots[0].value;
  const DType t = f_.type(root).dtype;
  llvm::Type* st = storageType(b_, t);
  const auto bytes = static_cast<int64_t>(size_of(t));
  const int64_t lanes = t == DType::i1 ? 1 : static_cast<int64_t>(unit_.bits) / (8 * bytes);
  const int64_t G = lanes >= 2 && B >= lanes && A >= lanes ? lanes : 1;
  const int64_t wholeB = G > 1 ? B / G * G : 0;
  // Columns per segment: a multiple of G (only the last segment has columns
  // after its last whole block), all of A when it fits.
  const int64_t S = G > 1 ? std::min(A, std::max(G, kMaxTileBytes / (G * bytes) / G * G)) : A;
  const int64_t segments = (A + S - 1) / S;
  llvm::Value* tile = G > 1 ? entryAlloca(st, static_cast<uint64_t>(G * S)) : nullptr;
  llvm::Type* vt = llvm::FixedVectorType::get(st, static_cast<unsigned>(std::max<int64_t>(G, 2)));
  std::vector<int64_t> cuts{0};
  cuts.insert(cuts.end(), k.peel.begin(), k.peel.end());
  cuts.push_back(A);
  c.loopNest(lead, [&](const Index& li) {
    const std::vector<llvm::Value*> ld = lead.empty() ? std::vector<llvm::Value*>{} : c.dims(li, lead);
    auto point = [&](llvm::Value* a, llvm::Value* col) {
      std::vector<llvm::Value*> d = ld;
      d.push_back(a);
      d.push_back(col);
      return Index::ofDims(std::move(d));
    };
    // Along a over [s0, s1) (all of A when s0 is null), in the pieces that
    // keep the pads' reads consecutive (Kernel::peel).
    auto alongA = [&](llvm::Value* s0, llvm::Value* s1, const std::function<void(llvm::Value*)>& fn) {
      for (std::size_t p = 0; p + 1 < cuts.size(); ++p) {
        const int64_t from = cuts[p], to = cuts[p + 1];
        llvm::Value* lo = s0 ? c.intrinsic(llvm::Intrinsic::smax, {{s0, c.i64(from)}}) : c.i64(from);
        llvm::Value* hi = s1 ? c.intrinsic(llvm::Intrinsic::smin, {{s1, c.i64(to)}}) : c.i64(to);
        c.loopRange(lo, hi, [&](llvm::Value* a) {
          setIndexRange(a, from, to - 1);
          fn(a);
        });
      }
    };
    auto storeAt = [&](llvm::Value* v, llvm::Value* a, llvm::Value* col) {
      llvm::Value* lin = c.linear(point(a, col), domain);
      tagAccess(b_.CreateStore(v, b_.CreateInBoundsGEP(st, out, rowIndex(out, lin))), out);
    };
    // Rows b0 .. b0 + G - 1 of T over columns [s0, s1) of segment s0: into
    // the tile, then out in G x G blocks and column by column after them.
    auto segment = [&](llvm::Value* b0, llvm::Value* s0, llvm::Value* s1, llvm::Value* width) {
      c.loop(G, [&](llvm::Value* row) {
        llvm::Value* col = b_.CreateNSWAdd(b0, row);
        llvm::Value* at = b_.CreateNSWSub(b_.CreateNSWMul(row, c.i64(S)), s0 ? s0 : c.i64(0));
        alongA(s0, s1, [&](llvm::Value* a) {
          b_.CreateStore(element(root, point(a, col)), b_.CreateInBoundsGEP(st, tile, b_.CreateNSWAdd(at, a)));
        });
      });
      llvm::Value* blocks = b_.CreateSDiv(width, c.i64(G));
      llvm::Value* base = s0 ? s0 : c.i64(0);
      c.loopRange(c.i64(0), blocks, [&](llvm::Value* ablk) {
        llvm::Value* j0 = b_.CreateNSWMul(ablk, c.i64(G)); // within the tile
        std::vector<llvm::Value*> rows(static_cast<std::size_t>(G));
        for (int64_t r = 0; r < G; ++r)
          rows[static_cast<std::size_t>(r)] = b_.CreateAlignedLoad(
              vt, b_.CreateInBoundsGEP(st, tile, b_.CreateNSWAdd(j0, c.i64(r * S))), llvm::Align(size_of(t)));
        // Round d pairs rows i and i + d (i without bit d): lanes with bit
        // d clear keep row i's, the others take row i + d's, d lanes down.
        for (int64_t d = 1; d < G; d *= 2) {
          std::vector<llvm::Value*> next = rows;
          std::vector<int> lo(static_cast<std::size_t>(G)), hi(static_cast<std::size_t>(G));
          for (int64_t l = 0; l < G; ++l) {
            lo[static_cast<std::size_t>(l)] = static_cast<int>((l & d) == 0 ? l : G + l - d);
            hi[static_cast<std::size_t>(l)] = static_cast<int>((l & d) == 0 ? l + d : G + l);
          }
          for (int64_t i = 0; i < G; ++i) {
            if (i & d) continue;
            llvm::Value* x = rows[static_cast<std::size_t>(i)];
            llvm::Value* y = rows[static_cast<std::size_t>(i + d)];
            next[static_cast<std::size_t>(i)] = b_.CreateShuffleVector(x, y, lo);
            next[static_cast<std::size_t>(i + d)] = b_.CreateShuffleVector(x, y, hi);
          }
          rows = std::move(next);
        }
        // rows[l] is now O's row base + j0 + l at columns b0 ..
        llvm::Value* a0 = b_.CreateNSWAdd(base, j0);
        for (int64_t l = 0; l < G; ++l) {
          llvm::Value* lin = c.linear(point(b_.CreateNSWAdd(a0, c.i64(l)), b0), domain);
          tagAccess(b_.CreateAlignedStore(rows[static_cast<std::size_t>(l)], b_.CreateInBoundsGEP(st, out, rowIndex(out, lin)),
                                          llvm::Align(size_of(t))),
                    out);
        }
      });
      c.loopRange(b_.CreateNSWMul(blocks, c.i64(G)), width, [&](llvm::Value* j) {
        for (int64_t r = 0; r < G; ++r) {
          llvm::Value* v = b_.CreateLoad(st, b_.CreateInBoundsGEP(st, tile, b_.CreateNSWAdd(j, c.i64(r * S))));
          storeAt(v, b_.CreateNSWAdd(base, j), b_.CreateNSWAdd(b0, c.i64(r)));
        }
      });
    };
    if (wholeB > 0)
      c.loop(wholeB / G, [&](llvm::Value* blk) {
        llvm::Value* b0 = b_.CreateNSWMul(blk, c.i64(G));
        if (segments == 1) return segment(b0, nullptr, nullptr, c.i64(A));
        c.loop(segments, [&](llvm::Value* sg) {
          llvm::Value* s0 = b_.CreateNSWMul(sg, c.i64(S));
          llvm::Value* s1 = c.intrinsic(llvm::Intrinsic::smin, {{b_.CreateNSWAdd(s0, c.i64(S)), c.i64(A)}});
          segment(b0, s0, s1, b_.CreateNSWSub(s1, s0));
        });
      });
    if (wholeB < B)
      c.loopRange(c.i64(wholeB), c.i64(B), [&](llvm::Value* col) {
        alongA(nullptr, nullptr, [&](llvm::Value* a) {
          llvm::Value* v = element(root, point(a, col));
          storeAt(t == DType::i1 ? b_.CreateZExt(v, st) : v, a, col);
        });
      });
  });
}

} // namespace adjit::codegen
