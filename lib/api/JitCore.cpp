// jit/JitCore.cpp — the signature cache behind adjit::jit: traces and compiles
// once per argument signature, then calls the kernel. Calls from many threads
// share entries; each signature is compiled once, outside the cache's lock.
#include "api/JitEntry.h"
#include "jit/Engine.h"
#include "trace/Tracer.h"

#include <fmt/format.h>

#include <adjit/jit.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace adjit::detail {

const Type& scalar_type(DType t) {
  static const Type types[] = {{DType::f32, {}}, {DType::f64, {}}, {DType::i32, {}}, {DType::i64, {}}, {DType::i1, {}}};
  return types[static_cast<int>(t)];
}

static bool matches(const JitCore::Entry& e, std::span<const Leaf> args) {
  if (e.types.size() != args.size()) return false;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (e.types[i] != *args[i].type) return false;
  return true;
}

JitCore::JitCore(JitOptions o) : opts_(std::move(o)), impl_(std::make_unique<Impl>()) {
  if (opts_.threads < 0) throw Error("jit: threads must be 0 (the default) or positive, got " + std::to_string(opts_.threads));
}
JitCore::~JitCore() = default;

static std::vector<Type> typesOf(std::span<const Leaf> args) {
  std::vector<Type> t;
  t.reserve(args.size());
  for (const Leaf& a : args) t.push_back(*a.type);
  return t;
}

/// The compiled entry for this signature. The user's function is traced and
/// compiled without holding the lock (it may call other jitted functions, or
/// block on threads that do); concurrent callers of the same signature wait for
/// that one compilation and share its result or its error.
static JitCore::Entry* entryFor(JitCore::Impl& impl, const JitOptions& opts, uint64_t key, std::span<const Leaf> args,
                                const JitCore::Body& body) {
  std::unique_lock lock(impl.m);
  auto& bucket = impl.entries[key];
  for (const auto& c : bucket) {
    if (!matches(*c, args)) continue;
    JitCore::Entry* e = c.get();
    if (!e->done) {
      if (e->compiler == std::this_thread::get_id())
        throw Error("jit: function '" + opts.name + "' called itself, with the same argument types, while being traced");
      std::shared_future<void> ready = e->ready;
      lock.unlock();
      ready.get(); // the compiling thread's error, if it failed
    }
    return e;
  }
  auto owned = std::make_unique<JitCore::Entry>();
  JitCore::Entry* e = owned.get();
  e->key = key;
  e->types = typesOf(args);
  e->compiler = std::this_thread::get_id();
  std::promise<void> promise;
  e->ready = promise.get_future().share();
  bucket.push_back(std::move(owned));
  lock.unlock();
  try {
    auto t0 = std::chrono::steady_clock::now();
    Module traced = traceModule(opts.name, e->types, [&](std::span<const Tensor> ps) { return body(ps, e->skeleton); },
                                &e->variables);
    double traceMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    e->kernel = engine::compile({.module = traced.impl(), .function = opts.name, .options = {.optLevel = opts.opt_level, .cpu = opts.cpu},
                                  .traceMs = traceMs, .spent = &traced.impl(), .tiers = opts.tiers});
  } catch (...) {
    // Waiters hold their own copy of the future: they get this error and never
    // touch the entry, which is removed so a later call tries again.
    std::exception_ptr error = std::current_exception();
    {
      std::lock_guard relock(impl.m);
      auto& b = impl.entries[key];
      b.erase(std::find_if(b.begin(), b.end(), [&](const auto& c) { return c.get() == e; }));
    }
    promise.set_exception(error);
    std::rethrow_exception(error);
  }
  {
    std::lock_guard relock(impl.m);
    e->done = true;
  }
  promise.set_value();
  return e;
}

/// The entry for the arguments' signature: the last one used, or traced and
/// compiled now (entryFor).
static JitCore::Entry* entryOf(JitCore::Impl& impl, const JitOptions& opts, uint64_t key, std::span<const Leaf> args,
                               const JitCore::Body& body) {
  JitCore::Entry* e = impl.last.load(std::memory_order_acquire);
  if (!e || e->key != key || !matches(*e, args)) {
    e = entryFor(impl, opts, key, args, body);
    impl.last.store(e, std::memory_order_release);
  }
  return e;
}

