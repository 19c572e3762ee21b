// codegen/FusionPlan.cpp — planning: which values are materialised, how
// loops are grouped and ordered, and where buffers live. Reads op traits and
// hooks from the op table, never op kinds. Every walk is iterative; walks
// through fused expressions are bounded by the body budget, so planning is
// linear in the function's size.
#include "codegen/Planner.h"
#include "support/Assert.h"
#include "support/Hash.h"

#include <algorithm>
#include <exception>
#include <numeric>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace adjit::codegen::planning {

bool Planner::findStepGroups() {
  init();
  findSteps();
  return !cuts_.empty();
}

int64_t Planner::workOf(const Kernel& k) const {
  if (k.kind == Kernel::Kind::Loop) return num_elements(k.domain) * std::max(k.bodySize, 1);
  int64_t elements = 0;
  for (ValueId r : k.op->results) elements += f_.type(r).size();
  return elements * kLowerWeight;
}

int64_t Planner::codeSize(const FusionPlan& p) {
  int64_t size = 0;
  for (std::size_t k = 0; k < p.kernels.size(); ++k)
    if (p.kernels[k].sameAs < 0 || p.kernels[k].sameAs == static_cast<int>(k)) size += codeOf(p.kernels[k]);
  return size;
}

FusionPlan Planner::draft() {
  init();
  shared_.clear();
  for (ValueId v : carries_) mat_[at(v)] = 1;
  materialize();
  makeViews();
  std::vector<Unit> units = schedule();
  // A value left fused for loops that share it (see materialize) but
  // computed by several loops after all is stored instead, once.
  if (storeShared(units)) {
    // The budget cuts made while those values were thought fused are
    // stale: the stored values cut the same chains elsewhere. Planning again
    // with them stored places every cut where the final loops need it. A
    // chain differentiated in reverse then becomes a few kernels repeated
    // (10 distinct codes instead of 48 for a 10,000-op chain's gradient:
    // LLVM's time falls 2.3x), not loops shaped by leftovers.
    std::vector<ValueId> stored;
    for (ValueId v : shared_)
      if (mat_[at(v)]) stored.push_back(v);
    init();
    shared_.clear();
    for (ValueId v : stored) mat_[at(v)] = 1;
    for (ValueId v : carries_) mat_[at(v)] = 1;
    materialize();
    makeViews();
    units = schedule();
    storeShared(units);
  }
  std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.level < b.level; });
  FusionPlan p;
  p.fn = &f_;
  for (Unit& u : units) p.kernels.push_back(kernelOf(std::move(u)));
  share(p);
  return p;
}

namespace {
constexpr std::string_view kStepNames[] = {"draft", "group", "tiles", "chunk", "peel", "runs", "split", "place"};
} // namespace

FusionPlan Planner::finish(FusionPlan p) {
  // The steps after "draft", in kStepNames' order.
  struct Step {
    std::string_view name;
    void (*run)(Planner&, FusionPlan&);
  };
  static constexpr Step kSteps[] = {
      {"group", [](Planner& q, FusionPlan& p) { q.group(p); }},
      {"tiles", [](Planner& q, FusionPlan& p) { q.tiles(p); }},
      {"chunk", [](Planner& q, FusionPlan& p) { if (q.parallel_) q.chunk(p); }}, // no threads: no chunks
      {"peel", [](Planner& q, FusionPlan& p) { q.peel(p); }},
      {"runs", [](Planner&, FusionPlan& p) { findRuns(p); }},
      {"split", [](Planner& q, FusionPlan& p) { q.split(p); }},
      {"place", [](Planner& q, FusionPlan& p) { q.place(p); }},
  };
  auto observe = [&](std::string_view step) {
    if (options_.observe && (options_.observeAfter == step || options_.observeAfter == "all")) options_.observe(step, p.str());
  };
  observe("draft");
  for (const Step& s : kSteps) {
    s.run(*this, p);
    observe(s.name);
  }
  return p;
}

void Planner::init() {
  const std::size_t n = f_.types.size();
  if (producer_.size() != n) facts();
  mat_ = initialMat_;
  inPlace_.assign(n, 0);
  size_.assign(n, 0);
  expensive_.assign(n, 0);
  computes_.assign(n, 0);
  stamp_.assign(n, 0);
  gen_ = 0;
  keyMark_.assign(n, 0);
  keyState_.assign(n, 0);
  keyIndex_.assign(n, 0);
  keyGen_ = 0;
  state_.assign(n, 0);
  slot_.assign(n, 0);
}

