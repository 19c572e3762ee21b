// adjit/map.h — adjit::map: a function applied to every slice of its
// arguments along a leading axis whose length is known only at run time,
// compiled once per slice signature and run in parallel (CasADi's map, JAX's
// lax.map without a static length).
#pragma once

#include <adjit/control_flow.h>
#include <adjit/jit.h>

#include <deque>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

namespace adjit {

/// How adjit::map runs a function.
struct MapOptions {
  /// Threads the instances are spread over (the caller's included); 0:
  /// $ADJIT_NUM_THREADS, else the hardware's concurrency. Results are
  /// bitwise identical for every count.
  int threads = 0;
  /// One entry per top-level argument (empty: every argument mapped): 0 maps
  /// every leaf of that argument along its leading axis; std::nullopt passes
  /// the argument whole to every instance. map accepts no other axis.
  std::vector<std::optional<int>> in_axes = {};
  std::string name = "f"; ///< the function's name in IR, logs and dump files
};

namespace detail {

/// One leaf of a mapped call's arguments, as map checks it.
struct MapLeaf {
  const Type* type;
  std::size_t arg;     ///< the top-level argument it belongs to
  bool mapped;         ///< its argument's in_axes entry is 0
  bool scalar = false; ///< a C++ scalar (which has no axis to map)
};

/// Checks a call's leaves against the options (see MapOptions) and returns the
/// number of instances N; `slices` gets each leaf's per-instance type (a mapped
/// leaf without its leading axis). An adjit::Error at `loc` names the argument
/// and what is wrong: in_axes of the wrong length or with an axis other than 0
/// or std::nullopt, a mapped scalar, lengths that disagree, nothing mapped.
int64_t mapInstances(const std::vector<MapLeaf>& leaves, std::size_t arity, const MapOptions& o, const Location& loc,
                     std::vector<Type>& slices);

/// An adjit::Error at `loc` for options no call can use (negative threads,
/// an in_axes entry other than 0 or std::nullopt).
void checkMapOptions(const MapOptions& o, const Location& loc);

/// Collects the leaves of a mapped call's arguments (Arrays, C++ scalars or
/// Tensors) with the vector sizes that fix their structure.
struct MapCollector final : LeafSink {
  std::vector<Leaf> leaves; ///< data and type (Tensors: no data)
  std::vector<MapLeaf> info;
  std::vector<Tensor> tensors;
  std::unique_ptr<std::deque<Type>> tensorTypes; ///< the Tensors' types (stable addresses; made on first use)
  std::size_t arg = 0;
  bool mapped = true;
  uint64_t hash = 0xcbf29ce484222325ull;
  void mix(uint64_t v) { hash = (hash ^ v) * 0x100000001b3ull; }
  void add(const void* data, const Type& t, bool scalar) {
    leaves.push_back({data, &t});
    info.push_back({&t, arg, mapped, scalar});
  }
  void array(const Array& a) override { add(a.raw(), a.type(), false); }
  void scalar(const Type& t, const void* d) override { add(d, t, true); }
  void type(const Type& t) override { add(nullptr, t, false); }
  void tensor(const Tensor& t) override {
    tensors.push_back(t);
    if (!tensorTypes) tensorTypes = std::make_unique<std::deque<Type>>();
    add(nullptr, tensorTypes->emplace_back(t.type()), false);
  }
  void size(std::size_t n) override { mix(n + 0x51); }
};

/// Runs the compiled per-instance function on every instance (lib/api/Map.cpp):
/// `leaves` are the call's leaves, `slices` their per-instance types; returns
/// the outputs (each with a leading axis of n) and f's output skeleton.
const std::shared_ptr<void>& runMapped(JitCore& core, uint64_t key, const std::vector<Leaf>& leaves,
                                       const std::vector<MapLeaf>& info, const std::vector<Type>& slices, int64_t n,
                                       const JitCore::Body& body, int threads, const Location& loc,
                                       std::vector<Array>& outs);

} // namespace detail

/// A function mapped over a leading axis (see adjit::map). Copies share one
/// compilation cache. Thread-safe.
template <class F> class Mapped {
public:
  /// Made by adjit::map.
  Mapped(F f, MapOptions o, std::source_location loc)
      : f_(std::move(f)), opts_(std::move(o)), loc_(Location::from(loc)) {
    detail::checkMapOptions(opts_, loc_);
    core_ = std::make_shared<detail::JitCore>(JitOptions{.name = opts_.name, .threads = opts_.threads});
  }

  /// With Arrays (and C++ scalars passed whole), in any structure jit takes:
  /// f on every slice along the leading axis, the results stacked along a new
  /// leading axis, as Arrays in f's output structure. With Tensors inside a
  /// trace: records a scan over the slices (the length is then known).
  template <class... Args> auto operator()(const Args&... args) const {
    using namespace detail;
    if constexpr (!std::is_invocable_v<const F&, tensor_type_t<Args>...>) {
      static_assert(std::is_invocable_v<const F&, tensor_type_t<Args>...>,
                    "map: the function cannot be called with these arguments (wrong number or structure; each "
                    "argument is passed as one slice of itself, a structure of Tensors)");
      return Array{};
    } else if constexpr ((hasTensor<Args> || ...)) {
      return traced(args...);
    } else if constexpr (!rebindable<std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>, Array>()) {
      static_assert(kFalse<F>, "map: the function returns a struct registered with ADJIT_TREE, whose members are "
                               "Tensors: register a class template with ADJIT_TREE_TEMPLATE or return a std::tuple");
      return Array{};
    } else {
      using R = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
      MapCollector c;
      collect(c, args...);
      std::vector<Type> slices;
      const int64_t n = mapInstances(c.info, sizeof...(Args), opts_, loc_, slices);
      for (const Type& t : slices) {
        c.mix(static_cast<uint64_t>(t.dtype) + 1);
        c.mix(t.shape.size());
        for (int64_t d : t.shape) c.mix(static_cast<uint64_t>(d));
      }
      static const std::size_t structure = typeid(std::tuple<Args...>).hash_code(); // hashes a name: once
      c.mix(structure);
      std::vector<Array> outs;
      const std::shared_ptr<void>& skel =
          runMapped(*core_, c.hash, c.leaves, c.info, slices, n, traceBody(f_, args...), opts_.threads, loc_, outs);
      Array* it = outs.data();
      return rebuild<Array>(*static_cast<const R*>(skel.get()), it);
    }
  }

  /// Number of per-instance signatures compiled so far (one serves every N).
  std::size_t cache_size() const { return core_->cacheSize(); }

  /// Waits until every signature compiled so far runs its optimised code
  /// (JitOptions::tiers; as Jitted::wait_optimized).
  void wait_optimized() const { core_->waitOptimized(); }

private:
  template <class... Args> void collect(detail::MapCollector& c, const Args&... args) const {
    std::size_t i = 0;
    auto one = [&](const auto& a) {
      c.arg = i;
      c.mapped = opts_.in_axes.empty() || i >= opts_.in_axes.size() || opts_.in_axes[i].has_value();
      detail::visitLeaves(a, c);
      ++i;
    };
    (one(args), ...);
  }

  /// Inside a trace: a scan over the mapped leaves, the others captured whole.
  template <class... Args> auto traced(const Args&... args) const {
    using namespace detail;
    static_assert((TensorTree<Args> && ...),
                  "map: inside a trace every argument must be Tensors (or structures of them): make an Array a "
                  "Tensor with constant(a)");
    MapCollector c;
    collect(c, args...);
    std::vector<Type> slices;
    const int64_t n = mapInstances(c.info, sizeof...(Args), opts_, loc_, slices);
    std::vector<Tensor> xs;
    std::array<std::size_t, sizeof...(Args)> first{}; // each argument's first leaf in c.tensors
    for (std::size_t k = 0, arg = 0; arg < sizeof...(Args); ++arg) {
      first[arg] = k;
      while (k < c.info.size() && c.info[k].arg == arg) {
        if (c.info[k].mapped) xs.push_back(c.tensors[k]);
        ++k;
      }
    }
    auto body = [&](const std::tuple<>& carry, const std::vector<Tensor>& x) {
      // Slice leaves come from x in order; an unmapped argument is the outer Tensor itself.
      std::size_t at = 0;
      std::array<std::size_t, sizeof...(Args)> offset{};
      for (std::size_t arg = 0; arg < sizeof...(Args); ++arg) {
        offset[arg] = at;
        for (std::size_t k = first[arg]; k < c.info.size() && c.info[k].arg == arg; ++k) at += c.info[k].mapped;
      }
      auto pick = [&](std::size_t arg, const auto& a) {
        using A = std::decay_t<decltype(a)>;
        return c.info.empty() || !isMapped(c, arg) ? A(a) : rebuildLike(a, x, offset[arg]);
      };
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::pair{carry, f_(pick(I, args)...)};
      }(std::index_sequence_for<Args...>{});
    };
    return scan(body, std::tuple<>{}, xs, ScanOptions{.length = n}).second;
  }

  static bool isMapped(const detail::MapCollector& c, std::size_t arg) {
    for (const detail::MapLeaf& l : c.info)
      if (l.arg == arg) return l.mapped;
    return false;
  }

  F f_;
  MapOptions opts_;
  Location loc_;
  std::shared_ptr<detail::JitCore> core_;
};

/// map(f, {.threads, .in_axes})(xs...): f applied to every slice of its
/// arguments along their leading axis, of any length N (the same for every
/// mapped argument), each output leaf stacked along a new leading axis of N.
/// f is traced and compiled once per per-instance signature, never per N;
/// the instances run in parallel on adjit's threads (each on one thread), and
/// the results are bitwise equal to a loop of jit(f) calls on the slices.
/// N = 0 gives empty outputs without running f. Errors (lengths that disagree,
/// bad in_axes) name this line. Inside a trace, with Tensors, it records a
/// scan over the slices (JAX's lax.map); vmap batches instead.
template <class F>
Mapped<std::decay_t<F>> map(F&& f, MapOptions o = {}, std::source_location loc = std::source_location::current()) {
  return Mapped<std::decay_t<F>>(std::forward<F>(f), std::move(o), loc);
}

} // namespace adjit
