// sparsity/Loops.cpp — the dependency rules of loops (scan, while,
// while_vjp): their bodies analysed step by step where the trip count is
// known, and to a fixed point of the body's pattern where it is not.
#include "sparsity/Rules.h"

#include "support/Assert.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace adjit::sparsity {

namespace {

bool floating(const Type& t) { return t.dtype == DType::f32 || t.dtype == DType::f64; }

/// Appends elements [first, first + n) of d, with their pairs if r keeps them.
void appendRows(Deps& r, const Deps& d, int64_t first, int64_t n) {
  const bool pairs = !r.hptr.empty();
  for (int64_t e = first; e < first + n; ++e) {
    const auto s = d.of(e);
    r.idx.insert(r.idx.end(), s.begin(), s.end());
    r.ptr.push_back(static_cast<int64_t>(r.idx.size()));
    if (!pairs) continue;
    const auto q = d.pairsOf(e);
    r.hidx.insert(r.hidx.end(), q.begin(), q.end());
    r.hptr.push_back(static_cast<int64_t>(r.hidx.size()));
  }
}

/// Elements [first, first + n) of d, with their pairs.
Deps rowsOf(const Deps& d, int64_t first, int64_t n) {
  Deps r;
  r.ptr.assign(1, 0);
  if (!d.hptr.empty()) r.hptr.assign(1, 0);
  appendRows(r, d, first, n);
  return r;
}

/// parts one after another: a stacked result from its steps.
Deps stacked(const std::vector<Deps>& parts) {
  Deps r;
  r.ptr.assign(1, 0);
  for (const Deps& p : parts)
    if (!p.hptr.empty()) r.hptr.assign(1, 0);
  for (const Deps& p : parts) appendRows(r, p, 0, p.elements());
  return r;
}

/// Slice t of a along its leading axis.
Array sliceOf(const Array& a, int64_t t) {
  Array s = Array::uninitialized(Type{a.dtype(), Shape(a.shape().begin() + 1, a.shape().end())});
  std::memcpy(s.raw(), static_cast<const char*>(a.raw()) + static_cast<std::size_t>(t) * s.bytes(), s.bytes());
  return s;
}

bool sameKnown(const std::optional<Array>& a, const std::optional<Array>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->type() == b->type() && std::memcmp(a->raw(), b->raw(), a->bytes()) == 0);
}

/// The value of a known one-element condition (i1), or nothing.
std::optional<bool> truth(const std::optional<Array>& a) {
  if (!a) return std::nullopt;
  return a->get<int64_t>(0) != 0;
}

/// A loop's state: consts (fixed) and carries, their dependencies and known
/// values, as a body's arguments.
struct State {
  std::vector<Deps> deps;
  std::vector<std::optional<Array>> known;

  std::vector<const Deps*> depArgs() const {
    std::vector<const Deps*> a;
    for (const Deps& d : deps) a.push_back(&d);
    return a;
  }
  std::vector<const Array*> knownArgs() const {
    std::vector<const Array*> a;
    for (const auto& k : known) a.push_back(k ? &*k : nullptr);
    return a;
  }
};

/// The operands' state.
State operandState(const SparsityCtx& c, std::size_t first, std::size_t count) {
  State s;
  for (std::size_t i = first; i < first + count; ++i) {
    s.deps.push_back(c.deps(i));
    const Array* k = c.known(i);
    s.known.push_back(k ? std::optional<Array>(*k) : std::nullopt);
  }
  return s;
}

int64_t elementsOf(const std::vector<Deps>& ds, std::size_t first) {
  int64_t n = 0;
  for (std::size_t i = first; i < ds.size(); ++i) n += ds[i].elements();
  return n;
}

/// Steps of a loop whose trip count the analysis knows are walked one by
/// one up to this many; past it, the walk goes on as for an unknown count.
constexpr int64_t kKnownSteps = 1 << 20;

/// The result of a while-shaped forward loop's analysis (while, while_vjp's
/// first half): the carries after the loop, and each step's extra outputs
/// (residuals) when the trip count was known throughout, else their union.
struct WhileWalk {
  State state;                                  // consts then carries
  bool exact = true;                            // the trip count was known throughout
  std::vector<std::vector<Deps>> stepExtras;    // exact: per step, the body's outputs after the carries
  std::vector<std::vector<std::optional<Array>>> stepExtraKnown;
  std::vector<Deps> extrasUnion;                // not exact: every step's, united
};

