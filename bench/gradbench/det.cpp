// bench/gradbench/det.cpp — GradBench's `det` eval: the determinant of an
// ell x ell matrix by expansion by minors (`primal`) and its gradient
// (`gradient`, reverse mode through the loop).
//
// The algorithm. Expansion by minors along the first row, recursively:
//   det(M) = sum_j (-1)^j M[0, c_j] det(M without row 0 and column c_j),
// where c_j is the j-th column still in M. Its recursion tree has a node per
// partial permutation (the columns chosen for the rows above), ell!/(ell-d)!
// nodes at depth d, and costs about e * ell! multiplications: O(ell!), nothing
// memoised (no two subtrees share work, as in the spec's recursion). It
// cannot be unrolled when tracing (ell = 11 has 40 million leaves), so it is
// split in two at depth p = ell - k (k = min(ell, 7)):
//  - the top p levels are a `scan` over the ell!/k! nodes at depth p, in
//    the recursion's order: each step carries the running sum and adds
//    sign * prod_{i<p} A[i, sigma(i)] * det(minor), the minor being the last
//    k rows and the k columns the prefix leaves;
//  - the bottom k levels are the same recursion evaluated level by level,
//    vectorised over the k!/(k-d)! nodes of each level d of the minor's tree
//    (leaves first): node values of level d are sum_j (-1)^j M[d, c_j] *
//    (value of child j), the children of a node being contiguous.
// Which entries of A each node reads depends only on ell, so the index
// tables (the reference's row/column lists) are made when tracing (in the
// first evaluation, with the compilation, not in `prepare`); every
// arithmetic operation on A runs in the compiled loop. The gradient is adjit's
// reverse mode of that scan. Each step's term is a recompute_grad region: the
// tape keeps only the step's inputs and the backward runs the step again
// (the whole tape at ell = 11 would be about 2 GB). This beats scan's
// every(k) checkpointing here: as fast, and it compiles in a third of the
// time (0.11 s against 0.35-0.44 s of LLVM at ell = 10, 11), having no block
// loop and left-over loop to compile.
#include "tool.h"

#include <algorithm>
#include <numeric>

using namespace adjit;