void Planner::facts() {
  const std::size_t n = f_.types.size();
  producer_.assign(n, nullptr);
  position_.assign(n, -1);
  uses_.assign(n, 0);
  isOutput_.assign(n, 0);
  initialMat_.assign(n, 0);
  for (ValueId p : f_.params) initialMat_[at(p)] = 1;
  inMemory_.assign(n, 0);
  for (std::size_t i = 0; i < f_.ops.size(); ++i) {
    const ir::Op& op = f_.ops[i];
    // Data the op holds is read from memory, like a parameter (see Hooks::data).
    if (const auto data = codegen::lowering(op.kind).data; data && op.results.size() == 1 && data(op.attrs))
      initialMat_[at(op.results[0])] = inMemory_[at(op.results[0])] = 1;
    for (ValueId r : op.results) {
      producer_[at(r)] = &op;
      position_[at(r)] = static_cast<int>(i);
    }
    // An elementwise op reading one value twice (x * x; a VJP's dy + dy)
    // computes it once per point: one use.
    const bool elementwise = ir::info(op.kind).has(ir::kElementwise);
    for (std::size_t j = 0; j < op.operands.size(); ++j)
      if (!elementwise || std::find(op.operands.begin(), op.operands.begin() + static_cast<std::ptrdiff_t>(j),
                                    op.operands[j]) == op.operands.begin() + static_cast<std::ptrdiff_t>(j))
        ++uses_[at(op.operands[j])];
    if (codegen::lowering(op.kind).has(codegen::kMaterializesOperands))
      for (ValueId o : op.operands) initialMat_[at(o)] = 1;
    for (std::size_t j = 0; j < op.operands.size() && j < 32; ++j)
      if (codegen::lowering(op.kind).materializedOperands & (1u << j)) initialMat_[at(op.operands[j])] = 1;
  }
  users_ = Users::of(f_);
  struct TypeHash {
    std::size_t operator()(const Type& t) const {
      uint64_t h = static_cast<uint64_t>(t.dtype);
      for (int64_t d : t.shape) h = hashCombine(h, static_cast<uint64_t>(d));
      return static_cast<std::size_t>(h);
    }
  };
  std::unordered_map<Type, uint32_t, TypeHash> ids;
  typeId_.resize(n);
  for (std::size_t v = 0; v < n; ++v)
    typeId_[v] = ids.try_emplace(f_.types[v], static_cast<uint32_t>(ids.size())).first->second;
  for (ValueId o : f_.outputs) {
    ++uses_[at(o)];
    isOutput_[at(o)] = 1;
    initialMat_[at(o)] = 1;
  }
  // sameDomain_[v]: every use of v is a reduction of it, or an elementwise op
  // of v's shape whose result is an output or itself used only so. All such
  // users are loops over v's domain, which scheduling can join into one.
  // Users come after v, so one backward sweep decides every value.
  sameDomain_.assign(n, 0);
  for (auto op = f_.ops.rbegin(); op != f_.ops.rend(); ++op)
    for (ValueId r : op->results) {
      bool ok = !isOutput_[at(r)];
      for (const ir::Op* u : users_.of(r)) {
        if (!ok) break;
        const ir::OpInfo& info = ir::info(u->kind);
        if (codegen::lowering(u->kind).reduce) continue;
        if (u->results.empty()) {
          ok = false;
          break;
        }
        const ValueId ur = u->results[0];
        ok = info.has(ir::kElementwise) && (typeId_[at(ur)] == typeId_[at(r)] || f_.type(ur).shape == f_.type(r).shape) &&
             (isOutput_[at(ur)] || sameDomain_[at(ur)]);
      }
      sameDomain_[at(r)] = ok;
    }
}

void Planner::findSteps() {
  StepGroups steps = codegen::findStepGroups(f_, users_, position_, initialMat_, budget_);
  carries_ = std::move(steps.carries);
  cuts_ = std::move(steps.cuts);
}

std::ptrdiff_t Planner::stepGroup(const ir::Op& op) const {
  return std::upper_bound(cuts_.begin(), cuts_.end(), static_cast<int>(&op - f_.ops.data())) - cuts_.begin();
}

int Planner::dagSize(std::span<const ValueId> roots, int limit) {
  ++gen_;
  stack_.clear();
  for (ValueId o : roots)
    if (fusedValue(o) && stamp_[at(o)] != gen_) {
      stamp_[at(o)] = gen_;
      stack_.push_back(o);
    }
  int count = 0;
  while (!stack_.empty()) {
    const ValueId v = stack_.back();
    stack_.pop_back();
    if (++count >= limit) return limit;
    for (ValueId o : producer_[at(v)]->operands)
      if (fusedValue(o) && stamp_[at(o)] != gen_) {
        stamp_[at(o)] = gen_;
        stack_.push_back(o);
      }
  }
  return count;
}

int Planner::operandsSize(std::span<const ValueId> operands, int limit) {
  int sum = 0;
  ++gen_; // counts each operand once (a variadic op may repeat one)
  for (ValueId o : operands)
    if (fusedValue(o) && stamp_[at(o)] != gen_) {
      stamp_[at(o)] = gen_;
      sum = std::min(sum + size_[at(o)], limit + 1);
    }
  return sum <= limit ? sum : dagSize(operands, limit + 1);
}

