// sparsity/Analyze.cpp — the dependency analysis (Jacobian and Hessian
// patterns from the IR): the table of rules, the walk over a function's ops,
// and the rules shared by families of ops.
#include "sparsity/Rules.h"

#include "autodiff/Rules.h"
#include "ir/OpInfo.h"
#include "support/Assert.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <iterator>

namespace adjit::sparsity {

namespace {
std::array<Rules, ir::kNumOps>& table() {
  static std::array<Rules, ir::kNumOps> t{};
  return t;
}

/// Values up to this many elements are evaluated when all their operands are
/// known (index arithmetic on constants); larger ones are left unknown.
constexpr int64_t kKnownLimit = int64_t{1} << 20;
} // namespace

const Rules& rules(ir::OpKind k) { return table()[static_cast<std::size_t>(k)]; }
void define(ir::OpKind k, const Rules& r) { table()[static_cast<std::size_t>(k)] = r; }

Deps Deps::none(int64_t n) {
  Deps d;
  d.ptr.assign(static_cast<std::size_t>(n) + 1, 0);
  return d;
}

Deps Deps::identity(int64_t n, int64_t first) {
  Deps d;
  d.ptr.resize(static_cast<std::size_t>(n) + 1);
  d.idx.resize(static_cast<std::size_t>(n));
  for (int64_t e = 0; e <= n; ++e) d.ptr[static_cast<std::size_t>(e)] = e;
  for (int64_t e = 0; e < n; ++e) d.idx[static_cast<std::size_t>(e)] = first + e;
  return d;
}

/// The state of one function's walk.
struct Analysis::Frame {
  const ir::Function& fn;
  std::vector<std::optional<Deps>> deps;   // by ValueId
  std::vector<std::optional<Array>> known; // by ValueId
  // The op being analysed: per result, (element, input) pairs from its terms,
  // or the whole Deps a rule set.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> acc;
  std::vector<std::vector<std::pair<int64_t, Pair>>> hacc; // (element, pair), when Hessians are tracked
  std::vector<std::optional<Deps>> direct;
  const ir::Op* op = nullptr;
  uint32_t traits = 0; // the op's autodiff traits
};

namespace {

bool floating(const Type& t) { return t.dtype == DType::f32 || t.dtype == DType::f64; }

/// Which reads of one term interact in the second derivative, by the op's
/// linearity traits (see Rules.h).
bool interact(uint32_t traits, Couples couples, const Read& a, const Read& b, std::size_t arity) {
  if (couples == Couples::nothing) return false;
  if (couples == Couples::distinct) return a.operand != b.operand || a.element != b.element;
  if (traits & autodiff::kLinear) return false;
  if (traits & autodiff::kLinearInEach) return a.operand != b.operand;
  if (traits & autodiff::kLinearInFirst) return !(a.operand == 0 && b.operand == 0);
  if (traits & autodiff::kLinearInLast) return !(a.operand + 1 == arity && b.operand + 1 == arity);
  return true;
}

/// Rows of n elements from (element, item) entries in any order: a counting
/// sort by element, then each row sorted and made distinct. Fills ptr and idx.
template <class T>
void rows(int64_t n, std::vector<std::pair<int64_t, T>>& entries, std::vector<int64_t>& ptr, std::vector<T>& idx) {
  ptr.assign(static_cast<std::size_t>(n) + 1, 0);
  for (const auto& en : entries) ++ptr[static_cast<std::size_t>(en.first) + 1];
  for (int64_t e = 0; e < n; ++e) ptr[static_cast<std::size_t>(e) + 1] += ptr[static_cast<std::size_t>(e)];
  idx.resize(entries.size());
  std::vector<int64_t> fill(ptr.begin(), ptr.end() - 1);
  for (const auto& en : entries) idx[static_cast<std::size_t>(fill[static_cast<std::size_t>(en.first)]++)] = en.second;
  // Sort and dedupe each row in place, compacting as we go (row e's start is
  // rewritten only after its original end was read as row e + 1's begin).
  int64_t out = 0, begin = 0;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t end = ptr[static_cast<std::size_t>(e) + 1];
    auto first = idx.begin() + begin, last = idx.begin() + end;
    std::sort(first, last);
    last = std::unique(first, last);
    const int64_t kept = last - first;
    std::copy(first, last, idx.begin() + out);
    ptr[static_cast<std::size_t>(e)] = out;
    out += kept;
    begin = end;
  }
  ptr[static_cast<std::size_t>(n)] = out;
  idx.resize(static_cast<std::size_t>(out));
}

/// Every pair of an element of a with an element of b, each ordered.
void cross(std::span<const int64_t> a, std::span<const int64_t> b, const std::function<void(Pair)>& add) {
  for (int64_t x : a)
    for (int64_t y : b) add(Pair{std::min(x, y), std::max(x, y)});
}

/// The sorted union of some sets.
std::vector<int64_t> unite(std::vector<int64_t> all) {
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  return all;
}

} // namespace

