// adjit/jit.h — adjit::jit: trace a C++ function once per argument signature,
// compile it with LLVM, cache the machine code, and run it on host arrays.
#pragma once

#include <adjit/trace.h>

#include <new>
#include <vector>

namespace adjit {

/// How a jitted function is compiled.
struct JitOptions {
  std::string name = "f"; ///< the function's name in IR, logs and dump files
  int opt_level = 2;      ///< 0-3; 2 runs adjit's list of LLVM passes, 1 and 3 LLVM's own -O1/-O3
  std::string cpu = {};   ///< target CPU; empty for the host's
  /// Threads a call may use (the caller's included) for loops with enough
  /// work; 0: $ADJIT_NUM_THREADS, else the hardware's concurrency. Results
  /// are bitwise identical for every count: the split depends on the program.
  int threads = 0;
  /// Tiered compilation: the first call of a signature runs code from LLVM's
  /// fast code generator, while the optimised code compiles on a background
  /// thread and replaces it for later calls (Jitted::wait_optimized waits for
  /// it). Both compute bitwise the same results. Off here, or for the process
  /// with ADJIT_TIERS=0: the first call compiles the optimised code itself.
  /// The disk cache holds only optimised code. See docs/guide/jit-and-caching.md.
  bool tiers = true;
};

/// What one compilation cost; ADJIT_LOG=compile prints the same.
struct CompileEvent {
  /// Where the machine code came from: compiled now, the in-process cache, or the disk cache.
  enum class Cache { miss, memory_hit, disk_hit };
  std::string function;  ///< the function's name
  std::string signature; ///< "(f32[3]) -> (f32[])"
  Cache cache = Cache::miss;
  double trace_ms = 0;   ///< tracing the C++ function
  double key_ms = 0;     ///< printing and hashing the traced IR for the cache key
  double passes_ms = 0;  ///< adjit's IR passes (misses only)
  double llvm_ms = 0;    ///< fusion planning, lowering, LLVM's optimiser and code generator (misses only)
  double load_ms = 0;    ///< linking the machine code into the process
  /// The code the call runs: 1, quickly compiled, while the optimised code
  /// compiles in the background (JitOptions::tiers); 2, optimised.
  int tier = 2;
};

/// Calls `listener` after every compilation in the process, from the
/// compiling thread; an empty function removes it. For monitoring and
/// benchmarks (like jax.monitoring).
void set_compile_listener(std::function<void(const CompileEvent&)> listener);

/// Waits until every optimised tier queued so far in the process is in place
/// (JitOptions::tiers): that of every signature whose first call has
/// returned, whichever jitted object or transform compiled it. For
/// benchmarks and for a loop about to call many functions many times; one
/// object's Jitted::wait_optimized waits for that object's only.
void wait_all_optimized();

/// Every stage of one compilation as text, for debugging.
struct CompiledStages {
  std::string traced_adj;        ///< IR as traced
  std::string optimized_adj;     ///< IR after adjit's passes
  std::string plan;              ///< the fusion plan: buffers, loops and their order
  std::string llvm_ir;           ///< LLVM IR before LLVM's optimisation
  std::string optimized_llvm_ir; ///< LLVM IR after it
  std::string assembly;          ///< machine code
};

namespace detail {

/// One host argument: its data (the caller's, not copied) and type.
struct Leaf {
  const void* data;
  const Type* type;
};

/// Collects the leaves of a call's arguments and a hash of their structure,
/// without allocating for up to kInline leaves.
struct ArgCollector final : LeafSink {
  static constexpr std::size_t kInline = 8;
  std::array<Leaf, kInline> inline_; // only [0, count) is read: not zeroed (a rep stos of 128 bytes per call)
  std::vector<Leaf> heap_;
  std::size_t count = 0;
  std::vector<Tensor> tensors;
  uint64_t hash = 0xcbf29ce484222325ull;
  void mix(uint64_t v) { hash = (hash ^ v) * 0x100000001b3ull; }
  void mixType(const Type& t) {
    mix(static_cast<uint64_t>(t.dtype) + 1);
    mix(t.shape.size());
    for (int64_t d : t.shape) mix(static_cast<uint64_t>(d));
  }
  void push(Leaf l) {
    if (count < kInline) inline_[count] = l;
    else {
      if (heap_.empty()) heap_.assign(inline_.begin(), inline_.end());
      heap_.push_back(l);
    }
    ++count;
  }
  std::span<const Leaf> leaves() const {
    return count <= kInline ? std::span<const Leaf>(inline_.data(), count) : std::span<const Leaf>(heap_);
  }
  void array(const Array& a) override { push({a.raw(), &a.type()}); mixType(a.type()); }
  void scalar(const Type& t, const void* d) override { push({d, &t}); mix(static_cast<uint64_t>(t.dtype) + 1); mix(0); }
  void type(const Type& t) override { mixType(t); }
  void tensor(const Tensor& t) override { tensors.push_back(t); mixType(t.type()); }
  void size(std::size_t n) override { mix(n + 0x51); }
};

/// A call's result Arrays, held in place for up to kInline of them: a call
/// then allocates only their data (none for scalars), not a vector (B0).
class CallResults {
public:
  static constexpr std::size_t kInline = 4;
  CallResults() = default;
  CallResults(const CallResults&) = delete;
  CallResults& operator=(const CallResults&) = delete;
  ~CallResults() { clear(); }
  /// Drops the results held; room for n.
  void reset(std::size_t n) {
    clear();
    if (n > kInline) heap_.reserve(n);
  }
  void push(Array&& a) {
    if (heap_.capacity() > 0) heap_.push_back(std::move(a));
    else new (inline_ + count_ * sizeof(Array)) Array(std::move(a));
    ++count_;
  }
  Array* data() { return heap_.capacity() > 0 ? heap_.data() : std::launder(reinterpret_cast<Array*>(inline_)); }
  std::size_t size() const { return count_; }

private:
  void clear() {
    if (heap_.capacity() == 0)
      for (std::size_t i = 0; i < count_; ++i) data()[i].~Array();
    heap_.clear();
    count_ = 0;
  }
  alignas(Array) unsigned char inline_[kInline * sizeof(Array)];
  std::vector<Array> heap_;
  std::size_t count_ = 0;
};

/// Type-erased core of a jitted function: signature cache, compilation, calls.
class JitCore {
public:
  using Body = std::function<std::vector<Tensor>(std::span<const Tensor>, std::shared_ptr<void>& skeleton)>;
  struct Entry;
  struct Impl;