void Planner::boundOperands(std::span<const ValueId> operands, int limit) {
  while (operandsSize(operands, limit) > limit) {
    ValueId largest = -1;
    for (ValueId o : operands)
      if (fusedValue(o) && (largest < 0 || size_[at(o)] > size_[at(largest)])) largest = o;
    ADJIT_ASSERT(largest >= 0, "an op over budget without fused operands");
    mat_[at(largest)] = 1;
  }
}

void Planner::materialize() {
  for (const ir::Op& op : f_.ops) {
    const ir::OpInfo& info = ir::info(op.kind);
    // An op that may update an operand in place (Lowering::inPlace) is a
    // kernel of its own, writing its result's buffer, when that operand is a
    // buffer this function computes (not a constant or an output), or a
    // parameter updated into an output (a loop body's carry), that no later
    // op reads (at most kMaxInPlaceUsers ops read it): place() then gives the
    // result that buffer when the kernel order makes this op its last
    // reader, and the op writes only what it replaces (or lets callers pass
    // the parameter's buffer as the output's: FusionPlan::sharedOutputs).
    // Otherwise its `element` hook computes it like any other element op,
    // fused into the loops that read it.
    if (const codegen::InPlace& ip = codegen::lowering(op.kind).inPlace; ip.lower && op.results.size() == 1) {
      const ValueId x = op.operands.at(ip.operand);
      bool candidate = mat_[at(x)] && (producer_[at(x)] || isOutput_[at(op.results[0])]) && !inMemory_[at(x)] &&
                       !isOutput_[at(x)] && users_.of(x).size() <= kMaxInPlaceUsers;
      for (const ir::Op* u : users_.of(x)) candidate = candidate && u <= &op;
      if (candidate) inPlace_[at(op.results[0])] = 1;
    }
    const bool writesWhole = codegen::lowering(op.kind).lower || codegen::lowering(op.kind).reduce || lowersWhole(op);
    // The op's own loops (or its consumers' loop) compute its fused operands.
    // An op with a loop per operand computes each in a loop of its own, up
    // to kMaxOperandLoops of them; past that its operands get buffers, which
    // its code reads through one loop over a table (a thousand loops in one
    // function take LLVM seconds).
    if (codegen::lowering(op.kind).has(codegen::kLoopPerOperand) && op.operands.size() > kMaxOperandLoops)
      for (ValueId o : op.operands) mat_[at(o)] = 1;
    else if (codegen::lowering(op.kind).has(codegen::kLoopPerOperand))
      for (ValueId o : op.operands) boundOperands(std::span<const ValueId>(&o, 1), budget_);
    else
      boundOperands(op.operands, writesWhole ? budget_ : budget_ - 1);
    if (!writesWhole && codegen::lowering(op.kind).has(codegen::kRemapsIndex) && !op.results.empty()) {
      // Each operand element is read size(result) / size(operand) times per
      // evaluation: recomputing a computed operand that often costs more than
      // one store and the loads. Cheap operands are still worth recomputing
      // at a reuse of 2 or 3.
      const int64_t out = f_.type(op.results[0]).size();
      for (ValueId o : op.operands) {
        const int64_t in = std::max<int64_t>(f_.type(o).size(), 1);
        const int64_t reuse = out / in;
        if (fusedValue(o) && computes_[at(o)] && (reuse >= 4 || (reuse >= 2 && expensive_[at(o)]))) mat_[at(o)] = 1;
      }
    }
    bool expensive = codegen::lowering(op.kind).has(codegen::kExpensive);
    bool computes = !op.operands.empty() && !info.has(ir::kElementsFromOperand);
    for (ValueId o : op.operands)
      if (fusedValue(o)) {
        expensive = expensive || expensive_[at(o)];
        computes = computes || computes_[at(o)];
      }
    const int size = 1 + operandsSize(op.operands, budget_);
    for (ValueId r : op.results) {
      size_[at(r)] = size;
      expensive_[at(r)] = expensive;
      computes_[at(r)] = computes;
      if (writesWhole) {
        mat_[at(r)] = 1;
      } else if (uses_[at(r)] > 1 && (expensive || size > kRecomputeLimit)) {
        if (sameDomain_[at(r)]) shared_.push_back(r);
        else mat_[at(r)] = 1;
      }
    }
  }
}

void Planner::makeViews() {
  viewOf_.assign(f_.types.size(), -1);
  viewOffset_.assign(f_.types.size(), 0);
  auto consider = [&](const ir::Op& op) {
    if (!codegen::lowering(op.kind).view || op.results.size() != 1 || op.operands.empty()) return;
    const ValueId r = op.results[0], o = op.operands[0];
    if (isView(r) || isOutput_[at(r)] || (!mat_[at(r)] && !mat_[at(o)])) return;
    const std::optional<int64_t> offset = codegen::lowering(op.kind).view(f_.type(o), f_.type(r), op.attrs);
    if (!offset) return;
    mat_[at(o)] = 1;
    mat_[at(r)] = 1;
    viewOf_[at(r)] = o;
    viewOffset_[at(r)] = *offset;
  };
  // Backwards, a view that must have a buffer gives its operand one (which
  // may be a view in turn); forwards, a view op over a buffer becomes a view.
  for (auto op = f_.ops.rbegin(); op != f_.ops.rend(); ++op) consider(*op);
  for (const ir::Op& op : f_.ops) consider(op);
  // Chains of views read the first buffer in the chain: operands come first.
  for (const ir::Op& op : f_.ops)
    for (ValueId r : op.results)
      if (const ValueId o = viewOf_[at(r)]; o >= 0 && viewOf_[at(o)] >= 0) {
        viewOffset_[at(r)] += viewOffset_[at(o)];
        viewOf_[at(r)] = viewOf_[at(o)];
      }
}