const Deps& SparsityCtx::deps(std::size_t i) const {
  const auto& d = analysis.frame_->deps.at(static_cast<std::size_t>(op.operands.at(i)));
  ADJIT_ASSERT(d.has_value(), "sparsity: an operand used before it is defined");
  return *d;
}

const Array* SparsityCtx::known(std::size_t i) const {
  const auto& k = analysis.frame_->known.at(static_cast<std::size_t>(op.operands.at(i)));
  return k ? &*k : nullptr;
}

void SparsityCtx::term(std::size_t k, int64_t e, std::span<const Read> reads, Couples couples) const {
  Analysis::Frame& f = *analysis.frame_;
  ADJIT_ASSERT(k < f.acc.size() && e >= 0 && e < resultType(k).size(),
               fmt::format("sparsity rule of {}: term for result {} element {} out of range", ir::info(op.kind).name, k, e));
  auto& acc = f.acc[k];
  for (const Read& r : reads)
    for (int64_t x : deps(r.operand).of(r.element)) acc.emplace_back(e, x);
  if (!analysis.hessian()) return;
  auto& hacc = f.hacc[k];
  for (const Read& r : reads)
    for (const Pair& p : deps(r.operand).pairsOf(r.element)) hacc.emplace_back(e, p);
  for (std::size_t a = 0; a < reads.size(); ++a)
    for (std::size_t b = a; b < reads.size(); ++b)
      if (interact(f.traits, couples, reads[a], reads[b], arity()))
        cross(deps(reads[a].operand).of(reads[a].element), deps(reads[b].operand).of(reads[b].element),
              [&](Pair p) { hacc.emplace_back(e, p); });
}

void SparsityCtx::set(std::size_t k, Deps d) const {
  ADJIT_ASSERT(d.elements() == resultType(k).size(),
               fmt::format("sparsity rule of {}: result {} has {} elements, the rule gave {}", ir::info(op.kind).name, k,
                           resultType(k).size(), d.elements()));
  analysis.frame_->direct.at(k) = std::move(d);
}

void SparsityCtx::setKnown(std::size_t k, std::optional<Array> v) const {
  ADJIT_ASSERT(!v || v->type() == resultType(k), "sparsity: a known value of the wrong type");
  analysis.frame_->known.at(static_cast<std::size_t>(op.results.at(k))) = std::move(v);
}

std::vector<Deps> SparsityCtx::call(const std::string& callee, const std::vector<const Deps*>& args,
                                    const std::vector<const Array*>& known,
                                    std::vector<std::optional<Array>>* knownOuts) const {
  const ir::Function* g = analysis.module().lookup(callee);
  ADJIT_ASSERT(g, fmt::format("sparsity: op {} calls @{}, which the module lacks", ir::info(op.kind).name, callee));
  return analysis.run(*g, args, known, knownOuts);
}