namespace {

/// The deepest levels of the recursion, evaluated vectorised (k! leaves). 6, 7
/// and 8 run equally fast (ell = 10); 7 keeps the vectors in L2.
constexpr int kVectorLevels = 7;

/// The index tables of the expansion for one ell.
struct Plan {
  int64_t ell = 0, p = 0, k = 0, prefixes = 1;
  /// Per prefix: flat indices into A of the prefix's entries [prefixes, p],
  /// of the minor (last k rows, remaining columns) [prefixes, k*k], and the sign.
  std::vector<int32_t> prefixIdx, minorIdx;
  std::vector<double> prefixSign;
  /// Per level d < k - 1 of the minor's tree: flat indices into the k x k
  /// minor of M[d, c_j] for each node and child j, [nodes(d), k - d].
  std::vector<std::vector<int32_t>> levelIdx;
  /// The leaves: M[k - 1, the one column left], [k!].
  std::vector<int32_t> leafIdx;
};

/// The remaining columns of each node at each depth of the tree over `cols`
/// columns, nodes in the recursion's order (children of node n at depth d are
/// nodes n*(cols-d) ... n*(cols-d)+cols-d-1 at depth d+1), down to `depth`.
/// Also the column chosen at each step of the path to each node at `depth`.
void enumerate(int64_t cols, int64_t depth, std::vector<std::vector<std::vector<int32_t>>>& remaining,
               std::vector<std::vector<int32_t>>& path, std::vector<int>& sign) {
  std::vector<int32_t> all(static_cast<size_t>(cols));
  std::iota(all.begin(), all.end(), 0);
  remaining = {{all}};
  path = {{}};
  sign = {1};
  for (int64_t d = 0; d < depth; ++d) {
    std::vector<std::vector<int32_t>> nextRemaining, nextPath;
    std::vector<int> nextSign;
    for (size_t n = 0; n < remaining[d].size(); ++n) {
      const auto& rem = remaining[d][n];
      for (size_t j = 0; j < rem.size(); ++j) {
        std::vector<int32_t> r = rem;
        r.erase(r.begin() + static_cast<ptrdiff_t>(j));
        nextRemaining.push_back(std::move(r));
        std::vector<int32_t> pth = path[n];
        pth.push_back(rem[j]);
        nextPath.push_back(std::move(pth));
        nextSign.push_back(j % 2 == 0 ? sign[n] : -sign[n]);
      }
    }
    remaining.push_back(std::move(nextRemaining));
    path = std::move(nextPath);
    sign = std::move(nextSign);
  }
}

Plan makePlan(int64_t ell) {
  Plan plan;
  plan.ell = ell;
  plan.k = std::min<int64_t>(ell, kVectorLevels);
  plan.p = ell - plan.k;
  // Top p levels over ell columns.
  std::vector<std::vector<std::vector<int32_t>>> remaining;
  std::vector<std::vector<int32_t>> path;
  std::vector<int> sign;
  enumerate(ell, plan.p, remaining, path, sign);
  plan.prefixes = static_cast<int64_t>(path.size());
  for (size_t t = 0; t < path.size(); ++t) {
    for (int64_t i = 0; i < plan.p; ++i) plan.prefixIdx.push_back(static_cast<int32_t>(i * ell + path[t][i]));
    const auto& rest = remaining[plan.p][t];
    for (int64_t r = 0; r < plan.k; ++r)
      for (int64_t c = 0; c < plan.k; ++c) plan.minorIdx.push_back(static_cast<int32_t>((plan.p + r) * ell + rest[c]));
    plan.prefixSign.push_back(sign[t]);
  }
  // Bottom k levels over the minor's k local columns.
  enumerate(plan.k, plan.k - 1, remaining, path, sign);
  const int64_t k = plan.k;
  for (int64_t d = 0; d + 1 < k; ++d) {
    std::vector<int32_t> idx;
    for (const auto& rem : remaining[d])
      for (int32_t c : rem) idx.push_back(static_cast<int32_t>(d * k + c));
    plan.levelIdx.push_back(std::move(idx));
  }
  for (const auto& rem : remaining[k - 1]) plan.leafIdx.push_back(static_cast<int32_t>((k - 1) * k + rem[0]));
  return plan;
}

Tensor indices(const std::vector<int32_t>& v, std::vector<int64_t> shape) { return constant(Array(v, std::move(shape))); }

/// det(M) of the k x k minor `m` (flat), by the bottom levels of the expansion.
Tensor minorDet(const Plan& plan, const Tensor& m) {
  const int64_t k = plan.k;
  Tensor v = take(m, indices(plan.leafIdx, {static_cast<int64_t>(plan.leafIdx.size())})); // level k - 1
  for (int64_t d = k - 2; d >= 0; --d) {
    const int64_t width = k - d, nodes = static_cast<int64_t>(plan.levelIdx[d].size()) / width;
    std::vector<double> alternating(static_cast<size_t>(width));
    for (int64_t j = 0; j < width; ++j) alternating[j] = j % 2 == 0 ? 1.0 : -1.0;
    Tensor entries = reshape(take(m, indices(plan.levelIdx[d], {nodes * width})), {nodes, width});
    v = sum(entries * constant(Array(alternating, {width})) * reshape(v, {nodes, width}), {1});
  }
  return reshape(v, {});
}

/// The determinant of the row-major ell x ell matrix `a` (flat).
Tensor determinant(const Plan& plan, const Tensor& a) {
  if (plan.p == 0) return minorDet(plan, take(a, indices(plan.minorIdx, {plan.k * plan.k})));
  const Tensor minors = indices(plan.minorIdx, {plan.prefixes, plan.k * plan.k});
  const Tensor prefix = indices(plan.prefixIdx, {plan.prefixes, plan.p});
  const Tensor signs = constant(Array(plan.prefixSign, {plan.prefixes}));
  auto step = [&](Tensor acc, std::tuple<Tensor, Tensor, Tensor> x) {
    const auto& [minor, pre, s] = x;
    // By value: recompute_grad traces this again for the backward, after
    // determinant() has returned.
    auto termOf = [plan](const Tensor& a, const Tensor& minor, const Tensor& pre, const Tensor& s) {
      return s * prod(take(a, pre)) * minorDet(plan, take(a, minor));
    };
    return std::pair{acc + recompute_grad(termOf)(a, minor, pre, s), std::tuple<>{}};
  };
  return scan(step, full({}, 0.0, DType::f64), std::tuple{minors, prefix, signs}).first;
}

int64_t edge(const gradbench::json& input) {
  const int64_t ell = input.at("ell").get<int64_t>();
  if (ell < 1 || static_cast<int64_t>(input.at("A").size()) != ell * ell)
    throw Error("det: A must have ell * ell = " + std::to_string(ell * ell) + " entries, got " + std::to_string(input.at("A").size()));
  return ell;
}

/// A (row-major) as the compiled function's argument.
Array matrix(const gradbench::json& input) { return gradbench::array(input.at("A"), {static_cast<int64_t>(input.at("A").size())}); }

} // namespace

int main(int argc, char** argv) {
  const std::map<std::string, gradbench::Prepare> functions = {
      {"primal",
       [](const gradbench::json& in) {
         auto det = [ell = edge(in)](Tensor a) { return determinant(makePlan(ell), a); };
         return gradbench::call(jit(det, gradbench::jitOptions("det.primal")), gradbench::numbersOf, matrix(in));
       }},
      {"gradient",
       [](const gradbench::json& in) {
         auto det = [ell = edge(in)](Tensor a) { return determinant(makePlan(ell), a); };
         return gradbench::call(jit(grad(det), gradbench::jitOptions("det.gradient")), gradbench::numbersOf, matrix(in));
       }},
  };
  return gradbench::main(argc, argv, functions);
}