/// Runs the entry's kernel writing its user outputs into `outs`. Variables
/// the function reads are passed without copying, under their locks (taken
/// in one global order), and the values it assigns are written back.
static void runEntry(const JitCore::Entry& e, std::span<const Leaf> args, std::span<void* const> userOuts, int threads) {
  if (e.variables.reads.empty()) return engine::runInto(*e.kernel, args, userOuts, threads);
  std::vector<void*> outs(userOuts.begin(), userOuts.end());
  std::vector<VariableState*> locked;
  for (const auto& v : e.variables.reads) locked.push_back(v.get());
  std::sort(locked.begin(), locked.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  for (VariableState* v : locked) locks.emplace_back(v->m);
  std::vector<Leaf> all(args.begin(), args.end());
  for (const auto& v : e.variables.reads) all.push_back({v->value.raw(), &v->value.type()});
  std::vector<Array> written;
  written.reserve(e.variables.writes.size());
  for (std::size_t i = e.kernel->outputs.size() - e.variables.writes.size(); i < e.kernel->outputs.size(); ++i) {
    written.push_back(Array::uninitialized(e.kernel->outputs[i]));
    outs.push_back(written.back().raw());
  }
  engine::runInto(*e.kernel, all, outs, threads);
  for (std::size_t i = 0; i < e.variables.writes.size(); ++i) e.variables.writes[i]->value = std::move(written[i]);
}

const JitCore::Entry& JitCore::compiled(uint64_t key, std::span<const Leaf> args, const Body& body) {
  return *entryOf(*impl_, opts_, key, args, body);
}

const std::shared_ptr<void>& JitCore::call(uint64_t key, std::span<const Leaf> args, const Body& body, CallResults& outs) {
  const Entry* e = entryOf(*impl_, opts_, key, args, body);
  const std::size_t nUser = e->kernel->outputs.size() - e->variables.writes.size();
  outs.reset(nUser);
  constexpr std::size_t kInline = 8; // a call allocates only its results
  void* inlinePtrs[kInline];
  std::vector<void*> heapPtrs(nUser > kInline ? nUser : 0);
  void** ptrs = nUser > kInline ? heapPtrs.data() : inlinePtrs;
  for (std::size_t i = 0; i < nUser; ++i) {
    outs.push(Array::uninitialized(e->kernel->outputs[i]));
    ptrs[i] = outs.data()[i].raw();
  }
  runEntry(*e, args, std::span<void* const>(ptrs, nUser), opts_.threads);
  return e->skeleton;
}

void JitCore::callInto(uint64_t key, std::span<const Leaf> args, const Body& body, std::span<const Leaf> outs) {
  const Entry* e = entryOf(*impl_, opts_, key, args, body);
  const std::size_t nUser = e->kernel->outputs.size() - e->variables.writes.size();
  if (outs.size() != nUser)
    throw Error(fmt::format("{}.into: the function returns {} array{}, but {} output{} given", opts_.name, nUser,
                            nUser == 1 ? "" : "s", outs.size(), outs.size() == 1 ? " was" : "s were"));
  for (std::size_t i = 0; i < nUser; ++i)
    if (*outs[i].type != e->kernel->outputs[i])
      throw Error(fmt::format("{}.into: output {} is {}, but the function returns {} there", opts_.name, i,
                              outs[i].type->str(), e->kernel->outputs[i].str()));
  // Compiled code assumes its buffers do not overlap: an output sharing
  // bytes with an argument or another output would give wrong values.
  auto overlap = [](const Leaf& a, const Leaf& b) {
    const auto* p = static_cast<const char*>(a.data);
    const auto* q = static_cast<const char*>(b.data);
    return a.type->bytes() > 0 && b.type->bytes() > 0 && p < q + b.type->bytes() && q < p + a.type->bytes();
  };
  for (std::size_t i = 0; i < nUser; ++i) {
    for (std::size_t j = 0; j < args.size(); ++j)
      if (overlap(outs[i], args[j]))
        throw Error(fmt::format("{}.into: output {} overlaps argument {}; buffers must not overlap", opts_.name, i, j));
    for (std::size_t j = 0; j < i; ++j)
      if (overlap(outs[i], outs[j]))
        throw Error(fmt::format("{}.into: outputs {} and {} overlap; buffers must not overlap", opts_.name, j, i));
  }
  std::vector<void*> ptrs;
  for (const Leaf& o : outs) ptrs.push_back(const_cast<void*>(o.data));
  runEntry(*e, args, ptrs, opts_.threads);
}

std::vector<Tensor> JitCore::callInTrace(uint64_t key, const std::vector<Tensor>& args, const Body& body,
                                         std::shared_ptr<void>& skeleton) {
  TraceState* outer = currentTrace();
  if (!outer) throw Error("jit: called with Tensors outside of a trace");
  std::vector<ir::ValueId> ids;
  std::vector<Type> types;
  for (const Tensor& t : args) {
    ids.push_back(valueOf(t, opts_.name, {}));
    types.push_back(t.type());
  }
  auto slot = std::make_pair(static_cast<const void*>(this), key);
  auto it = outer->callees.find(slot);
  if (it == outer->callees.end()) {
    std::shared_ptr<void> skel;
    std::string name;
    {
      TraceScope inner(outer->module, opts_.name);
      name = inner.state().fn->name;
      std::vector<Tensor> ps;
      for (const Type& t : types) ps.push_back(inner.param(t));
      inner.finish(body(ps, skel));
    }
    it = outer->callees.emplace(slot, std::make_pair(name, skel)).first;
  }
  skeleton = it->second.second;
  std::vector<ir::ValueId> results = outer->builder.create(ir::OpKind::Call, ids, {}, {it->second.first});
  std::vector<Tensor> outs;
  for (ir::ValueId r : results) outs.push_back(wrap(*outer, r));
  return outs;
}

Module JitCore::module(const std::vector<Type>& types, const Body& body) {
  std::shared_ptr<void> skel;
  TracedVariables vars;
  return traceModule(opts_.name, types, [&](std::span<const Tensor> ps) { return body(ps, skel); }, &vars);
}

CompiledStages JitCore::stages(const std::vector<Type>& types, const Body& body) {
  Module traced = module(types, body);
  CompiledStages s;
  engine::compile({.module = traced.impl(), .function = opts_.name, .options = {.optLevel = opts_.opt_level, .cpu = opts_.cpu}}, &s);
  return s;
}

void JitCore::waitOptimized() const {
  std::vector<std::shared_ptr<engine::Kernel>> kernels;
  {
    std::lock_guard lock(impl_->m);
    for (const auto& [key, bucket] : impl_->entries)
      for (const auto& e : bucket)
        if (e->done) kernels.push_back(e->kernel);
  }
  for (const auto& k : kernels) engine::waitOptimized(*k);
}

std::size_t JitCore::cacheSize() const {
  std::lock_guard lock(impl_->m);
  std::size_t n = 0;
  for (const auto& [key, bucket] : impl_->entries)
    for (const auto& e : bucket) n += e->done;
  return n;
}

} // namespace adjit::detail
