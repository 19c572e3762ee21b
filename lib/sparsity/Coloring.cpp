// sparsity/Coloring.cpp — greedy column, row and star colorings of sparsity
// patterns (see Coloring.h), each one pass over the vertices in largest-first
// order with a "forbidden colors" array stamped by the vertex being colored.
#include "sparsity/Coloring.h"
#include "support/Assert.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace adjit::sparsity {
namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

/// Vertices by decreasing degree, ties in natural order (stable): on banded
/// and block patterns this keeps runs of equal degree in order, which the
/// greedy colors optimally.
std::vector<int64_t> largestFirst(const std::vector<int64_t>& degree) {
  std::vector<int64_t> order(degree.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return degree[at(a)] > degree[at(b)]; });
  return order;
}

/// The smallest color not stamped with `v` in `forbidden`.
int32_t firstFree(const std::vector<int64_t>& forbidden, int64_t v) {
  int32_t c = 0;
  while (forbidden[static_cast<std::size_t>(c)] == v) ++c;
  return c;
}

} // namespace

Csr transposed(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx) {
  Csr t;
  t.rows = cols;
  t.cols = rows;
  t.ptr.assign(at(cols) + 1, 0);
  for (int64_t c : colIdx) ++t.ptr[at(c) + 1];
  for (int64_t c = 0; c < cols; ++c) t.ptr[at(c) + 1] += t.ptr[at(c)];
  t.idx.resize(colIdx.size());
  std::vector<int64_t> next(t.ptr.begin(), t.ptr.end() - 1);
  for (int64_t r = 0; r < rows; ++r) // rows in order: each transposed row comes out sorted
    for (int64_t k = rowPtr[at(r)]; k < rowPtr[at(r) + 1]; ++k) t.idx[at(next[at(colIdx[at(k)])]++)] = r;
  return t;
}

Coloring colorColumns(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx) {
  ADJIT_ASSERT(rowPtr.size() == at(rows) + 1, "colorColumns: row_ptr has the wrong length");
  const Csr byCol = transposed(rows, cols, rowPtr, colIdx);
  // Degree: an upper bound of the column's neighbours in the intersection graph.
  std::vector<int64_t> degree(at(cols), 0);
  for (int64_t j = 0; j < cols; ++j)
    for (int64_t k = byCol.ptr[at(j)]; k < byCol.ptr[at(j) + 1]; ++k) {
      const int64_t r = byCol.idx[at(k)];
      degree[at(j)] += rowPtr[at(r) + 1] - rowPtr[at(r)] - 1;
    }
  Coloring out;
  out.color.assign(at(cols), -1);
  std::vector<int64_t> forbidden(at(cols) + 1, -1);
  for (int64_t j : largestFirst(degree)) {
    // Columns sharing a row with j keep their colors from it.
    for (int64_t k = byCol.ptr[at(j)]; k < byCol.ptr[at(j) + 1]; ++k) {
      const int64_t r = byCol.idx[at(k)];
      for (int64_t q = rowPtr[at(r)]; q < rowPtr[at(r) + 1]; ++q) {
        const int32_t c = out.color[at(colIdx[at(q)])];
        if (c >= 0) forbidden[at(c)] = j;
      }
    }
    const int32_t c = firstFree(forbidden, j);
    out.color[at(j)] = c;
    out.count = std::max<int64_t>(out.count, c + 1);
  }
  return out;
}

Coloring colorRows(int64_t rows, int64_t cols, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx) {
  const Csr t = transposed(rows, cols, rowPtr, colIdx);
  return colorColumns(t.rows, t.cols, t.ptr, t.idx);
}

