// api/Map.cpp — adjit::map: checks a call's leading axes, compiles the
// per-instance function once per slice signature (JitCore's cache), and runs
// its kernel on every instance with offset pointers (engine::runMany).
#include "api/JitEntry.h"
#include "jit/Engine.h"
#include "trace/Tracer.h"

#include <adjit/map.h>

#include <fmt/format.h>

#include <algorithm>

#include <llvm/ADT/SmallVector.h>

namespace adjit::detail {

void checkMapOptions(const MapOptions& o, const Location& loc) {
  if (o.threads < 0) throw Error(fmt::format("map: threads must be 0 (the default) or positive, got {}", o.threads), loc);
  for (std::size_t i = 0; i < o.in_axes.size(); ++i)
    if (o.in_axes[i] && *o.in_axes[i] != 0)
      throw Error(fmt::format("map: in_axes[{}] is {}, but map maps along axis 0 only: give 0 (mapped) or std::nullopt "
                              "(passed whole to every instance); vmap batches along other axes",
                              i, *o.in_axes[i]),
                  loc);
}

namespace {

/// "argument 2" or, for a structure, "argument 2 (leaf 1)".
std::string whichLeaf(const std::vector<MapLeaf>& leaves, std::size_t k) {
  std::size_t first = k, count = 0;
  while (first > 0 && leaves[first - 1].arg == leaves[k].arg) --first;
  for (std::size_t j = first; j < leaves.size() && leaves[j].arg == leaves[k].arg; ++j) ++count;
  return count > 1 ? fmt::format("argument {} (leaf {})", leaves[k].arg, k - first) : fmt::format("argument {}", leaves[k].arg);
}

} // namespace

int64_t mapInstances(const std::vector<MapLeaf>& leaves, std::size_t arity, const MapOptions& o, const Location& loc,
                     std::vector<Type>& slices) {
  if (!o.in_axes.empty() && o.in_axes.size() != arity)
    throw Error(fmt::format("map: in_axes has {} entr{}, but the function is called with {} argument{}: give one per "
                            "argument (0: mapped, std::nullopt: passed whole)",
                            o.in_axes.size(), o.in_axes.size() == 1 ? "y" : "ies", arity, arity == 1 ? "" : "s"),
                loc);
  slices.clear();
  slices.reserve(leaves.size());
  int64_t n = -1;
  std::size_t first = 0; // the leaf that fixed n
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    const MapLeaf& l = leaves[k];
    if (!l.mapped) {
      slices.push_back(*l.type);
      continue;
    }
    if (l.scalar)
      throw Error(fmt::format("map: {} is a C++ scalar, which has no axis 0 to map over: pass it whole with in_axes "
                              "std::nullopt, or give an Array with a leading axis",
                              whichLeaf(leaves, k)),
                  loc);
    if (l.type->shape.empty())
      throw Error(fmt::format("map: {} is {}, which has no axis 0 to map over: give it a leading axis of one entry per "
                              "instance, or pass it whole with in_axes std::nullopt",
                              whichLeaf(leaves, k), l.type->str()),
                  loc);
    const int64_t len = l.type->shape[0];
    if (n < 0) {
      n = len;
      first = k;
    } else if (len != n) {
      throw Error(fmt::format("map: {} has {} instance{} along axis 0 ({}), but {} has {} ({}): every mapped argument "
                              "needs the same length",
                              whichLeaf(leaves, first), n, n == 1 ? "" : "s", leaves[first].type->str(), whichLeaf(leaves, k),
                              len, l.type->str()),
                  loc);
    }
    slices.push_back(Type{l.type->dtype, Shape(l.type->shape.begin() + 1, l.type->shape.end())});
  }
  if (n < 0)
    throw Error("map: no argument is mapped (every in_axes entry is std::nullopt, or the mapped arguments have no "
                "leaves), so the number of instances is unknown",
                loc);
  return n;
}

const std::shared_ptr<void>& runMapped(JitCore& core, uint64_t key, const std::vector<Leaf>& leaves,
                                       const std::vector<MapLeaf>& info, const std::vector<Type>& slices, int64_t n,
                                       const JitCore::Body& body, int threads, const Location& loc,
                                       std::vector<Array>& outs) {
  // The kernel is the per-instance function's: its signature is the slices'.
  llvm::SmallVector<Leaf, 8> instance(leaves.size());
  for (std::size_t i = 0; i < leaves.size(); ++i) instance[i] = {leaves[i].data, &slices[i]};
  const JitCore::Entry& e = core.compiled(key, instance, body);
  if (!e.variables.writes.empty())
    throw Error(fmt::format("map: the function assigns Variable '{}': its instances would write it in no order; "
                            "return the new values instead",
                            e.variables.writes.front()->name),
                loc);
  const engine::Kernel& k = *e.kernel;
  outs.clear();
  outs.reserve(k.outputs.size());
  llvm::SmallVector<void*, 8> outPtrs;
  llvm::SmallVector<int64_t, 8> outStrides;
  for (const Type& t : k.outputs) {
    Shape shape{n};
    shape.insert(shape.end(), t.shape.begin(), t.shape.end());
    outs.push_back(Array::uninitialized(Type{t.dtype, std::move(shape)}));
    outPtrs.push_back(outs.back().raw());
    outStrides.push_back(static_cast<int64_t>(t.bytes()));
  }
  if (n == 0) return e.skeleton; // nothing to run
  llvm::SmallVector<const void*, 8> args;
  llvm::SmallVector<int64_t, 8> strides;
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    args.push_back(leaves[i].data);
    strides.push_back(info[i].mapped ? static_cast<int64_t>(slices[i].bytes()) : 0);
  }
  // Variables the function reads: the same value for every instance, held
  // under their locks (taken in one global order) for the whole map.
  llvm::SmallVector<VariableState*, 4> locked;
  for (const auto& v : e.variables.reads) locked.push_back(v.get());
  std::sort(locked.begin(), locked.end());
  llvm::SmallVector<std::unique_lock<std::mutex>, 4> locks;
  for (VariableState* v : locked) locks.emplace_back(v->m);
  for (const auto& v : e.variables.reads) {
    args.push_back(v->value.raw());
    strides.push_back(0);
  }
  engine::runMany(k, args, strides, outPtrs, outStrides, n, threads);
  return e.skeleton;
}

} // namespace adjit::detail