std::optional<Unit> Planner::loopOf(const ir::Op& op) {
  const ValueId r = op.results.at(0);
  // The ops a point of this root computes now that materialisation is
  // decided (size_ was estimated before operands were cut).
  const int size = 1 + dagSize(op.operands, budget_ + 1);
  if (!codegen::lowering(op.kind).reduce) {
    const Shape& s = f_.type(r).shape;
    return Unit{&op, 0, {{&op, r, false}}, s, s.size(), size};
  }
  const Shape& in = f_.type(op.operands.at(0)).shape;
  std::vector<int64_t> axes = op.attrs.ints("axes");
  for (int64_t& x : axes)
    if (x < 0) x += static_cast<int64_t>(in.size());
  std::sort(axes.begin(), axes.end());
  const std::size_t from = in.size() - axes.size();
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != static_cast<int64_t>(from + i)) return std::nullopt;
  return Unit{&op, 0, {{&op, r, true}}, in, from, size};
}

const std::vector<Read>& Planner::readsOf(std::span<const ValueId> operands, bool pointwise) {
  ++gen_;
  reads_.clear();
  walk_.clear();
  for (ValueId o : operands) walk_.push_back({o, pointwise});
  while (!walk_.empty()) {
    const auto [v, same] = walk_.back();
    walk_.pop_back();
    const bool seen = stamp_[at(v)] == gen_;
    if (seen && (state_[at(v)] == 2 || same)) continue; // nothing new on this path
    stamp_[at(v)] = gen_;
    state_[at(v)] = same ? 1 : 2;
    if (!fusedValue(v)) {
      if (seen) reads_[slot_[at(v)]].sameIndex = false;
      else {
        slot_[at(v)] = reads_.size();
        reads_.push_back({v, same});
      }
      continue;
    }
    const ir::Op& p = *producer_[at(v)];
    const bool keeps = same && ir::info(p.kind).has(ir::kElementwise);
    for (ValueId o : p.operands) walk_.push_back({o, keeps});
  }
  return reads_;
}

bool Planner::shiftedOnly(std::span<const ValueId> operands, ValueId target) {
  // (value, whether the path to it went through an op that is neither
  // elementwise nor a shift along the last axis)
  std::vector<std::pair<ValueId, bool>> work;
  std::unordered_set<int64_t> seen;
  for (ValueId o : operands) work.push_back({o, false});
  while (!work.empty()) {
    const auto [v, other] = work.back();
    work.pop_back();
    if (!seen.insert(int64_t(v) * 2 + other).second) continue;
    if (v == target) {
      if (other) return false;
      continue;
    }
    if (!fusedValue(v)) continue;
    const ir::Op& p = *producer_[at(v)];
    const Lowering& l = codegen::lowering(p.kind);
    for (std::size_t i = 0; i < p.operands.size(); ++i) {
      const bool keeps = ir::info(p.kind).has(ir::kElementwise) ||
                         (l.lastAxisShift && l.lastAxisShift(f_.type(p.operands[i]), i, f_.type(v), p.attrs));
      work.push_back({p.operands[i], other || !keeps});
    }
  }
  return true;
}

bool Planner::compatible(const Unit& u, const Unit& r, int shared) const {
  if (u.roots.empty() || u.domain != r.domain || u.size + r.size - shared > budget_) return false;
  if (stepGroup(*u.op) != stepGroup(*r.op)) return false;
  if (r.roots[0].reduction && u.reduceFrom != u.domain.size() && u.reduceFrom != r.reduceFrom) return false;
  return true;
}