std::vector<Deps> Analysis::run(const ir::Function& fn, const std::vector<const Deps*>& params,
                                const std::vector<const Array*>& knownParams,
                                std::vector<std::optional<Array>>* knownOuts) {
  ADJIT_ASSERT(params.size() == fn.params.size(), "sparsity: one Deps per parameter");
  Frame frame{fn, std::vector<std::optional<Deps>>(fn.types.size()), std::vector<std::optional<Array>>(fn.types.size()),
              {}, {}, {}};
  for (std::size_t p = 0; p < params.size(); ++p) {
    const std::size_t v = static_cast<std::size_t>(fn.params[p]);
    frame.deps[v] = params[p] ? *params[p] : Deps::none(fn.type(fn.params[p]).size());
    if (p < knownParams.size() && knownParams[p]) frame.known[v] = *knownParams[p];
  }
  Frame* outer = frame_;
  frame_ = &frame;
  struct Restore {
    Analysis& a;
    Frame* f;
    ~Restore() { a.frame_ = f; }
  } restore{*this, outer};

  for (const ir::Op& op : fn.ops) {
    const ir::OpInfo& info = ir::info(op.kind);
    const uint32_t traits = autodiff::rules(op.kind).traits;
    bool anyDeps = false;
    for (ir::ValueId o : op.operands) anyDeps = anyDeps || !frame.deps[static_cast<std::size_t>(o)]->idx.empty();
    const bool reaches = anyDeps && !(traits & autodiff::kNonDifferentiable);

    // Known values: pure ops of no callees on known operands, evaluated once.
    if (!anyDeps && info.has(ir::kPure) && op.callees.empty() && info.eval) {
      bool allKnown = true;
      int64_t size = 0;
      for (ir::ValueId o : op.operands) allKnown = allKnown && frame.known[static_cast<std::size_t>(o)].has_value();
      for (ir::ValueId r : op.results) size += fn.type(r).size();
      if (allKnown && size <= kKnownLimit) {
        std::vector<Array> args;
        for (ir::ValueId o : op.operands) args.push_back(*frame.known[static_cast<std::size_t>(o)]);
        std::vector<Array> values = info.eval(ir::EvalCtx{op, fn, args, nullptr});
        for (std::size_t k = 0; k < op.results.size() && k < values.size(); ++k)
          frame.known[static_cast<std::size_t>(op.results[k])] = std::move(values[k]);
      }
    }
    if (!reaches) {
      for (ir::ValueId r : op.results) frame.deps[static_cast<std::size_t>(r)] = Deps::none(fn.type(r).size());
      continue;
    }
    frame.op = &op;
    frame.traits = traits;
    frame.acc.assign(op.results.size(), {});
    frame.hacc.assign(op.results.size(), {});
    frame.direct.assign(op.results.size(), std::nullopt);
    SparsityCtx ctx{op, fn, *this};
    const Rules& r = rules(op.kind);
    (r.deps ? r.deps : denseDeps)(ctx);
    for (std::size_t k = 0; k < op.results.size(); ++k) {
      const Type& t = fn.type(op.results[k]);
      auto& slot = frame.deps[static_cast<std::size_t>(op.results[k])];
      if (!floating(t)) slot = Deps::none(t.size());
      else if (frame.direct[k]) slot = std::move(*frame.direct[k]);
      else {
        Deps d;
        rows(t.size(), frame.acc[k], d.ptr, d.idx);
        if (hessian_) rows(t.size(), frame.hacc[k], d.hptr, d.hidx);
        slot = std::move(d);
      }
    }
    frame.acc.clear();
    frame.hacc.clear();
  }
  std::vector<Deps> outs;
  for (ir::ValueId v : fn.outputs) outs.push_back(*frame.deps[static_cast<std::size_t>(v)]);
  if (knownOuts) {
    knownOuts->clear();
    for (ir::ValueId v : fn.outputs) knownOuts->push_back(frame.known[static_cast<std::size_t>(v)]);
  }
  return outs;
}

Inputs numberParams(const ir::Function& fn, const std::vector<bool>& wrt) {
  Inputs in;
  for (std::size_t k = 0; k < fn.params.size(); ++k) {
    const Type& t = fn.type(fn.params[k]);
    if (floating(t) && (wrt.empty() || wrt[k])) {
      in.params.push_back(Deps::identity(t.size(), in.count));
      in.count += t.size();
    } else {
      in.params.push_back(Deps::none(t.size()));
    }
  }
  return in;
}

// ---- shared rules ----

namespace {
void elementwise(const SparsityCtx& c, Couples couples) {
  const int64_t n = c.resultType().size();
  std::vector<Read> reads(c.arity());
  for (int64_t e = 0; e < n; ++e) {
    for (std::size_t i = 0; i < c.arity(); ++i)
      reads[i] = Read{static_cast<uint32_t>(i), c.type(i).size() == n ? e : 0};
    for (std::size_t k = 0; k < c.op.results.size(); ++k) c.term(k, e, reads, couples);
  }
}
} // namespace

void elementwiseDeps(const SparsityCtx& c) { elementwise(c, Couples::byTraits); }
void piecewiseLinearDeps(const SparsityCtx& c) { elementwise(c, Couples::nothing); }

