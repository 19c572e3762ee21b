// test/unit/test_coloring.cpp — column, row and star colorings of sparsity
// patterns: every coloring checked for validity by brute force, counts
// against the known optimum on banded, arrowhead and block-diagonal
// patterns, and star colorings' direct recovery of a symmetric matrix.
#include "sparsity/Coloring.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

using namespace adjit::sparsity;

namespace {

struct Pat {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> ptr{0}, idx;
};

Pat fromRows(int64_t rows, int64_t cols, const std::vector<std::set<int64_t>>& r) {
  Pat p{rows, cols, {0}, {}};
  for (const auto& s : r) {
    p.idx.insert(p.idx.end(), s.begin(), s.end());
    p.ptr.push_back(static_cast<int64_t>(p.idx.size()));
  }
  return p;
}

/// Row i has columns i .. i + w - 1 (clipped): w columns per row.
Pat banded(int64_t n, int64_t w) {
  std::vector<std::set<int64_t>> r(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i; j < std::min(n, i + w); ++j) r[static_cast<std::size_t>(i)].insert(j);
  return fromRows(n, n, r);
}
/// Symmetric band of half-width b.
Pat symBanded(int64_t n, int64_t b) {
  std::vector<std::set<int64_t>> r(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = std::max<int64_t>(0, i - b); j <= std::min(n - 1, i + b); ++j) r[static_cast<std::size_t>(i)].insert(j);
  return fromRows(n, n, r);
}
/// Diagonal plus a dense last row (and, symmetric, a dense last column).
Pat arrowhead(int64_t n, bool symmetric) {
  std::vector<std::set<int64_t>> r(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    r[static_cast<std::size_t>(i)].insert(i);
    r[static_cast<std::size_t>(n - 1)].insert(i);
    if (symmetric) r[static_cast<std::size_t>(i)].insert(n - 1);
  }
  return fromRows(n, n, r);
}
Pat blocks(int64_t count, int64_t k) {
  const int64_t n = count * k;
  std::vector<std::set<int64_t>> r(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i / k * k; j < i / k * k + k; ++j) r[static_cast<std::size_t>(i)].insert(j);
  return fromRows(n, n, r);
}
Pat random(std::mt19937& g, int64_t rows, int64_t cols, int64_t perRow, bool symmetric) {
  std::vector<std::set<int64_t>> r(static_cast<std::size_t>(rows));
  std::uniform_int_distribution<int64_t> col(0, cols - 1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < perRow; ++k) {
      const int64_t j = col(g);
      r[static_cast<std::size_t>(i)].insert(j);
      if (symmetric) r[static_cast<std::size_t>(j)].insert(i);
    }
  return fromRows(rows, cols, r);
}

/// No two columns of one color share a row; colors in range.
void checkColumns(const Pat& p, const Coloring& c) {
  REQUIRE(c.color.size() == static_cast<std::size_t>(p.cols));
  for (int32_t k : c.color) CHECK((k >= 0 && k < c.count));
  for (int64_t r = 0; r < p.rows; ++r) {
    std::set<int32_t> used;
    for (int64_t q = p.ptr[r]; q < p.ptr[r + 1]; ++q) CHECK(used.insert(c.color[p.idx[q]]).second);
  }
}
/// No two rows of one color share a column.
void checkRows(const Pat& p, const Coloring& c) {
  REQUIRE(c.color.size() == static_cast<std::size_t>(p.rows));
  std::map<int64_t, std::set<int32_t>> byCol;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t q = p.ptr[r]; q < p.ptr[r + 1]; ++q) CHECK(byCol[p.idx[q]].insert(c.color[r]).second);
}
/// Adjacent vertices differ, and every path a-b-c-d uses three colors or more.
void checkStar(const Pat& p, const Coloring& c) {
  REQUIRE(c.color.size() == static_cast<std::size_t>(p.rows));
  auto nb = [&](int64_t v) {
    std::vector<int64_t> out;
    for (int64_t q = p.ptr[v]; q < p.ptr[v + 1]; ++q)
      if (p.idx[q] != v) out.push_back(p.idx[q]);
    return out;
  };
  for (int64_t b = 0; b < p.rows; ++b)
    for (int64_t cc : nb(b)) {
      CHECK(c.color[b] != c.color[cc]);
      for (int64_t a : nb(b))
        for (int64_t d : nb(cc)) {
          if (a == cc || d == b || a == d) continue;
          const std::set<int32_t> k{c.color[a], c.color[b], c.color[cc], c.color[d]};
          CHECK(k.size() >= 3);
        }
    }
}