std::vector<Unit> Planner::schedule() {
  std::vector<Unit> units;
  // Units by level and step group: a root joins only a unit of its own group.
  std::map<std::pair<int, std::ptrdiff_t>, std::vector<int>> byLevel;
  std::vector<int> levelOf(f_.types.size(), -1), unitOf(f_.types.size(), -1);
  // computedIn[v]: the unit that last took a root computing fused value v.
  // A root's ops that a unit computes already cost it nothing there: sibling
  // reductions of one chain (a Horner polynomial's reverse pass, one sum per
  // coefficient off a chain of products) share a loop instead of each
  // counting the whole chain against the budget.
  std::vector<int> computedIn(f_.types.size(), -1);
  recomputeCost_.assign(f_.types.size(), 0);
  std::vector<ValueId> rootFused;
  std::vector<std::pair<int, int>> overlap; // (unit, fused values of the root it computes)
  auto sharedWith = [&](int u) {
    for (const auto& [unit, count] : overlap)
      if (unit == u) return count;
    return 0;
  };
  int lastEffect = -1; // ops with side effects run in program order
  for (const ir::Op& op : f_.ops) {
    const ir::OpInfo& info = ir::info(op.kind);
    const bool lowers = codegen::lowering(op.kind).lower || lowersWhole(op);
    if (!lowers && (op.results.empty() || !mat_[at(op.results[0])])) continue; // fused into its users
    if (!op.results.empty() && inMemory_[at(op.results[0])]) continue;                   // no code, like a parameter
    if (!op.results.empty() && isView(op.results[0])) { // no code: ready when the viewed buffer is
      levelOf[at(op.results[0])] = levelOf[at(viewOf_[at(op.results[0])])];
      continue;
    }
    std::optional<Unit> root = lowers ? std::nullopt : loopOf(op);
    rootFused.clear();
    overlap.clear();
    if (root) {
      // Bounded like loopOf's count: materialize() kept every root's fused
      // operands within the budget.
      ++gen_;
      stack_.assign(op.operands.begin(), op.operands.end());
      while (!stack_.empty()) {
        const ValueId v = stack_.back();
        stack_.pop_back();
        if (!fusedValue(v) || stamp_[at(v)] == gen_) continue;
        stamp_[at(v)] = gen_;
        rootFused.push_back(v);
        for (ValueId o : producer_[at(v)]->operands) stack_.push_back(o);
      }
      for (ValueId v : rootFused)
        if (const int u = computedIn[at(v)]; u >= 0) {
          auto it = std::find_if(overlap.begin(), overlap.end(), [&](const auto& e) { return e.first == u; });
          if (it == overlap.end()) overlap.push_back({u, 1});
          else ++it->second;
        }
    }
    const bool pointwise = root && (root->roots[0].reduction || info.has(ir::kElementwise));
    int level = 0;
    std::vector<int> shareUnits; // units this root may join: it reads them at its own index
    // Per unit, the ops this root adds by computing that unit's roots again
    // at shifted points (see shiftedOnly).
    std::vector<std::pair<int, int>> recomputed;
    auto extraFor = [&](int u) {
      for (const auto& [unit, ops] : recomputed)
        if (unit == u) return ops;
      return 0;
    };
    for (const Read& r : readsOf(op.operands, pointwise)) {
      const int u = unitOf[at(r.value)];
      const bool loopRoot = root && u >= 0 && !units[static_cast<std::size_t>(u)].roots.empty() &&
                            f_.type(r.value).shape == root->domain && !codegen::lowering(producer_[at(r.value)]->kind).reduce;
      // A loop's own root read at shifted points is computed there again
      // (the emitter computes a loop's roots wherever the loop reads them),
      // when it is cheap: a few multiply-adds cost less than a pass over
      // memory; an exp per shifted read does not.
      const bool shifted = loopRoot && !r.sameIndex && !expensive_[at(r.value)] && shiftedOnly(op.operands, r.value);
      if (loopRoot && (r.sameIndex || shifted)) {
        level = std::max(level, levelOf[at(r.value)]);
        if (std::find(shareUnits.begin(), shareUnits.end(), u) == shareUnits.end()) shareUnits.push_back(u);
        if (shifted) {
          auto it = std::find_if(recomputed.begin(), recomputed.end(), [&](const auto& e) { return e.first == u; });
          if (it == recomputed.end()) recomputed.push_back({u, recomputeCost_[at(r.value)]});
          else it->second += recomputeCost_[at(r.value)];
        }
      } else {
        level = std::max(level, levelOf[at(r.value)] + 1);
      }
    }
    // A root sharing a unit's loop must join that very unit; otherwise it goes one level up.
    int target = -1;
    for (int u : shareUnits)
      if (units[static_cast<std::size_t>(u)].level == level) {
        if (target < 0 && compatible(units[static_cast<std::size_t>(u)], *root, sharedWith(u) - extraFor(u))) target = u;
        else if (target != u) level += 1, target = -2;
      }
    if (target == -2) target = -1;
    if (root && target < 0)
      for (int u : byLevel[{level, stepGroup(op)}]) {
        if (!compatible(units[static_cast<std::size_t>(u)], *root, sharedWith(u))) continue;
        // Joining an unrelated unit is fine unless it shares a level with a unit we read.
        bool clash = false;
        for (int su : shareUnits) clash = clash || (units[static_cast<std::size_t>(su)].level == level && su != u);
        if (!clash) {
          target = u;
          break;
        }
      }
    if (effectful(op)) {
      level = std::max(level, lastEffect + 1);
      lastEffect = level;
      if (target >= 0 && units[static_cast<std::size_t>(target)].level != level) target = -1;
    }
    for (ValueId r : op.results) levelOf[at(r)] = level;
    if (!root) {
      units.push_back({&op, level, {}, {}, 0, 0});
      continue;
    }
    // What computing this root again elsewhere costs: its ops, and the roots it computes again itself.
    recomputeCost_[at(op.results[0])] = root->size + (target >= 0 ? extraFor(target) : 0);
    if (target >= 0) {
      Unit& u = units[static_cast<std::size_t>(target)];
      u.roots.push_back(root->roots[0]);
      u.size += root->size - sharedWith(target) + extraFor(target);
      if (root->roots[0].reduction) u.reduceFrom = root->reduceFrom;
    } else {
      root->level = level;
      units.push_back(std::move(*root));
      target = static_cast<int>(units.size() - 1);
      byLevel[{level, stepGroup(op)}].push_back(target);
    }
    unitOf[at(op.results[0])] = target;
    for (ValueId v : rootFused) computedIn[at(v)] = target;
  }
  return units;
}