void piecewiseLinearFirstDeps(const SparsityCtx& c) {
  const int64_t n = c.resultType().size();
  for (int64_t e = 0; e < n; ++e) c.term(0, e, {Read{0, c.type(0).size() == n ? e : 0}}, Couples::nothing);
}

void zeroDeps(const SparsityCtx& c) {
  for (std::size_t k = 0; k < c.op.results.size(); ++k) c.set(k, Deps::none(c.resultType(k).size()));
}

void reduceDeps(const SparsityCtx& c, std::string_view axesName, bool oneTerm, Couples couples) {
  const Shape& in = c.type(0).shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<char> reduced(in.size(), 0);
  for (int64_t a : c.op.attrs.ints(axesName)) reduced[static_cast<std::size_t>(a < 0 ? a + rank : a)] = 1;
  // Each operand element's result element: its kept coordinates, row-major.
  const int64_t n = c.type(0).size();
  std::vector<int64_t> target(static_cast<std::size_t>(n));
  std::vector<int64_t> coord(in.size(), 0);
  for (int64_t x = 0; x < n; ++x) {
    int64_t r = 0;
    for (std::size_t d = 0; d < in.size(); ++d)
      if (!reduced[d]) r = r * in[d] + coord[d];
    target[static_cast<std::size_t>(x)] = r;
    for (std::size_t d = in.size(); d-- > 0;) { // next coordinate
      if (++coord[d] < in[d]) break;
      coord[d] = 0;
    }
  }
  if (!oneTerm) {
    for (int64_t x = 0; x < n; ++x) c.term(0, target[static_cast<std::size_t>(x)], {Read{0, x}}, couples);
    return;
  }
  std::vector<std::vector<Read>> groups(static_cast<std::size_t>(c.resultType().size()));
  for (int64_t x = 0; x < n; ++x) groups[static_cast<std::size_t>(target[static_cast<std::size_t>(x)])].push_back(Read{0, x});
  for (std::size_t r = 0; r < groups.size(); ++r) c.term(0, static_cast<int64_t>(r), groups[r], couples);
}

void calleeDeps(const SparsityCtx& c) {
  std::vector<const Deps*> args;
  std::vector<const Array*> known;
  for (std::size_t i = 0; i < c.arity(); ++i) args.push_back(&c.deps(i)), known.push_back(c.known(i));
  std::vector<std::optional<Array>> knownOuts;
  std::vector<Deps> outs = c.call(c.op.callees.at(0), args, known, &knownOuts);
  for (std::size_t k = 0; k < c.op.results.size() && k < outs.size(); ++k) {
    c.set(k, std::move(outs[k]));
    c.setKnown(k, std::move(knownOuts[k]));
  }
}

namespace {
/// denseDeps over `batches` independent blocks: block b of every result
/// reads block b of every operand (each operand's and result's elements
/// split into `batches` equal, contiguous blocks).
void blockDense(const SparsityCtx& c, int64_t batches) {
  const bool hessian = c.analysis.hessian();
  const uint32_t traits = autodiff::rules(c.op.kind).traits;
  std::vector<Deps> outs(c.op.results.size());
  for (Deps& d : outs) {
    d.ptr.assign(1, 0);
    if (hessian) d.hptr.assign(1, 0);
  }
  std::vector<std::vector<int64_t>> unions(c.arity());
  for (int64_t b = 0; b < batches; ++b) {
    // Each operand block's union once; every result element of the block
    // gets the union of them all, and (Hessians) the union of their pairs
    // with the pairs the operands' unions make as the traits say.
    std::vector<int64_t> all;
    std::vector<Pair> pairs;
    for (std::size_t i = 0; i < c.arity(); ++i) {
      const Deps& d = c.deps(i);
      const int64_t per = d.elements() / batches;
      const auto from = d.ptr[static_cast<std::size_t>(b * per)], to = d.ptr[static_cast<std::size_t>((b + 1) * per)];
      unions[i] = unite(std::vector<int64_t>(d.idx.begin() + from, d.idx.begin() + to));
      all.insert(all.end(), unions[i].begin(), unions[i].end());
      if (hessian && !d.hptr.empty())
        pairs.insert(pairs.end(), d.hidx.begin() + d.hptr[static_cast<std::size_t>(b * per)],
                     d.hidx.begin() + d.hptr[static_cast<std::size_t>((b + 1) * per)]);
    }
    all = unite(std::move(all));
    if (hessian) {
      for (std::size_t x = 0; x < c.arity(); ++x)
        for (std::size_t y = x; y < c.arity(); ++y)
          if (interact(traits, Couples::byTraits, Read{static_cast<uint32_t>(x), 0}, Read{static_cast<uint32_t>(y), 1}, c.arity()))
            cross(unions[x], unions[y], [&](Pair p) { pairs.push_back(p); });
      std::sort(pairs.begin(), pairs.end());
      pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    }
    for (std::size_t k = 0; k < outs.size(); ++k) {
      Deps& d = outs[k];
      const int64_t per = c.resultType(k).size() / batches;
      for (int64_t e = 0; e < per; ++e) {
        d.idx.insert(d.idx.end(), all.begin(), all.end());
        d.ptr.push_back(static_cast<int64_t>(d.idx.size()));
        if (hessian) {
          d.hidx.insert(d.hidx.end(), pairs.begin(), pairs.end());
          d.hptr.push_back(static_cast<int64_t>(d.hidx.size()));
        }
      }
    }
  }
  for (std::size_t k = 0; k < outs.size(); ++k) c.set(k, std::move(outs[k]));
}
} // namespace

