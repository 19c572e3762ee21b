// api/Sparse.cpp — jacobian_sparsity and hessian_sparsity: the traced
// function's parameters numbered, the dependency analysis run over it
// (sparsity/Analyze.cpp), and its answer laid out in compressed rows.
#include "sparsity/Rules.h"
#include "support/Assert.h"

#include <adjit/error.h>
#include <adjit/sparse.h>

#include <fmt/format.h>

#include <algorithm>

namespace adjit {

bool SparsityPattern::contains(int64_t r, int64_t c) const {
  if (r < 0 || r >= rows) return false;
  const auto first = col_idx.begin() + row_ptr[static_cast<std::size_t>(r)];
  const auto last = col_idx.begin() + row_ptr[static_cast<std::size_t>(r) + 1];
  return std::binary_search(first, last, c);
}

std::string SparsityPattern::str() const {
  std::string s;
  for (int64_t r = 0; r < rows; ++r) {
    std::string line(static_cast<std::size_t>(cols), '.');
    for (int64_t k = row_ptr[static_cast<std::size_t>(r)]; k < row_ptr[static_cast<std::size_t>(r) + 1]; ++k)
      line[static_cast<std::size_t>(col_idx[static_cast<std::size_t>(k)])] = 'x';
    s += line;
    s += '\n';
  }
  return s;
}

namespace detail {
namespace {

bool floating(const Type& t) { return t.dtype == DType::f32 || t.dtype == DType::f64; }

struct Run {
  const ir::Function& fn;
  sparsity::Inputs inputs;
  std::vector<sparsity::Deps> outputs;
};

Run analyse(const Module& m, bool hessian, const std::string& name, const std::vector<bool>& wrt) {
  const ir::Function* fn = m.impl().lookup(name);
  ADJIT_ASSERT(fn, "sparsity: the module has no @" + name);
  ADJIT_ASSERT(wrt.empty() || wrt.size() == fn->params.size(), "sparsity: one wrt flag per parameter");
  sparsity::Inputs in = sparsity::numberParams(*fn, wrt);
  std::vector<const sparsity::Deps*> params;
  for (const sparsity::Deps& d : in.params) params.push_back(&d);
  sparsity::Analysis a(m.impl(), hessian);
  std::vector<sparsity::Deps> outs = a.run(*fn, params);
  return Run{*fn, std::move(in), std::move(outs)};
}

} // namespace

SparsityPattern jacobianSparsity(const Module& m, const std::string& fn, const std::vector<bool>& wrt) {
  Run run = analyse(m, false, fn, wrt);
  SparsityPattern p;
  p.cols = run.inputs.count;
  for (std::size_t k = 0; k < run.outputs.size(); ++k) {
    if (!floating(run.fn.type(run.fn.outputs[k]))) continue;
    const sparsity::Deps& d = run.outputs[k];
    for (int64_t e = 0; e < d.elements(); ++e) {
      const auto cols = d.of(e);
      p.col_idx.insert(p.col_idx.end(), cols.begin(), cols.end());
      p.row_ptr.push_back(static_cast<int64_t>(p.col_idx.size()));
    }
    p.rows += d.elements();
  }
  return p;
}

SparsityPattern hessianSparsity(const Module& m, const std::string& name, const std::vector<bool>& wrt) {
  Run run = analyse(m, true, name, wrt);
  const ir::Function& fn = run.fn;
  if (fn.outputs.size() != 1 || !floating(fn.type(fn.outputs[0])) || fn.type(fn.outputs[0]).size() != 1) {
    // Point at the line that made the (first) output, if an op made it.
    Location where = fn.loc;
    if (!fn.outputs.empty())
      for (const ir::Op& op : fn.ops)
        if (std::find(op.results.begin(), op.results.end(), fn.outputs[0]) != op.results.end()) where = op.loc;
    std::string got;
    for (const Type& t : fn.resultTypes()) got += (got.empty() ? "" : ", ") + t.str();
    throw Error(fmt::format("hessian_sparsity: the function must return one floating scalar, got ({})", got), where);
  }
  // The output's pairs (i ≤ j), mirrored into both triangles, in rows.
  const std::span<const sparsity::Pair> pairs = run.outputs[0].pairsOf(0);
  SparsityPattern p;
  p.rows = p.cols = run.inputs.count;
  std::vector<int64_t> count(static_cast<std::size_t>(p.rows) + 1, 0);
  for (const auto& [i, j] : pairs) {
    ++count[static_cast<std::size_t>(i) + 1];
    if (i != j) ++count[static_cast<std::size_t>(j) + 1];
  }
  for (int64_t r = 0; r < p.rows; ++r) count[static_cast<std::size_t>(r) + 1] += count[static_cast<std::size_t>(r)];
  p.row_ptr = count;
  p.col_idx.resize(static_cast<std::size_t>(count.back()));
  for (const auto& [i, j] : pairs) {
    p.col_idx[static_cast<std::size_t>(count[static_cast<std::size_t>(i)]++)] = j;
    if (i != j) p.col_idx[static_cast<std::size_t>(count[static_cast<std::size_t>(j)]++)] = i;
  }
  for (int64_t r = 0; r < p.rows; ++r)
    std::sort(p.col_idx.begin() + p.row_ptr[static_cast<std::size_t>(r)],
              p.col_idx.begin() + p.row_ptr[static_cast<std::size_t>(r) + 1]);
  return p;
}

} // namespace detail
} // namespace adjit
