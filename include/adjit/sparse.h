// adjit/sparse.h — sparse derivatives: the structural sparsity patterns of a
// function's Jacobian and Hessian, found from its IR without evaluating it.
#pragma once

#include <adjit/module.h>
#include <adjit/trace.h>

#include <cstdint>
#include <string>
#include <vector>

namespace adjit {

/// A sparsity pattern in compressed rows (CSR): row r's nonzeros are in
/// columns col_idx[row_ptr[r] .. row_ptr[r + 1]), sorted, distinct.
struct SparsityPattern {
  /// The matrix's shape.
  int64_t rows = 0, cols = 0;
  /// rows + 1 offsets into col_idx.
  std::vector<int64_t> row_ptr{0};
  /// Each nonzero's column, row by row.
  std::vector<int64_t> col_idx;

  /// How many nonzeros.
  int64_t nnz() const { return static_cast<int64_t>(col_idx.size()); }
  /// Whether (r, c) is a structural nonzero.
  bool contains(int64_t r, int64_t c) const;
  /// The pattern drawn row by row, `x` for a nonzero and `.` for a zero.
  std::string str() const;
  friend bool operator==(const SparsityPattern&, const SparsityPattern&) = default;
};

namespace detail {
/// The patterns of `m`'s function `fn`; with `wrt` (one flag per parameter,
/// that is per argument leaf), with respect to the flagged ones only.
SparsityPattern jacobianSparsity(const Module& m, const std::string& fn = "f", const std::vector<bool>& wrt = {});
SparsityPattern hessianSparsity(const Module& m, const std::string& fn = "f", const std::vector<bool>& wrt = {});
} // namespace detail

/// The structural pattern of the Jacobian of f's floating outputs (rows:
/// every element of every floating output leaf, in order) with respect to
/// its floating inputs (columns: every element of every floating argument
/// leaf, in order), for arguments shaped like `args` (Arrays, Types, or
/// structures of them). f is traced, not run; each op's dependency rule
/// says which input elements each output element can depend on. Exact
/// (no spurious nonzeros) for ops whose rule says so in its block; values
/// the trace cannot know (a gather's run-time indices) make it conservative.
template <class F, class... Args> SparsityPattern jacobian_sparsity(F&& f, const Args&... args) {
  return detail::jacobianSparsity(trace_named("f", std::forward<F>(f), args...));
}

/// The structural pattern of the Hessian of a scalar f (one floating output
/// of rank 0; an adjit::Error otherwise, at the output's line) with respect
/// to its floating inputs, symmetric: (i, j) is a nonzero when some op couples
/// inputs i and j nonlinearly on a path to the output (`x*y` couples x and
/// y, `x+y` does not, `exp(x)` couples x with itself).
template <class F, class... Args> SparsityPattern hessian_sparsity(F&& f, const Args&... args) {
  return detail::hessianSparsity(trace_named("f", std::forward<F>(f), args...));
}

} // namespace adjit