void denseDeps(const SparsityCtx& c) { blockDense(c, 1); }

void matrixBatchDeps(const SparsityCtx& c) {
  // The batch: operand 0's axes before its last two, which every operand
  // and result must lead with; otherwise the whole op is one block.
  const Shape& a = c.type(0).shape;
  if (a.size() < 2) return denseDeps(c);
  const Shape batch(a.begin(), a.end() - 2);
  int64_t batches = 1;
  for (int64_t d : batch) batches *= d;
  auto leads = [&](const Shape& s) { return s.size() >= batch.size() && std::equal(batch.begin(), batch.end(), s.begin()); };
  for (std::size_t i = 0; i < c.arity(); ++i)
    if (!leads(c.type(i).shape)) return denseDeps(c);
  for (std::size_t k = 0; k < c.op.results.size(); ++k)
    if (!leads(c.resultType(k).shape)) return denseDeps(c);
  blockDense(c, std::max<int64_t>(batches, 1));
}

void cumulativeDeps(const SparsityCtx& c, bool product) {
  const Shape& s = c.type(0).shape;
  const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
  const bool reverse = c.op.attrs.boolean("reverse");
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[axis];
  std::vector<Read> reads;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t k = 0; k < n; ++k) {
        // Result k (counted in the scan's direction) reads operand elements 0..k.
        auto at = [&](int64_t j) { return (o * n + (reverse ? n - 1 - j : j)) * inner + i; };
        if (!product) {
          for (int64_t j = 0; j <= k; ++j) c.term(0, at(k), {Read{0, at(j)}});
          continue;
        }
        reads.clear();
        for (int64_t j = 0; j <= k; ++j) reads.push_back(Read{0, at(j)});
        c.term(0, at(k), reads, Couples::distinct);
      }
}

void alongAxisDeps(const SparsityCtx& c) {
  // Result i's element e reads every element of operand i's row through e
  // along `axis`, each in a term of its own, coupling nothing.
  const Shape& s = c.type(0).shape;
  const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t n = s[axis];
  for (std::size_t k = 0; k < c.op.results.size() && k < c.arity(); ++k) {
    if (!floating(c.resultType(k))) continue;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        for (int64_t e = 0; e < n; ++e)
          for (int64_t j = 0; j < n; ++j)
            c.term(k, (o * n + e) * inner + i, {Read{static_cast<uint32_t>(k), (o * n + j) * inner + i}}, Couples::nothing);
  }
}

Deps unite(const Deps& a, const Deps& b) {
  ADJIT_ASSERT(a.elements() == b.elements(), "sparsity: uniting dependencies of different sizes");
  const int64_t n = a.elements();
  Deps d;
  d.ptr.assign(1, 0);
  const bool pairs = !a.hptr.empty() || !b.hptr.empty();
  if (pairs) d.hptr.assign(1, 0);
  for (int64_t e = 0; e < n; ++e) {
    std::set_union(a.of(e).begin(), a.of(e).end(), b.of(e).begin(), b.of(e).end(), std::back_inserter(d.idx));
    d.ptr.push_back(static_cast<int64_t>(d.idx.size()));
    if (!pairs) continue;
    std::set_union(a.pairsOf(e).begin(), a.pairsOf(e).end(), b.pairsOf(e).begin(), b.pairsOf(e).end(), std::back_inserter(d.hidx));
    d.hptr.push_back(static_cast<int64_t>(d.hidx.size()));
  }
  return d;
}