  explicit JitCore(JitOptions o);
  ~JitCore();
  /// Runs the kernel for the arguments' signature, tracing and compiling it first
  /// if needed. Fills `outs` and returns the output structure's skeleton.
  const std::shared_ptr<void>& call(uint64_t key, std::span<const Leaf> args, const Body& body, CallResults& outs);
  /// Runs the kernel writing its results into `outs` (the caller's buffers,
  /// one per result, of the results' types); allocates nothing for them.
  void callInto(uint64_t key, std::span<const Leaf> args, const Body& body, std::span<const Leaf> outs);
  /// The compiled entry for the arguments' signature (traced and compiled
  /// first if needed), for callers that run its kernel themselves (map).
  /// Valid as long as this JitCore.
  const Entry& compiled(uint64_t key, std::span<const Leaf> args, const Body& body);
  /// Inside another trace: records a call of this function into that trace.
  std::vector<Tensor> callInTrace(uint64_t key, const std::vector<Tensor>& args, const Body& body,
                                  std::shared_ptr<void>& skeleton);
  /// Every stage of compiling for these argument types.
  CompiledStages stages(const std::vector<Type>& types, const Body& body);
  /// The traced module for these argument types.
  Module module(const std::vector<Type>& types, const Body& body);
  std::size_t cacheSize() const;
  /// Blocks until every signature compiled so far runs optimised code.
  void waitOptimized() const;
  const JitOptions& options() const { return opts_; }

private:
  JitOptions opts_;
  std::unique_ptr<Impl> impl_;
};

/// Whether a structure holds a Tensor (then a call joins the current trace).
template <class A> inline constexpr bool hasTensor = anyLeaf<A, IsTensor>();

/// The trace body for f called on arguments like `args`: builds f's tensor
/// arguments from the parameters, calls f, keeps its output structure.
template <class F, class... Args> JitCore::Body traceBody(const F& f, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
  return [&](std::span<const Tensor> params, std::shared_ptr<void>& skel) {
    const Tensor* it = params.data();
    std::tuple<tensor_type_t<Args>...> targs{toTensors(args, it)...};
    R r = std::apply(f, targs);
    std::vector<Tensor> outs;
    appendLeaves(r, outs);
    skel = std::make_shared<R>(std::move(r));
    return outs;
  };
}

/// Runs f compiled for the arguments' signature (Arrays / scalars in any
/// supported structure, or with `inTrace`, Tensors: then a call of f is
/// recorded in the current trace); returns f's output structure of Arrays
/// (or Tensors).
template <bool InTrace, class F, class... Args> auto call(JitCore& core, const F& f, const Args&... args) {
  ArgCollector c;
  (visitLeaves(args, c), ...);
  if constexpr (!std::is_invocable_v<const F&, tensor_type_t<Args>...>) {
    // Known at compile time; the compiler's "required from here" names the
    // caller's line. The other branch is discarded, so this is the only error.
    static_assert(std::is_invocable_v<const F&, tensor_type_t<Args>...>,
                  "jit: the function cannot be called with these arguments (wrong number or structure; "
                  "Arrays and C++ scalars become Tensors, std::vector/std::array/std::tuple/std::pair and structs "
                  "registered with ADJIT_TREE keep their shape)");
    if constexpr (InTrace) return Tensor{};
    else return Array{};
  } else if constexpr (!InTrace && !rebindable<std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>, Array>()) {
    static_assert(InTrace, "jit: the function returns a struct registered with ADJIT_TREE, whose members are Tensors: "
                           "a compiled call returns Arrays, so register a class template with ADJIT_TREE_TEMPLATE "
                           "(template <class T> struct S { T w, b; }) or return a std::tuple");
    return Array{};
  } else {
    using R = std::decay_t<std::invoke_result_t<const F&, tensor_type_t<Args>...>>;
    static const std::size_t structure = typeid(std::tuple<Args...>).hash_code(); // hashes a name: once
    c.mix(structure);
    JitCore::Body body = traceBody(f, args...);
    if constexpr (InTrace) {
      std::shared_ptr<void> skel;
      std::vector<Tensor> outs = core.callInTrace(c.hash, c.tensors, body, skel);
      const Tensor* it = outs.data();
      return rebuild<Tensor>(*static_cast<const R*>(skel.get()), it);
    } else {
      CallResults outs;
      const std::shared_ptr<void>& skel = core.call(c.hash, c.leaves(), body, outs);
      Array* it = outs.data();
      return rebuild<Array>(*static_cast<const R*>(skel.get()), it);
    }
  }
}

/// Collects the output Arrays given to Jitted::into.
struct OutCollector final : LeafSink {
  std::vector<Leaf> leaves;
  void array(const Array& a) override {
    if (a.is_read_only())
      throw Error("into: output " + std::to_string(leaves.size()) + " is a view of const data; it cannot be written");
    leaves.push_back({a.raw(), &a.type()});
  }
  void scalar(const Type&, const void*) override {
    throw Error("into: output " + std::to_string(leaves.size()) + " is a C++ scalar; outputs must be Arrays");
  }
  void type(const Type&) override {}
  void tensor(const Tensor&) override { throw Error("into: outputs must be Arrays, not Tensors"); }
  void size(std::size_t) override {}
};

/// Runs f compiled for the arguments' signature, writing its results into `outs`.
template <class F, class Outs, class... Args> void callInto(JitCore& core, const F& f, Outs& outs, const Args&... args) {
  static_assert(!(hasTensor<Args> || ...), "into: arguments must be Arrays or C++ scalars");
  static_assert(std::is_invocable_v<const F&, tensor_type_t<Args>...>,
                "jit: the function cannot be called with these arguments (wrong number or structure)");
  ArgCollector c;
  (visitLeaves(args, c), ...);
  static const std::size_t structure = typeid(std::tuple<Args...>).hash_code();
  c.mix(structure);
  OutCollector o;
  visitLeaves(outs, o);
  core.callInto(c.hash, c.leaves(), traceBody(f, args...), o.leaves);
}

template <class F, class... Args> auto callCompiled(JitCore& core, const F& f, const Args&... args) {
  return call<false>(core, f, args...);
}

/// How transforms (grad, custom_gradient, ...) are called: with Tensors inside
/// a trace, `self.traced(args...)` joins that trace; with Arrays or scalars it
/// is compiled through `core` and run.
template <class Self, class... Args> auto tracedOrCompiled(const Self& self, JitCore& core, const Args&... args) {
  if constexpr ((hasTensor<Args> || ...)) {
    return self.traced(args...);
  } else {
    return callCompiled(core, [self](const auto&... ts) { return self.traced(ts...); }, args...);
  }
}

} // namespace detail

/// A jitted function (see adjit::jit). Copies share one compilation cache;
/// compiled code is freed when the last copy is destroyed. Thread-safe.
template <class F> class Jitted {
public:
  /// Made by adjit::jit.
  Jitted(F f, JitOptions o) : f_(std::move(f)), core_(std::make_shared<detail::JitCore>(std::move(o))) {}

  /// Called with Arrays or C++ scalars (in any supported structure): runs the
  /// compiled function and returns Arrays in f's output structure. Called with
  /// Tensors inside a trace: records a call to this function in that trace.
  template <class... Args> auto operator()(const Args&... args) const {
    return detail::call<(detail::hasTensor<Args> || ...)>(*core_, f_, args...);
  }

  /// Runs the compiled function and writes its results into `outs`, an
  /// Array or a structure of Arrays like f's results (flattened in the same
  /// order), of the results' types: usually views of the caller's buffers
  /// (Array::view), so nothing is allocated or copied. Outputs must not
  /// overlap each other or the arguments (an Error says which do).
  template <class Outs, class... Args> void into(Outs&& outs, const Args&... args) const {
    detail::callInto(*core_, f_, outs, args...);
  }

  /// The text of every compilation stage for arguments like `args` (Arrays,
  /// scalars or adjit::Type leaves): traced and optimised `.adj`, LLVM IR, assembly.
  template <class... Args> CompiledStages lower(const Args&... args) const {
    return core_->stages(types(args...), detail::traceBody(f_, args...));
  }
  /// The traced module for arguments like `args`.
  template <class... Args> Module trace(const Args&... args) const {
    return core_->module(types(args...), detail::traceBody(f_, args...));
  }
  /// Number of signatures compiled so far.
  std::size_t cache_size() const { return core_->cacheSize(); }
  /// Blocks until every signature compiled so far runs its optimised code
  /// (JitOptions::tiers: until the background compiles have finished; if one
  /// failed, its signature keeps the first tier's code, which computes the
  /// same). For benchmarks timing the optimised code. Returns at once when
  /// tiers are off.
  void wait_optimized() const { core_->waitOptimized(); }

private:
  template <class... Args> static std::vector<Type> types(const Args&... args) {
    detail::TypeCollector tc;
    (detail::visitLeaves(args, tc), ...);
    return tc.types;
  }
  F f_;
  std::shared_ptr<detail::JitCore> core_;
};

/// Compiles `f` (a callable over adjit::Tensor, returning a structure of
/// Tensors) on first call for each argument signature; see Jitted.
template <class F> Jitted<std::decay_t<F>> jit(F&& f, JitOptions o = {}) {
  return Jitted<std::decay_t<F>>(std::forward<F>(f), std::move(o));
}

} // namespace adjit