bool Planner::storeShared(std::vector<Unit>& units) {
  constexpr int kMaxRounds = 8;
  bool any = false;
  for (int round = 0; storeSharedComputedTwice(units); ++round) {
    any = true;
    if (round == kMaxRounds)
      for (ValueId v : shared_) mat_[at(v)] = 1;
    units = schedule();
  }
  return any;
}

bool Planner::storeSharedComputedTwice(const std::vector<Unit>& units) {
  if (shared_.empty()) return false;
  // Only the frontier is stored: a shared value that an earlier unit
  // computes, where this unit's walk from its roots first meets it. What lies
  // behind it is then computed by the earlier unit alone, and this one reads
  // the stored value. (Storing every value computed twice stored each link of
  // a chain that several loops extend, such as the cotangents of a reverse
  // Horner recurrence, one sum off each.) Values of several units met behind
  // other paths are found in the next round, after scheduling again.
  std::vector<int> firstUnit(f_.types.size(), -1);
  std::vector<char> isShared(f_.types.size(), 0);
  for (ValueId v : shared_) isShared[at(v)] = 1;
  bool changed = false;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    ++gen_;
    stack_.clear();
    // A Lower or Reduction kernel (no roots) computes its op's fused operands.
    if (units[u].roots.empty()) stack_.assign(units[u].op->operands.begin(), units[u].op->operands.end());
    for (const LoopRoot& r : units[u].roots)
      for (ValueId o : r.op->operands) stack_.push_back(o);
    while (!stack_.empty()) {
      const ValueId v = stack_.back();
      stack_.pop_back();
      if (!fusedValue(v) || stamp_[at(v)] == gen_) continue;
      stamp_[at(v)] = gen_;
      if (firstUnit[at(v)] >= 0 && firstUnit[at(v)] != unit && isShared[at(v)]) {
        mat_[at(v)] = changed = true;
        continue;
      }
      if (firstUnit[at(v)] < 0) firstUnit[at(v)] = unit;
      for (ValueId o : producer_[at(v)]->operands) stack_.push_back(o);
    }
  }
  return changed;
}

std::vector<ValueId> Planner::fusedFrom(std::span<const ValueId> operands) {
  ++gen_;
  std::vector<ValueId> out;
  stack_.assign(operands.begin(), operands.end());
  while (!stack_.empty()) {
    const ValueId v = stack_.back();
    stack_.pop_back();
    if (!fusedValue(v) || stamp_[at(v)] == gen_) continue;
    stamp_[at(v)] = gen_;
    out.push_back(v);
    for (ValueId o : producer_[at(v)]->operands) stack_.push_back(o);
  }
  std::sort(out.begin(), out.end(), [&](ValueId a, ValueId b) { return position_[at(a)] < position_[at(b)]; });
  return out;
}

Kernel Planner::kernelOf(Unit u) {
  Kernel k;
  k.op = u.op;
  k.level = u.level;
  k.bodySize = u.size;
  if (u.roots.empty()) {
    k.kind = codegen::lowering(u.op->kind).lower || lowersWhole(*u.op) ? Kernel::Kind::Lower : Kernel::Kind::Reduction;
    k.fused = fusedFrom(u.op->operands);
    return k;
  }
  k.kind = Kernel::Kind::Loop;
  k.domain = std::move(u.domain);
  k.reduceFrom = u.reduceFrom;
  std::vector<ValueId> operands;
  for (const LoopRoot& r : u.roots) {
    operands.insert(operands.end(), r.op->operands.begin(), r.op->operands.end());
    // An elementwise root computes its own op at the loop's index; an
    // `element` root remaps it.
    if (!r.reduction && codegen::lowering(r.op->kind).has(codegen::kRemapsIndex)) k.flat = false;
  }
  k.fused = fusedFrom(operands);
  // One linear loop unless something computed inline needs a multi-dimensional index.
  for (ValueId v : k.fused)
    if (codegen::lowering(producer_[at(v)]->kind).has(codegen::kRemapsIndex)) k.flat = false;
  k.roots = std::move(u.roots);
  return k;
}