/// Star-colored recovery: B = H S computed from random symmetric values,
/// each nonzero read back at starSource.
void checkRecovery(const Pat& p, const Coloring& c) {
  const int64_t n = p.rows;
  std::map<std::pair<int64_t, int64_t>, double> h;
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u(1, 2);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = p.ptr[i]; q < p.ptr[i + 1]; ++q)
      if (p.idx[q] >= i) h[{i, p.idx[q]}] = h[{p.idx[q], i}] = u(g);
  std::vector<double> bt(static_cast<std::size_t>(c.count * n), 0.0); // [colors, n]
  for (const auto& [ij, v] : h) bt[static_cast<std::size_t>(c.color[ij.second] * n + ij.first)] += v;
  const std::vector<int64_t> src = starSource(n, p.ptr, p.idx, c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t q = p.ptr[i]; q < p.ptr[i + 1]; ++q) CHECK(bt[static_cast<std::size_t>(src[q])] == h[{i, p.idx[q]}]);
}

} // namespace

TEST_CASE("coloring: banded, arrowhead and block-diagonal reach the optimum") {
  for (int64_t w : {1, 2, 3, 5}) {
    const Pat p = banded(200, w);
    const Coloring cols = colorColumns(p.rows, p.cols, p.ptr, p.idx);
    const Coloring rows = colorRows(p.rows, p.cols, p.ptr, p.idx);
    checkColumns(p, cols);
    checkRows(p, rows);
    CHECK(cols.count == w); // w columns per row: at least w colors
    CHECK(rows.count == w);
  }
  for (int64_t k : {1, 3, 4}) {
    const Pat p = blocks(50, k);
    const Coloring cols = colorColumns(p.rows, p.cols, p.ptr, p.idx);
    checkColumns(p, cols);
    CHECK(cols.count == k);
    const Coloring star = colorStar(p.rows, p.ptr, p.idx);
    checkStar(p, star);
    checkRecovery(p, star);
    CHECK(star.count == k); // dense blocks are cliques
  }
  // A dense last row: every column meets every other there (n colors), but
  // the rows only pair with the last one (2 colors): reverse mode wins.
  const Pat a = arrowhead(100, false);
  const Coloring ac = colorColumns(a.rows, a.cols, a.ptr, a.idx), ar = colorRows(a.rows, a.cols, a.ptr, a.idx);
  checkColumns(a, ac);
  checkRows(a, ar);
  CHECK(ac.count == 100);
  CHECK(ar.count == 2);
}

TEST_CASE("coloring: star colorings of symmetric patterns") {
  // The arrowhead's graph is a star: two colors, where a distance-2
  // coloring needs n.
  const Pat a = arrowhead(100, true);
  const Coloring as = colorStar(a.rows, a.ptr, a.idx);
  checkStar(a, as);
  checkRecovery(a, as);
  CHECK(as.count == 2);
  // Paths need three colors (two would make a two-colored P4).
  for (int64_t b : {1, 2, 3}) {
    const Pat p = symBanded(120, b);
    const Coloring s = colorStar(p.rows, p.ptr, p.idx);
    checkStar(p, s);
    checkRecovery(p, s);
    CHECK(s.count >= b + 1);     // a clique of b + 1
    CHECK(s.count <= 2 * b + 1); // never worse than distance-2
    MESSAGE("star colors of a band of half-width ", b, ": ", s.count);
    if (b == 1) CHECK(s.count == 3);
  }
}

TEST_CASE("coloring: random patterns are colored validly") {
  std::mt19937 g(1234);
  for (int t = 0; t < 40; ++t) {
    const int64_t rows = 5 + t, cols = 3 + (t * 7) % 40, per = 1 + t % 4;
    const Pat p = random(g, rows, cols, per, false);
    checkColumns(p, colorColumns(p.rows, p.cols, p.ptr, p.idx));
    checkRows(p, colorRows(p.rows, p.cols, p.ptr, p.idx));
    const Pat s = random(g, cols, cols, per, true);
    const Coloring sc = colorStar(s.rows, s.ptr, s.idx);
    checkStar(s, sc);
    checkRecovery(s, sc);
  }
}

TEST_CASE("coloring: work grows linearly with banded size") {
  // Same colors at every size: the greedy only looks at distance 2.
  for (int64_t n : {1000, 100000}) {
    const Pat p = banded(n, 4);
    CHECK(colorColumns(p.rows, p.cols, p.ptr, p.idx).count == 4);
    const Pat s = symBanded(n, 2);
    const Coloring sc = colorStar(s.rows, s.ptr, s.idx);
    CHECK(sc.count <= 5);
  }
}