/// Walks `while cond: carries = body(consts, carries)[0..nc)`: step by step
/// while cond's value is known, then to a fixed point of the union over trip
/// counts. `keepExtras`: record the body's outputs past the carries.
WhileWalk walkWhile(const SparsityCtx& c, const std::string& cond, const std::string& body, std::size_t k,
                    std::size_t nc, int64_t limit, bool keepExtras) {
  WhileWalk w;
  w.state = operandState(c, 0, k + nc);
  std::vector<std::optional<Array>> condKnown, outKnown;
  for (int64_t step = 0;; ++step) {
    c.call(cond, w.state.depArgs(), w.state.knownArgs(), &condKnown);
    const std::optional<bool> running = truth(condKnown.at(0));
    if (running && !*running) return w; // the loop ends here
    if (!running || step == kKnownSteps) {
      w.exact = false;
      break;
    }
    if (limit >= 0 && step == limit) return w; // one step too many: the loop raises its error at run time
    std::vector<Deps> outs = c.call(body, w.state.depArgs(), w.state.knownArgs(), &outKnown);
    for (std::size_t i = 0; i < nc; ++i) {
      w.state.deps[k + i] = std::move(outs[i]);
      w.state.known[k + i] = std::move(outKnown[i]);
    }
    if (keepExtras) {
      w.stepExtras.emplace_back(std::make_move_iterator(outs.begin() + static_cast<std::ptrdiff_t>(nc)),
                                std::make_move_iterator(outs.end()));
      w.stepExtraKnown.emplace_back(outKnown.begin() + static_cast<std::ptrdiff_t>(nc), outKnown.end());
    }
  }
  // The count is unknown from here: the loop may stop after any number of
  // further steps, so each carry's sets are the union over them. The
  // carries' values are no longer known (they differ from step to step).
  for (std::size_t i = 0; i < nc; ++i) w.state.known[k + i].reset();
  for (const auto& extras : w.stepExtras) {
    if (w.extrasUnion.empty()) w.extrasUnion = extras;
    else
      for (std::size_t j = 0; j < extras.size(); ++j) w.extrasUnion[j] = unite(w.extrasUnion[j], extras[j]);
  }
  w.stepExtras.clear();
  w.stepExtraKnown.clear();
  // Within E + 1 steps every input reaches each carry element it ever will
  // (a longer path through E carry elements repeats one), and within E + 1
  // more every pair: so at most 2E + 2 growing steps.
  const int64_t bound = 2 * elementsOf(w.state.deps, k) + 2;
  for (int64_t round = 0;; ++round) {
    ADJIT_ASSERT(round <= bound + 1, fmt::format("sparsity: while @{} not at a fixed point after {} steps", body, round));
    std::vector<Deps> outs = c.call(body, w.state.depArgs(), w.state.knownArgs());
    bool grew = false;
    for (std::size_t i = 0; i < nc; ++i) {
      Deps u = unite(w.state.deps[k + i], outs[i]);
      if (!samePattern(u, w.state.deps[k + i])) grew = true;
      w.state.deps[k + i] = std::move(u);
    }
    if (keepExtras)
      for (std::size_t j = nc; j < outs.size(); ++j) {
        if (w.extrasUnion.size() <= j - nc) w.extrasUnion.push_back(std::move(outs[j]));
        else w.extrasUnion[j - nc] = unite(w.extrasUnion[j - nc], outs[j]);
      }
    if (!grew) return w;
  }
}

} // namespace

void scanDeps(const SparsityCtx& c) {
  const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
  const auto nc = static_cast<std::size_t>(c.op.attrs.integer("carries"));
  const int64_t n = c.op.attrs.integer("length");
  const bool reverse = c.op.attrs.has("reverse") && c.op.attrs.boolean("reverse");
  const std::size_t nx = c.arity() - k - nc, ny = c.op.results.size() - nc;
  const std::string& body = c.op.callees.at(0);
  State s = operandState(c, 0, k + nc);
  std::vector<std::vector<Deps>> ys(ny, std::vector<Deps>(static_cast<std::size_t>(n)));
  std::vector<std::optional<Array>> outKnown;
  for (int64_t step = 0; step < n; ++step) {
    const int64_t t = reverse ? n - 1 - step : step;
    // The body's arguments: consts, carries, then slice t of each scanned operand.
    std::vector<Deps> xs;
    std::vector<std::optional<Array>> xKnown;
    for (std::size_t j = 0; j < nx; ++j) {
      const int64_t m = c.type(k + nc + j).size() / std::max<int64_t>(n, 1);
      xs.push_back(rowsOf(c.deps(k + nc + j), t * m, m));
      const Array* a = c.known(k + nc + j);
      xKnown.push_back(a ? std::optional<Array>(sliceOf(*a, t)) : std::nullopt);
    }
    std::vector<const Deps*> args = s.depArgs();
    std::vector<const Array*> known = s.knownArgs();
    for (std::size_t j = 0; j < nx; ++j) {
      args.push_back(&xs[j]);
      known.push_back(xKnown[j] ? &*xKnown[j] : nullptr);
    }
    std::vector<Deps> outs = c.call(body, args, known, &outKnown);
    bool same = nx == 0;
    for (std::size_t i = 0; i < nc; ++i) {
      same = same && samePattern(outs[i], s.deps[k + i]) && sameKnown(outKnown[i], s.known[k + i]);
      s.deps[k + i] = std::move(outs[i]);
      s.known[k + i] = std::move(outKnown[i]);
    }
    for (std::size_t j = 0; j < ny; ++j) ys[j][static_cast<std::size_t>(t)] = std::move(outs[nc + j]);
    if (!same) continue;
    // A fixed point: every later step is this one again.
    for (int64_t later = step + 1; later < n; ++later) {
      const auto u = static_cast<std::size_t>(reverse ? n - 1 - later : later);
      for (std::size_t j = 0; j < ny; ++j) ys[j][u] = ys[j][static_cast<std::size_t>(t)];
    }
    break;
  }
  for (std::size_t i = 0; i < nc; ++i) {
    c.set(i, std::move(s.deps[k + i]));
    c.setKnown(i, std::move(s.known[k + i]));
  }
  for (std::size_t j = 0; j < ny; ++j) {
    // A step's outputs have one element per slice; a scan of length 0 stacks nothing.
    Deps d = n ? stacked(ys[j]) : Deps::none(0);
    c.set(nc + j, std::move(d));
  }
}

