// sparsity/Coloring.h — graph colorings that compress a sparse Jacobian or
// Hessian into a few dense products: columns for forward mode, rows for
// reverse mode, star colorings for symmetric Hessians (Gebremedhin, Manne and
// Pothen, "What color is your Jacobian?", SIAM Review 2005). Greedy, in
// largest-first order; each takes a pattern in compressed rows and returns a
// color per column, row or vertex, numbered from 0.
//
// Before: row_ptr/col_idx are a CSR pattern (columns sorted or not, distinct).
// After: column coloring — two columns of one color share no row; row
// coloring — two rows of one color share no column; star coloring — adjacent
// vertices differ, and every path on four vertices uses at least three colors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace adjit::sparsity {

/// A color per column, row or vertex (0 .. count - 1).
struct Coloring {
  int64_t count = 0;
  std::vector<int32_t> color;
};

/// The pattern transposed: columns as rows (CSR of the transpose), sorted.
struct Csr {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> ptr{0}, idx;
};
Csr transposed(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx);

/// Distance-2 coloring of the columns (of the column intersection graph): J
/// times the seed matrix of the colors recovers every nonzero. Work: the sum
/// over rows of (nonzeros in the row)^2, linear for bounded rows.
Coloring colorColumns(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx);

/// Coloring of the rows: the columns of the transpose.
Coloring colorRows(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx);

/// Star coloring of the adjacency graph of a symmetric n x n pattern (the
/// diagonal ignored): H times the seed matrix recovers every nonzero directly
/// (see starSource). Work: the sum over vertices of their distance-2
/// neighbourhoods, plus one hash look-up per distance-2 neighbour.
Coloring colorStar(int64_t n, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx);

/// For each nonzero (i, j) of a symmetric pattern (in CSR order) star-colored
/// by `c`: where its value is in B = H S (S the colors' seed matrix), as the
/// row-major index into B transposed ([colors, n]): color(j) * n + i when j
/// is the only column of row i with its color, else color(i) * n + j (the
/// star condition guarantees one of the two). Linear in the nonzeros.
std::vector<int64_t> starSource(int64_t n, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx,
                                const Coloring& c);

} // namespace adjit::sparsity