bool samePattern(const Deps& a, const Deps& b) {
  if (a.ptr != b.ptr || a.idx != b.idx) return false;
  if (a.hptr.empty() && b.hptr.empty()) return true;
  for (int64_t e = 0; e < a.elements(); ++e) {
    const auto pa = a.pairsOf(e), pb = b.pairsOf(e);
    if (!std::equal(pa.begin(), pa.end(), pb.begin(), pb.end())) return false;
  }
  return true;
}

void switchDeps(const SparsityCtx& c) {
  // The branch index has no derivative: a known index picks its branch; an
  // unknown one, the union of every branch's pattern.
  std::vector<const Deps*> args;
  std::vector<const Array*> known;
  for (std::size_t i = 1; i < c.arity(); ++i) args.push_back(&c.deps(i)), known.push_back(c.known(i));
  const auto n = static_cast<int64_t>(c.op.callees.size());
  std::vector<std::string> branches = c.op.callees;
  if (const Array* index = c.known(0)) {
    const int64_t k = std::clamp<int64_t>(index->get<int64_t>(0), 0, n - 1);
    branches = {c.op.callees[static_cast<std::size_t>(k)]};
  }
  std::vector<Deps> outs = c.call(branches[0], args, known);
  for (std::size_t b = 1; b < branches.size(); ++b) {
    std::vector<Deps> more = c.call(branches[b], args, known);
    for (std::size_t k = 0; k < outs.size(); ++k) outs[k] = unite(outs[k], more[k]);
  }
  for (std::size_t k = 0; k < c.op.results.size() && k < outs.size(); ++k) c.set(k, std::move(outs[k]));
}

void movementDeps(const SparsityCtx& c) {
  // A one-op function on f64 operands holding (their base + element + 1), the
  // index operands as known; evaluated, each floating result element names
  // the one operand element it copies (0: none, padding).
  ir::Function probe;
  probe.name = "sparsity.probe";
  std::vector<Array> args;
  std::vector<int64_t> base;
  int64_t next = 0;
  ir::Op op = c.op;
  op.operands.clear();
  op.results.clear();
  for (std::size_t i = 0; i < c.arity(); ++i) {
    const Type& t = c.type(i);
    if (floating(t)) {
      Array a(DType::f64, t.shape);
      double* p = a.data<double>();
      for (int64_t j = 0; j < t.size(); ++j) p[j] = static_cast<double>(next + j + 1);
      base.push_back(next);
      next += t.size();
      args.push_back(std::move(a));
      op.operands.push_back(probe.newValue(Type{DType::f64, t.shape}));
    } else {
      const Array* k = c.known(i);
      if (!k) return denseDeps(c);
      base.push_back(-1);
      args.push_back(*k);
      op.operands.push_back(probe.newValue(t));
    }
  }
  if (next >= (int64_t{1} << 53)) return denseDeps(c); // element numbers would not be exact in f64
  for (std::size_t k = 0; k < c.op.results.size(); ++k) {
    const Type& t = c.resultType(k);
    op.results.push_back(probe.newValue(floating(t) ? Type{DType::f64, t.shape} : t));
  }
  const std::vector<Array> values = ir::info(op.kind).eval(ir::EvalCtx{op, probe, args, nullptr});
  for (std::size_t k = 0; k < values.size(); ++k) {
    if (!floating(c.resultType(k))) continue;
    const double* v = values[k].data<double>();
    for (int64_t e = 0; e < values[k].size(); ++e) {
      if (v[e] == 0) continue;
      const int64_t code = static_cast<int64_t>(v[e]) - 1;
      // The operand whose range holds the code: the last floating one starting at or before it.
      std::size_t i = c.arity();
      for (std::size_t j = 0; j < c.arity(); ++j)
        if (base[j] >= 0 && base[j] <= code) i = j;
      ADJIT_ASSERT(i < c.arity(), fmt::format("movementDeps of {}: element {} holds no operand element",
                                              ir::info(c.op.kind).name, e));
      c.term(k, e, {Read{static_cast<uint32_t>(i), code - base[i]}});
    }
  }
}

} // namespace adjit::sparsity