void whileDeps(const SparsityCtx& c) {
  const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
  const int64_t limit = c.op.attrs.has("max_iterations") ? c.op.attrs.integer("max_iterations") : -1;
  WhileWalk w = walkWhile(c, c.op.callees.at(0), c.op.callees.at(1), k, c.arity() - k, limit, false);
  for (std::size_t i = 0; i < c.op.results.size(); ++i) {
    c.set(i, std::move(w.state.deps[k + i]));
    c.setKnown(i, std::move(w.state.known[k + i])); // none once the trip count is unknown
  }
}

void whileVjpDeps(const SparsityCtx& c) {
  const auto k = static_cast<std::size_t>(c.op.attrs.integer("consts"));
  const auto nc = static_cast<std::size_t>(c.op.attrs.integer("carries"));
  std::vector<std::size_t> fc, fk; // the floating carries and consts
  for (std::size_t i = 0; i < nc; ++i)
    if (floating(c.type(k + i))) fc.push_back(i);
  for (std::size_t i = 0; i < k; ++i)
    if (floating(c.type(i))) fk.push_back(i);
  const std::string &cond = c.op.callees.at(0), &fwd = c.op.callees.at(1), &bwd = c.op.callees.at(2);
  WhileWalk w = walkWhile(c, cond, fwd, k, nc, -1, true);
  // The backward loop's state: consts, then a cotangent per floating carry
  // (from the operands) and per floating const (zeros: depending on nothing).
  State b;
  for (std::size_t i = 0; i < k; ++i) b.deps.push_back(w.state.deps[i]), b.known.push_back(w.state.known[i]);
  for (std::size_t j = 0; j < fc.size(); ++j) b.deps.push_back(c.deps(k + nc + j)), b.known.emplace_back();
  for (std::size_t i : fk) b.deps.push_back(Deps::none(c.type(i).size())), b.known.emplace_back();
  const std::size_t grads = fc.size() + fk.size();
  auto withResiduals = [&](const std::vector<Deps>& r, const std::vector<std::optional<Array>>* rk) {
    std::pair<std::vector<const Deps*>, std::vector<const Array*>> a{b.depArgs(), b.knownArgs()};
    for (std::size_t j = 0; j < r.size(); ++j) {
      a.first.push_back(&r[j]);
      a.second.push_back(rk && (*rk)[j] ? &*(*rk)[j] : nullptr);
    }
    return a;
  };
  if (w.exact) {
    // The forward loop's steps, last first.
    for (std::size_t step = w.stepExtras.size(); step-- > 0;) {
      auto [args, known] = withResiduals(w.stepExtras[step], &w.stepExtraKnown[step]);
      std::vector<Deps> outs = c.call(bwd, args, known);
      for (std::size_t j = 0; j < grads; ++j) b.deps[k + j] = std::move(outs[j]);
    }
  } else {
    // Any number of steps, each on residuals from the union of every step's.
    const int64_t bound = 2 * elementsOf(b.deps, k) + 2;
    for (int64_t round = 0;; ++round) {
      ADJIT_ASSERT(round <= bound + 1, fmt::format("sparsity: while_vjp @{} not at a fixed point after {} steps", bwd, round));
      auto [args, known] = withResiduals(w.extrasUnion, nullptr);
      std::vector<Deps> outs = c.call(bwd, args, known);
      bool grew = false;
      for (std::size_t j = 0; j < grads; ++j) {
        Deps u = unite(b.deps[k + j], outs[j]);
        if (!samePattern(u, b.deps[k + j])) grew = true;
        b.deps[k + j] = std::move(u);
      }
      if (!grew) break;
    }
  }
  for (std::size_t j = 0; j < grads; ++j) c.set(j, std::move(b.deps[k + j]));
}

} // namespace adjit::sparsity