std::string Planner::kernelKey(const Kernel& k, std::vector<ValueId>& buffers) const {
  buffers.clear();
  // The ops the kernel computes, in op order: fused values, then what it writes.
  std::vector<const ir::Op*>& ops = keyOps_;
  std::vector<ValueId>& written = keyWritten_;
  ops.clear();
  written.clear();
  for (ValueId v : k.fused) ops.push_back(producer_[at(v)]);
  if (k.kind == Kernel::Kind::Loop)
    for (const LoopRoot& r : k.roots) {
      ops.push_back(r.op);
      written.push_back(r.value);
    }
  else {
    ops.push_back(k.op);
    written.assign(k.op->results.begin(), k.op->results.end());
  }
  for (const ir::Op* op : ops)
    if (effectful(*op)) return {};
  std::stable_sort(ops.begin(), ops.end(), [](const ir::Op* a, const ir::Op* b) { return a < b; });
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  // Values are named by their place in the kernel: node i (the i-th result
  // computed) or buffer j (the j-th buffer read). keyMark_ tells which one
  // a value has in this key; keyIndex_ holds the index.
  ++keyGen_;
  auto number = [](std::string& key, uint64_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
  auto type = [&](std::string& key, ValueId v) { number(key, typeId_[at(v)]); };
  auto buffer = [&](std::string& key, ValueId v) {
    if (keyMark_[at(v)] != keyGen_ || keyState_[at(v)] != 2) {
      keyMark_[at(v)] = keyGen_;
      keyState_[at(v)] = 2;
      keyIndex_[at(v)] = buffers.size();
      buffers.push_back(v);
    }
    key += 'b';
    number(key, keyIndex_[at(v)]);
  };
  auto ref = [&](std::string& key, ValueId v) {
    if (keyMark_[at(v)] == keyGen_ && keyState_[at(v)] == 1) {
      key += 'n';
      number(key, keyIndex_[at(v)]);
      return;
    }
    buffer(key, v);
    type(key, v);
  };
  std::string key;
  key += static_cast<char>(k.kind);
  number(key, k.domain.size());
  for (int64_t d : k.domain) number(key, static_cast<uint64_t>(d));
  number(key, k.reduceFrom);
  key += static_cast<char>(k.flat);
  std::size_t next = 0;
  for (const ir::Op* op : ops) {
    number(key, static_cast<uint64_t>(op->kind));
    key += '(';
    for (ValueId o : op->operands) ref(key, o);
    key += '{';
    for (const auto& [name, a] : op->attrs.entries()) {
      key += name;
      key += '=';
      appendAttr(key, a);
      key += ';';
    }
    for (const std::string& c : op->callees) {
      key += '@';
      key += c;
      key += ';';
    }
    key += "}->";
    for (ValueId r : op->results) {
      type(key, r);
      keyMark_[at(r)] = keyGen_;
      keyState_[at(r)] = 1;
      keyIndex_[at(r)] = next++;
    }
    key += ')';
  }
  key += "writes";
  for (ValueId w : written) {
    ADJIT_ASSERT(keyMark_[at(w)] == keyGen_ && keyState_[at(w)] == 1, "a kernel writes a value it does not compute");
    key += 'n';
    number(key, keyIndex_[at(w)]);
    buffer(key, w);
  }
  if (k.kind == Kernel::Kind::Loop)
    for (const LoopRoot& r : k.roots) key += r.reduction ? 'r' : 's';
  return key;
}

void Planner::share(FusionPlan& p) const {
  int64_t code = 0;
  for (const Kernel& k : p.kernels) code += codeOf(k);
  const bool small = code <= functionBudget_;
  std::unordered_map<std::string, int> first;
  std::vector<ValueId> buffers;
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    Kernel& k = p.kernels[i];
    if (small && workOf(k) < kShareMinWork) continue;
    std::string key = kernelKey(k, buffers);
    if (key.empty()) continue;
    auto [it, fresh] = first.try_emplace(std::move(key), static_cast<int>(i));
    if (fresh) {
      k.buffers = buffers; // kept in case a later kernel repeats it
      continue;
    }
    Kernel& f = p.kernels[static_cast<std::size_t>(it->second)];
    f.sameAs = it->second;
    k.sameAs = it->second;
    k.buffers = buffers;
  }
  for (Kernel& k : p.kernels)
    if (k.sameAs < 0) k.buffers.clear();
}