// Coloring v with c makes a two-colored path on four vertices in one of two
// ways, and the greedy forbids both (all other vertices of the path already
// colored; a path is checked when its last vertex is colored):
//  - v inside it, u - v - w - x: u and w neighbours of v of one color, x a
//    neighbour of w of color c. So when two neighbours of v share a color,
//    the colors of their other neighbours are forbidden.
//  - v at its end, v - w - x - y: x a neighbour of w of color c, and x has a
//    neighbour y other than w of w's color. So the color of x is forbidden
//    when x has at least two neighbours of w's color (w and y); a count per
//    (vertex, color), kept as vertices are colored, answers in O(1).
Coloring colorStar(int64_t n, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx) {
  ADJIT_ASSERT(rowPtr.size() == at(n) + 1, "colorStar: row_ptr has the wrong length");
  std::vector<int64_t> degree(at(n), 0);
  for (int64_t v = 0; v < n; ++v)
    for (int64_t k = rowPtr[at(v)]; k < rowPtr[at(v) + 1]; ++k) degree[at(v)] += colIdx[at(k)] != v;
  Coloring out;
  out.color.assign(at(n), -1);
  std::vector<int64_t> forbidden(at(n) + 1, -1);
  // How many neighbours of each color v has among its colored neighbours
  // (stamped per v), and per (vertex, color) over the whole graph.
  std::vector<int64_t> seenBy(at(n) + 1, -1);
  std::vector<int32_t> seen(at(n) + 1, 0);
  std::unordered_map<int64_t, int32_t> around;
  auto aroundOf = [&](int64_t x, int32_t c) {
    const auto it = around.find(x * (n + 1) + c);
    return it == around.end() ? 0 : it->second;
  };
  for (int64_t v : largestFirst(degree)) {
    const int64_t first = rowPtr[at(v)], last = rowPtr[at(v) + 1];
    for (int64_t k = first; k < last; ++k) {
      const int64_t w = colIdx[at(k)];
      const int32_t cw = out.color[at(w)];
      if (w == v || cw < 0) continue;
      forbidden[at(cw)] = v;
      if (seenBy[at(cw)] != v) seenBy[at(cw)] = v, seen[at(cw)] = 0;
      ++seen[at(cw)];
    }
    for (int64_t k = first; k < last; ++k) {
      const int64_t w = colIdx[at(k)];
      const int32_t cw = out.color[at(w)];
      if (w == v || cw < 0) continue;
      const bool shared = seen[at(cw)] >= 2;
      for (int64_t q = rowPtr[at(w)]; q < rowPtr[at(w) + 1]; ++q) {
        const int64_t x = colIdx[at(q)];
        const int32_t cx = out.color[at(x)];
        if (x == v || x == w || cx < 0) continue;
        if (shared || aroundOf(x, cw) >= 2) forbidden[at(cx)] = v;
      }
    }
    const int32_t c = firstFree(forbidden, v);
    out.color[at(v)] = c;
    out.count = std::max<int64_t>(out.count, c + 1);
    for (int64_t k = first; k < last; ++k)
      if (colIdx[at(k)] != v) ++around[colIdx[at(k)] * (n + 1) + c];
  }
  return out;
}

std::vector<int64_t> starSource(int64_t n, std::span<const int64_t> rowPtr, std::span<const int64_t> colIdx,
                                const Coloring& c) {
  std::vector<int64_t> source(colIdx.size());
  std::vector<int64_t> stamp(at(c.count) + 1, -1);
  std::vector<int32_t> count(at(c.count) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t first = rowPtr[at(i)], last = rowPtr[at(i) + 1];
    for (int64_t k = first; k < last; ++k) {
      const int32_t cj = c.color[at(colIdx[at(k)])];
      if (stamp[at(cj)] != i) stamp[at(cj)] = i, count[at(cj)] = 0;
      ++count[at(cj)];
    }
    const int64_t ci = c.color[at(i)];
    for (int64_t k = first; k < last; ++k) {
      const int64_t j = colIdx[at(k)];
      const int64_t cj = c.color[at(j)];
      // Alone in its color in row i: B[i, color(j)] is H[i, j]. Otherwise
      // the star condition makes i alone in its color in row j.
      source[at(k)] = count[at(cj)] == 1 ? cj * n + i : ci * n + j;
    }
  }
  return source;
}

} // namespace adjit::sparsity
