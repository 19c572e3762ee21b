// codegen/Gemm.h — a BLIS-style matrix product generated as LLVM IR: operands
// packed into cache-sized blocks, a register-blocked micro-kernel sized for the
// target's vector unit; unpacked kernels for products that stay in cache. The
// matmul op's lowering calls it; JIT kernels and AOT objects share it, and
// objects need no BLAS library.
#pragma once

#include "codegen/Emitter.h"

namespace adjit::codegen {

/// One matrix product C = op(A) op(B) of a batch: op(A) is M×K, op(B) is K×N,
/// C is M×N, all row-major; `transA` means A is stored K×M (op(A) = A^T), and
/// `transB` that B is stored N×K.
struct GemmShape {
  DType dtype;
  int64_t batch, m, n, k;
  bool transA = false, transB = false;
};

/// Whether a generated kernel (packed, direct or dot products) pays off for
/// this product (floating dtypes, and enough work per element read);
/// otherwise plain loops are better.
bool usePackedGemm(const GemmShape& s, const VectorUnit& unit);

/// Whether emitPackedGemm packs A and B for this product (the packed kernel;
/// not the direct or dot kernel, nor plain loops): a prologue computing an
/// operand then runs on the panels it packs.
bool packsOperands(const GemmShape& s, const VectorUnit& unit);

/// The grid of the tiles emitPackedGemm passes to an epilogue, {rows,
/// columns} (OpHooks::tileGrid): the micro-tile of the packed and direct
/// kernels, the dot kernel's square tile, or whole matrices from plain loops.
std::pair<int64_t, int64_t> gemmTileGrid(const GemmShape& s, const VectorUnit& unit);

/// The bytes of `LowerCtx::workspace` emitPackedGemm uses for this product
/// (its packing buffers; 0 for the kernels that pack nothing): a caller
/// keeping data of its own in the workspace across the call puts it past them.
uint64_t gemmWorkspaceBytes(const GemmShape& s, const VectorUnit& unit, bool parallel);

/// Where a product's tiles lie in the result its caller's epilogue sees
/// (LowerCtx::epilogue), when the product is part of that result: its
/// matrices from `matrix` on, its rows from `row0` on (a conv's image and
/// group); null: as the product numbers them.
struct TileOrigin {
  llvm::Value* matrix = nullptr;
  llvm::Value* row0 = nullptr;
};

/// Emits C = op(A) op(B) for every matrix of the batch at the insertion point:
/// a call, per matrix, of a function of the module generated once per dtype
/// and transposition (its packing buffers live in `c`'s workspace), or, for
/// small products, chunks of a function generated for the shape. With
/// `c.epilogue` set (kTileEpilogue), each micro-tile's final values go to a
/// local tile and the epilogue is called on it; C in memory then holds only
/// partial sums between blocks of k, if any; `origin` places the tiles.
void emitPackedGemm(const LowerCtx& c, const GemmShape& s, llvm::Value* A, llvm::Value* B, llvm::Value* C, TileOrigin origin = {});

} // namespace adjit::codegen