void Planner::chunk(FusionPlan& p) const {
  std::vector<ValueId> buffers;
  for (Kernel& k : p.kernels) {
    if (k.kind != Kernel::Kind::Loop || k.domain.empty() || k.group >= 0 || k.epilogueOf >= 0 || k.prologueOf >= 0) continue;
    const int64_t points = num_elements(k.domain), ops = std::max(k.bodySize, 1);
    if (points < kParallelPoints || points * ops < kParallelWork) continue;
    if (k.buffers.empty() && kernelKey(k, buffers).empty()) continue; // side effects
    if (k.buffers.empty()) k.buffers = buffers;
    const bool partials = k.reduceFrom == 0;
    const int64_t rows = k.domain[0];
    const int64_t perRow = points / rows * ops;
    // At most kMaxChunks: partial results live on the stack. A chunk starts
    // at a multiple of 16 elements, so on a cache line for types of 4 bytes
    // and more (buffers start on one), where that makes chunks at most an
    // eighth larger (not 2 chunks of 16 and 4 rows instead of 20 of one):
    // with G1's 2,978 and G2's 977 rows per chunk, the 64-byte loads and
    // stores of most chunks straddled two lines, and one thread took 15% and
    // 10% longer. (Multiples of 64 made B1 5-10% slower than multiples of 16
    // that are not; cause not found.)
    const int64_t align = 16 / std::gcd(int64_t{16}, points / rows);
    int64_t chunkRows = std::max({int64_t{1}, kChunkWork / perRow, (rows + kMaxChunks - 1) / kMaxChunks});
    if (chunkRows >= 8 * align) chunkRows = (chunkRows + align - 1) / align * align;
    const int64_t chunks = (rows + chunkRows - 1) / chunkRows;
    if (chunks < 2) {
      if (k.sameAs < 0) k.buffers.clear();
      continue;
    }
    k.chunks = chunks;
    k.chunkRows = chunkRows;
    k.partials = partials;
  }
}

} // namespace adjit::codegen::planning

namespace adjit::codegen {

using planning::kConcurrentDraftOps;
using planning::Planner;

std::span<const std::string_view> planSteps() { return planning::kStepNames; }

namespace {

FusionPlan planOnce(const ir::Function& f, const PlanOptions& o) {
  // Step groups pay off where the budget's cuts drift against the steps (an
  // LSTM's gradient: 82 distinct loop bodies without them, 54 with); where
  // the budget already cuts in step (a chain of one op kind) they only add
  // leftovers. Draft both ways; finish the one with less code.
  Planner grouped(f, o), free(f, o);
  auto better = [&](FusionPlan a, FusionPlan b) {
    const FusionPlan::Steps steps{grouped.boundaries(), Planner::codeSize(b), Planner::codeSize(a)};
    FusionPlan p = steps.codeWith < steps.codeWithout ? grouped.finish(std::move(b)) : free.finish(std::move(a));
    p.steps = steps;
    return p;
  };
  if (!o.concurrent || f.ops.size() < kConcurrentDraftOps || std::thread::hardware_concurrency() < 2) {
    if (!grouped.findStepGroups()) return grouped.finish(grouped.draft());
    FusionPlan a = free.draft();
    return better(std::move(a), grouped.draft());
  }
  // The draft without step groups is also what a function without them
  // gets, so on a large function it starts on a thread of its own while this
  // one looks for step groups and drafts with them. The two planners share
  // only `f` and `o`, which they read. (An unrolled LSTM's gradient, 145,000
  // ops: 100 ms of its 290 ms of planning.)
  std::optional<FusionPlan> a, b;
  std::exception_ptr error;
  std::thread helper([&] {
    try {
      a = free.draft();
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    if (grouped.findStepGroups()) b = grouped.draft();
  } catch (...) {
    helper.join();
    throw;
  }
  helper.join();
  if (error) std::rethrow_exception(error);
  return b ? better(std::move(*a), std::move(*b)) : free.finish(std::move(*a));
}

/// The loop of `p` that keeps the most reductions: how many, and its ops per point.
std::pair<int, int> mostLoopReductions(const FusionPlan& p) {
  std::pair<int, int> most{0, 0};
  for (const Kernel& k : p.kernels) {
    if (k.kind != Kernel::Kind::Loop) continue;
    const auto n = static_cast<int>(std::count_if(k.roots.begin(), k.roots.end(), [](const LoopRoot& r) { return r.reduction; }));
    if (n > most.first) most = {n, k.bodySize};
  }
  return most;
}

} // namespace

FusionPlan planFusion(const ir::Function& f, const PlanOptions& o) {
  // A loop with more than kMaxLoopReductions sums: the function again, with
  // a budget of that loop's ops per sum times kMaxLoopReductions (sibling
  // sums share their chain, so the sums a loop takes grow with the budget).
  // The first plan is not shown.
  PlanOptions quiet = o;
  quiet.observe = nullptr;
  FusionPlan p = planOnce(f, o.observe ? quiet : o);
  if (const auto [sums, size] = mostLoopReductions(p); sums > planning::kMaxLoopReductions) {
    PlanOptions fewer = o;
    fewer.bodyBudget = std::max(1, size * planning::kMaxLoopReductions / sums);
    if (fewer.bodyBudget < o.bodyBudget) return planOnce(f, fewer);
  }
  return o.observe ? planOnce(f, o) : p;
}

} // namespace adjit::codegen
