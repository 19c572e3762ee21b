// jit/Aot.cpp — object files and C headers for ahead-of-time use.
#include "jit/Aot.h"

#include "autodiff/Reverse.h"
#include "jit/Pipeline.h"
#include "support/Assert.h"
#include "jit/DiskCache.h"
#include "support/Log.h"
#include "ir/Verifier.h"
#include "ir/OpInfo.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

namespace adjit::engine {
namespace {

const char* cType(DType t) {
  switch (t) {
  case DType::f32: return "float";
  case DType::f64: return "double";
  case DType::i32: return "int32_t";
  case DType::i64: return "int64_t";
  case DType::i1: return "uint8_t";
  }
  return "void";
}

std::size_t cAlign(DType t) { return size_of(t); }

std::string describe(const std::vector<Type>& ts, const char* prefix) {
  std::string s;
  for (std::size_t i = 0; i < ts.size(); ++i) s += fmt::format("{}{}{}: {}", i ? ", " : "", prefix, i, ts[i].str());
  return s;
}

/// Parameters "const float* in0, ..., float* out0, ...".
std::string cParams(const std::vector<Type>& in, const std::vector<Type>& out, const char* inPrefix = "in",
                    const char* outPrefix = "out") {
  std::string s;
  for (std::size_t i = 0; i < in.size(); ++i) s += fmt::format("{}const {}* {}{}", s.empty() ? "" : ", ", cType(in[i].dtype), inPrefix, i);
  for (std::size_t i = 0; i < out.size(); ++i) s += fmt::format("{}{}* {}{}", s.empty() ? "" : ", ", cType(out[i].dtype), outPrefix, i);
  return s.empty() ? "void" : s;
}

/// Input numbers as text: "0, 2".
std::string listed(const std::vector<std::size_t>& argnums) {
  std::string s;
  for (std::size_t i : argnums) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s;
}

/// Rejects what cannot run outside the process.
void checkExportable(const ir::Module& m) {
  for (const auto& f : m.functions)
    for (const ir::Op& op : f->ops) {
      if (ir::info(op.kind).has(ir::kHostOnly))
        throw Error(fmt::format("compile: @{} uses {}, which needs the adjit runtime and cannot be compiled ahead of time",
                                f->name, ir::info(op.kind).name), op.loc);
    }
}

/// The C struct holding a bundle's residuals: member offsets as a C compiler lays them out.
struct ResidualLayout {
  std::vector<std::size_t> offsets;
  std::size_t size = 0;
};
ResidualLayout layout(const std::vector<Type>& rs) {
  ResidualLayout l;
  std::size_t align = 1;
  for (const Type& t : rs) {
    const std::size_t a = cAlign(t.dtype);
    align = std::max(align, a);
    l.size = (l.size + a - 1) / a * a;
    l.offsets.push_back(l.size);
    l.size += static_cast<std::size_t>(std::max<int64_t>(t.size(), 1)) * size_of(t.dtype);
  }
  l.size = (l.size + align - 1) / align * align;
  return l;
}

} // namespace

std::string cName(const std::string& name) {
  std::string s;
  for (char c : name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) s = "_" + s;
  return s;
}

namespace {

/// What the header of an object compiled with threads (or with _map entry
/// points) declares: the hook, after what uses it.
constexpr const char* kParallelForThreads = "\n/* Compiled with --threads: large loops are split into chunks.";
constexpr const char* kParallelForMaps = "\n/* The _map functions run their n instances as n chunks, one instance each.";
constexpr const char* kParallelForBoth =
    "\n/* Compiled with --threads: large loops are split into chunks; the _map functions\n"
    " * run their n instances as n chunks, one instance each (whose loops then run in order).";
constexpr const char* kParallelForHook =
    " Set this to run\n"
    " * fn(ctx, c) once for every c in [0, n), on any threads in any order, returning\n"
    " * when all are done (results do not depend on the order). NULL, the default:\n"
    " * the calling thread runs them in order. Shared by every adjit object linked in. */\n"
    "extern void (*adjit_parallel_for_hook)(void (*fn)(void* ctx, int64_t chunk), void* ctx, int64_t n);\n";

/// What the header of an object with bounded while loops declares.
constexpr const char* kLoopLimitHook =
    "\n/* A while loop ran past its max_iterations: the call stops the loop there and\n"
    " * calls this hook (file and line of the loop in the traced program) before it\n"
    " * returns; its results are then not the loop's. NULL, the default: the message\n"
    " * \"adjit: a while_loop ran past its max_iterations\" is written to stderr.\n"
    " * Shared by every adjit object linked in. */\n"
    "extern void (*adjit_loop_limit_hook)(int64_t max_iterations, const char* file, int64_t line, int64_t column);\n";

/// What the header of an object whose while loops are differentiated without
/// max_iterations declares.
constexpr const char* kOutOfMemoryHook =
    "\n/* The residual stack of a while loop's reverse pass (the loop has no max_iterations)\n"
    " * could not grow to `bytes`: the call stops that loop there and calls this hook (file\n"
    " * and line of the loop in the traced program) before it returns; its results are then\n"
    " * not the loop's. NULL, the default: the message \"adjit: out of memory for a while_loop's\n"
    " * residual stack\" is written to stderr. Shared by every adjit object linked in. */\n"
    "extern void (*adjit_out_of_memory_hook)(int64_t bytes, const char* file, int64_t line, int64_t column);\n";

/// Gives the object its own definition of `name` (a report generated code
/// calls with (int64_t, file, line, column)) if it calls one: the user's hook
/// `name`_hook when set, else `message` on stderr. Returns whether it did.
bool defineReport(llvm::Module& lm, const std::string& name, const std::string& message) {
  llvm::Function* fn = lm.getFunction(name);
  if (!fn || !fn->isDeclaration()) return false;
  llvm::LLVMContext& ctx = lm.getContext();
  llvm::Type* ptrTy = llvm::PointerType::get(ctx, 0);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  auto* hook = new llvm::GlobalVariable(lm, ptrTy, false, llvm::GlobalValue::WeakAnyLinkage, llvm::ConstantPointerNull::get(llvm::PointerType::get(ctx, 0)),
                                        name + "_hook");
  hook->setAlignment(llvm::Align(8));
  fn->setLinkage(llvm::GlobalValue::InternalLinkage);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* viaHook = llvm::BasicBlock::Create(ctx, "hook", fn);
  auto* print = llvm::BasicBlock::Create(ctx, "message", fn);
  llvm::IRBuilder<> b(entry);
  llvm::Value* h = b.CreateLoad(ptrTy, hook);
  b.CreateCondBr(b.CreateIsNotNull(h), viaHook, print);
  b.SetInsertPoint(viaHook);
  b.CreateCall(fn->getFunctionType(), h, {fn->getArg(0), fn->getArg(1), fn->getArg(2), fn->getArg(3)});
  b.CreateRetVoid();
  b.SetInsertPoint(print);
  const std::string text = message + "\n";
  llvm::FunctionCallee write = lm.getOrInsertFunction("write", llvm::FunctionType::get(i64, {b.getInt32Ty(), ptrTy, i64}, false));
  b.CreateCall(write, {b.getInt32(2), b.CreateGlobalStringPtr(text, name + ".message"), b.getInt64(text.size())});
  b.CreateRetVoid();
  return true;
}

/// The object's own adjit_parallel_for (what generated code calls): the
/// user's hook when set, else the chunks in order. The hook is a weak null
/// pointer, so several adjit objects (and the user's own definition) link.
/// And its adjit_parallel_threads, which cannot know the hook's threads.
/// With `inInstance` (a thread-local flag the _map functions set while an
/// instance runs), loops inside an instance run in order, never through the
/// hook again: a hook need not support being called from its own chunks.
void defineParallelFor(llvm::Module& lm, llvm::GlobalVariable* inInstance) {
  llvm::LLVMContext& ctx = lm.getContext();
  llvm::Type* ptrTy = llvm::PointerType::get(ctx, 0);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  auto* hook = new llvm::GlobalVariable(lm, ptrTy, false, llvm::GlobalValue::WeakAnyLinkage,
                                        llvm::ConstantPointerNull::get(llvm::PointerType::get(ctx, 0)), "adjit_parallel_for_hook");
  hook->setAlignment(llvm::Align(8));
  auto* chunkTy = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptrTy, i64}, false);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptrTy, ptrTy, i64}, false),
                                    llvm::GlobalValue::InternalLinkage, "adjit_parallel_for", lm);
  llvm::Value *body = fn->getArg(0), *c = fn->getArg(1), *n = fn->getArg(2);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* viaHook = llvm::BasicBlock::Create(ctx, "hook", fn);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", fn);
  auto* step = llvm::BasicBlock::Create(ctx, "step", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "done", fn);
  llvm::IRBuilder<> b(entry);
  llvm::Value* h = b.CreateLoad(ptrTy, hook);
  llvm::Value* useHook = b.CreateIsNotNull(h);
  if (inInstance) {
    llvm::Value* inside = b.CreateLoad(b.getInt8Ty(), b.CreateThreadLocalAddress(inInstance));
    useHook = b.CreateAnd(useHook, b.CreateICmpEQ(inside, b.getInt8(0)));
  }
  b.CreateCondBr(useHook, viaHook, loop);
  b.SetInsertPoint(viaHook);
  b.CreateCall(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptrTy, ptrTy, i64}, false), h, {body, c, n});
  b.CreateRetVoid();
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(i64, 2);
  i->addIncoming(b.getInt64(0), entry);
  b.CreateCondBr(b.CreateICmpSLT(i, n), step, done);
  b.SetInsertPoint(step);
  b.CreateCall(chunkTy, body, {c, i});
  i->addIncoming(b.CreateAdd(i, b.getInt64(1)), step);
  b.CreateBr(loop);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
  // How many threads the hook will use is the user's to know: 0 tells the
  // code to split its work in the ways that do not depend on it.
  auto* threads = llvm::Function::Create(llvm::FunctionType::get(i64, {}, false), llvm::GlobalValue::InternalLinkage,
                                         "adjit_parallel_threads", lm);
  llvm::IRBuilder<> tb(llvm::BasicBlock::Create(ctx, "entry", threads));
  tb.CreateRet(tb.getInt64(0));
}

/// Defines `void <symbol>_map(int64_t n, ptr b0, ...)`: for each i in [0, n)
/// (a chunk of adjit_parallel_for each), `symbol` on the buffers offset by i
/// times their strides in bytes. `inInstance` (if any) is set while an
/// instance runs (see defineParallelFor).
void defineMap(llvm::Module& lm, const std::string& symbol, const std::vector<uint64_t>& strides, llvm::GlobalVariable* inInstance) {
  llvm::LLVMContext& ctx = lm.getContext();
  llvm::Type* ptrTy = llvm::PointerType::get(ctx, 0);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  llvm::Type* voidTy = llvm::Type::getVoidTy(ctx);
  llvm::Function* one = lm.getFunction(symbol);
  ADJIT_ASSERT(one && one->arg_size() == strides.size(), "compile: " + symbol + " takes one pointer per buffer");
  const unsigned nb = static_cast<unsigned>(strides.size());
  // The chunk: instance i of the buffers in the context (an array of pointers).
  auto* chunk = llvm::Function::Create(llvm::FunctionType::get(voidTy, {ptrTy, i64}, false), llvm::GlobalValue::InternalLinkage,
                                       symbol + ".map_instance", lm);
  {
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", chunk));
    llvm::Value* i = chunk->getArg(1);
    std::vector<llvm::Value*> args;
    for (unsigned j = 0; j < nb; ++j) {
      llvm::Value* base = b.CreateLoad(ptrTy, b.CreateConstInBoundsGEP1_64(ptrTy, chunk->getArg(0), j));
      args.push_back(b.CreateInBoundsGEP(b.getInt8Ty(), base, b.CreateMul(i, b.getInt64(strides[j]))));
    }
    llvm::Value* flag = inInstance ? b.CreateThreadLocalAddress(inInstance) : nullptr;
    llvm::Value* saved = flag ? b.CreateLoad(b.getInt8Ty(), flag) : nullptr;
    if (flag) b.CreateStore(b.getInt8(1), flag);
    b.CreateCall(one, args);
    if (flag) b.CreateStore(saved, flag);
    b.CreateRetVoid();
  }
  std::vector<llvm::Type*> params(nb + 1, ptrTy);
  params[0] = i64;
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(voidTy, params, false), llvm::GlobalValue::ExternalLinkage,
                                    symbol + "_map", lm);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", fn);
  auto* run = llvm::BasicBlock::Create(ctx, "run", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "done", fn);
  llvm::IRBuilder<> b(entry);
  llvm::Value* n = fn->getArg(0);
  b.CreateCondBr(b.CreateICmpSGT(n, b.getInt64(0)), run, done);
  b.SetInsertPoint(run);
  llvm::Value* buffers = b.CreateAlloca(ptrTy, b.getInt32(std::max(nb, 1u)));
  for (unsigned j = 0; j < nb; ++j) b.CreateStore(fn->getArg(j + 1), b.CreateConstInBoundsGEP1_64(ptrTy, buffers, j));
  llvm::Function* parallelFor = lm.getFunction("adjit_parallel_for");
  ADJIT_ASSERT(parallelFor, "compile: _map functions need the object's adjit_parallel_for");
  b.CreateCall(parallelFor, {chunk, buffers, n});
  b.CreateBr(done);
  b.SetInsertPoint(done);
  b.CreateRetVoid();
}

/// Bytes of one instance of each buffer of a function's C entry point.
std::vector<uint64_t> bufferBytes(const std::vector<Type>& in, const std::vector<Type>& out) {
  std::vector<uint64_t> b;
  for (const Type& t : in) b.push_back(t.bytes());
  for (const Type& t : out) b.push_back(t.bytes());
  return b;
}

} // namespace

AotResult compileAot(const std::shared_ptr<ir::Module>& m, const AotRequest& request) {
  // A name listed twice is exported once; a --vjp bundle (which includes
  // NAME itself) skips NAME when --fn exports it already.
  AotRequest r = request;
  auto unique = [](std::vector<std::string>& names) {
    std::vector<std::string> kept;
    for (const std::string& n : names)
      if (std::find(kept.begin(), kept.end(), n) == kept.end()) kept.push_back(n);
    names = std::move(kept);
  };
  unique(r.functions);
  unique(r.grads);
  unique(r.jvps);
  unique(r.vjps);
  unique(r.maps);
  // One object, plain C entry points, threads through the header's hook if asked.
  CompileOptions options = r.options;
  options.packed = false;
  options.partition = false;
  options.lapack = false; // objects link libm, libc and pthread only
  // ADJIT_DUMP writes every stage, as for the JIT (inspection always compiles).
  const bool dump = !dumpDirectory().empty();
  std::unique_ptr<Instrumentation> dumper;
  if (dump) dumper = dumpStages("aot." + cName(r.source), "ahead of time " + r.source);
  Compilation c("adjit", "adjit_" + cName(r.headerGuard), options, dumper ? std::vector{dumper.get()} : std::vector<Instrumentation*>{});
  // The disk cache (shared with the JIT) keys on everything the outputs depend
  // on. A module with custom-gradient VJPs still to be traced is not all text.
  const bool cacheable = m->lazyVjps.empty() && !dump;
  CacheKey key;
  if (cacheable) {
    std::string what = "ahead of time";
    for (const std::string& n : r.functions) what += "\nfunction " + n;
    for (const std::string& n : r.grads)
      what += "\ngrad " + n + (r.argnums.count(n) ? " argnums " + listed(r.argnums.at(n)) : "");
    for (const std::string& n : r.jvps) what += "\njvp " + n;
    for (const std::string& n : r.vjps) what += "\nvjp " + n;
    for (const std::string& n : r.maps) what += "\nmap " + n;
    for (const AotRequest::Export& e : r.exports)
      what += fmt::format("\nexport {} as {} ({})\n{}", e.function, e.symbol, e.what, e.preamble);
    what += fmt::format("\nguard {} source {}", r.headerGuard, r.source);
    key = compileKey(*m, what, options);
    if (auto parts = diskLoad(key); parts && parts->size() == 2) {
      if (logEnabled("compile")) logLine("compile", "ahead of time: disk hit");
      return {std::move((*parts)[0]), std::move((*parts)[1])};
    }
  }
  auto need = [&](const std::string& name) -> const ir::Function& {
    const ir::Function* f = m->lookup(name);
    if (!f) {
      std::string names;
      for (const auto& fn : m->functions) names += (names.empty() ? "@" : ", @") + fn->name;
      throw Error("compile: no function named @" + name + " (functions: " + names + ")");
    }
    return *f;
  };
  for (const std::string& n : r.functions) need(n);
  for (const std::string& n : r.maps) need(n);
  for (const AotRequest::Export& e : r.exports) need(e.function);
  auto mapped = [&](const std::string& n) { return std::find(r.maps.begin(), r.maps.end(), n) != r.maps.end(); };
  // --map NAME exports NAME (unless its --vjp bundle does).
  for (const std::string& n : r.maps)
    if (std::find(r.functions.begin(), r.functions.end(), n) == r.functions.end() &&
        std::find(r.vjps.begin(), r.vjps.end(), n) == r.vjps.end())
      r.functions.push_back(n);
  // Generated functions by the names they were given (a module may already
  // hold functions called like @f.grad).
  std::map<std::string, std::string> gradOf, jvpOf;
  std::map<std::string, autodiff::SplitVjp> splitOf;
  for (const std::string& n : r.grads) {
    auto wrt = r.argnums.find(n);
    gradOf[n] = autodiff::gradFunction(m, need(n).name,
                                       wrt == r.argnums.end() ? std::nullopt : std::optional(wrt->second));
  }
  for (const std::string& n : r.jvps) jvpOf[n] = autodiff::jvpFunction(m, need(n).name);
  for (const std::string& n : r.vjps) splitOf[n] = autodiff::splitVjp(m, need(n).name);
  ir::verify(*m);
  checkExportable(*m);
  // Optimise a copy, as the JIT does.
  auto opt = m->clone();
  c.runPasses(*opt, "ahead of time " + r.source);

  llvm::LLVMContext& ctx = c.context();
  llvm::Module& lm = c.module();
  // A _map function's instance runs its loops in order when the object splits them (--threads).
  llvm::GlobalVariable* inInstance = nullptr;
  if (options.threads && !r.maps.empty()) {
    inInstance = new llvm::GlobalVariable(lm, llvm::Type::getInt8Ty(ctx), false, llvm::GlobalValue::InternalLinkage,
                                          llvm::ConstantInt::get(llvm::Type::getInt8Ty(ctx), 0), "adjit_in_map_instance",
                                          nullptr, llvm::GlobalValue::GeneralDynamicTLSModel);
  }
  if (options.threads || !r.maps.empty()) defineParallelFor(lm, inInstance);
  std::string header = fmt::format(
      "/* Generated by adjit from {}. Do not edit.\n"
      " * Buffers are contiguous row-major arrays of the element type; i1 is one byte.\n"
      " * Inputs and outputs must not overlap. Link with -lm -lmvec (glibc's vector math). */\n"
      "#ifndef {}\n#define {}\n\n#include <stdint.h>\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n",
      r.source, r.headerGuard, r.headerGuard);
  if (options.threads || !r.maps.empty())
    header += std::string(!r.maps.empty() ? (options.threads ? kParallelForBoth : kParallelForMaps) : kParallelForThreads) +
              kParallelForHook;
  // NAME_map(n, buffers...) beside NAME(buffers...): each buffer holds n instances, one after another.
  auto exportMap = [&](const std::string& symbol, const std::vector<uint64_t>& strides, const std::string& params) {
    defineMap(lm, symbol, strides, inInstance);
    header += fmt::format("\n/* {}_map: {} for each of n instances; every buffer holds n of {}'s, one after\n"
                          " * another (a leading axis of n). The instances run through adjit_parallel_for_hook. */\n"
                          "void {}_map(int64_t n{});\n",
                          symbol, symbol, symbol, symbol, params == "void" ? std::string() : ", " + params);
  };
  auto exportFunction = [&](const std::string& name, const std::string& symbol, const std::string& what, bool map) {
    const ir::Function& f = *opt->lookup(name);
    c.lower(*opt, name, symbol);
    header += fmt::format("\n/* {}: {}\n * inputs:  {}\n * outputs: {} */\nvoid {}({});\n", symbol, what,
                          describe(f.paramTypes(), "in"), describe(f.resultTypes(), "out"), symbol,
                          cParams(f.paramTypes(), f.resultTypes()));
    if (map) exportMap(symbol, bufferBytes(f.paramTypes(), f.resultTypes()), cParams(f.paramTypes(), f.resultTypes()));
  };
  for (const std::string& n : r.functions) exportFunction(n, cName(n), "@" + n, mapped(n));
  for (const std::string& n : r.grads)
    exportFunction(gradOf.at(n), cName(n) + "_grad",
                   "the gradient of @" + n +
                       (r.argnums.count(n) ? fmt::format(" with respect to its input{} {}", r.argnums.at(n).size() > 1 ? "s" : "",
                                                         listed(r.argnums.at(n)))
                                           : ""),
                   mapped(n));
  for (const std::string& n : r.jvps)
    exportFunction(jvpOf.at(n), cName(n) + "_jvp",
                   "forward mode of @" + n + ": its outputs and their tangents along the inputs' tangents (a tangent per floating input and output)",
                   mapped(n));
  for (const AotRequest::Export& e : r.exports) {
    const ir::Function& f = *opt->lookup(e.function);
    const uint64_t work = c.lower(*opt, e.function, e.symbol, true);
    const std::string params = cParams(f.paramTypes(), f.resultTypes());
    header += e.preamble;
    header += fmt::format("\n/* {}: {}\n * inputs:  {}\n * outputs: {} */\nvoid {}({});\n", e.symbol, e.what,
                          describe(f.paramTypes(), "in"), describe(f.resultTypes(), "out"), e.symbol, params);
    header += fmt::format("\n/* {}_work: {} with the scratch it needs from the caller: {}_WORK_BYTES bytes,\n"
                          " * aligned as malloc aligns (NULL when 0); it allocates nothing. */\n#define {}_WORK_BYTES {}\n"
                          "void {}_work({}, void* work);\n",
                          e.symbol, e.symbol, e.symbol, e.symbol, work, e.symbol, params);
  }
  for (std::size_t b = 0; b < r.vjps.size(); ++b) {
    const std::string& n = r.vjps[b];
    const std::string cn = cName(n);
    if (std::find(r.functions.begin(), r.functions.end(), n) == r.functions.end()) exportFunction(n, cn, "@" + n, mapped(n));
    const autodiff::SplitVjp& split = splitOf.at(n);
    const ir::Function& fwd = *opt->lookup(split.fwd);
    const ir::Function& bwd = *opt->lookup(split.bwd);
    const std::size_t nY = need(n).outputs.size();
    const std::vector<Type> fwdResults = fwd.resultTypes();
    std::vector<Type> ys(fwdResults.begin(), fwdResults.begin() + static_cast<std::ptrdiff_t>(nY));
    std::vector<Type> rs(fwdResults.begin() + static_cast<std::ptrdiff_t>(nY), fwdResults.end());
    ResidualLayout lay = layout(rs);
    // The residual struct, one array member per residual.
    header += fmt::format("\n/* What {}_fwd keeps for {}_bwd ({} bytes). */\ntypedef struct {{\n", cn, cn, lay.size);
    for (std::size_t i = 0; i < rs.size(); ++i)
      header += fmt::format("  {} r{}[{}]; /* {} */\n", cType(rs[i].dtype), i, std::max<int64_t>(rs[i].size(), 1), rs[i].str());
    if (rs.empty()) header += "  char unused;\n";
    header += fmt::format("}} {}_residuals;\n", cn);
    // Lower the split functions, then C wrappers addressing the struct's members.
    c.lower(*opt, split.fwd, cn + "__fwd_impl");
    c.lower(*opt, split.bwd, cn + "__bwd_impl");
    llvm::Type* ptrTy = llvm::PointerType::get(ctx, 0);
    auto wrapper = [&](const std::string& sym, const std::string& impl, std::size_t before, bool residualsFirst, std::size_t after) {
      // residualsFirst: impl(res fields..., rest...) else impl(rest[0..before)..., res fields...)
      std::vector<llvm::Type*> params(before + 1 + after, ptrTy);
      auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), params, false),
                                        llvm::GlobalValue::ExternalLinkage, sym, lm);
      llvm::IRBuilder<> bld(llvm::BasicBlock::Create(ctx, "entry", fn));
      llvm::Value* res = fn->getArg(residualsFirst ? 0 : static_cast<unsigned>(before));
      std::vector<llvm::Value*> fields, args;
      for (std::size_t off : lay.offsets) fields.push_back(bld.CreateConstInBoundsGEP1_64(bld.getInt8Ty(), res, off));
      if (residualsFirst) {
        args = fields;
        for (std::size_t i = 0; i < after; ++i) args.push_back(fn->getArg(static_cast<unsigned>(1 + i)));
      } else {
        for (std::size_t i = 0; i < before; ++i) args.push_back(fn->getArg(static_cast<unsigned>(i)));
        args.insert(args.end(), fields.begin(), fields.end());
      }
      bld.CreateCall(lm.getFunction(impl), args);
      bld.CreateRetVoid();
    };
    const std::size_t nX = fwd.params.size();
    wrapper(cn + "_fwd", cn + "__fwd_impl", nX + nY, false, 0);
    const std::size_t nDy = bwd.params.size() - rs.size();
    wrapper(cn + "_bwd", cn + "__bwd_impl", 0, true, nDy + bwd.outputs.size());
    lm.getFunction(cn + "__fwd_impl")->setLinkage(llvm::GlobalValue::InternalLinkage);
    lm.getFunction(cn + "__bwd_impl")->setLinkage(llvm::GlobalValue::InternalLinkage);
    std::vector<Type> xs = fwd.paramTypes();
    const std::vector<Type> bwdParams = bwd.paramTypes();
    std::vector<Type> dys(bwdParams.begin() + static_cast<std::ptrdiff_t>(rs.size()), bwdParams.end());
    header += fmt::format("\n/* {}_fwd: @{}, also filling the residuals its backward needs\n * inputs:  {}\n * outputs: {} */\n"
                          "void {}_fwd({}, {}_residuals* residuals);\n",
                          cn, n, describe(xs, "in"), describe(ys, "out"), cn, cParams(xs, ys), cn);
    header += fmt::format("\n/* {}_bwd: cotangents of @{}'s inputs from its output cotangents\n * inputs:  residuals, {}\n"
                          " * outputs: {} */\nvoid {}_bwd(const {}_residuals* residuals, {});\n",
                          cn, n, describe(dys, "dy"), describe(bwd.resultTypes(), "dx"), cn, cn,
                          cParams(dys, bwd.resultTypes(), "dy", "dx"));
    if (mapped(n)) {
      // Residuals: an array of n structs.
      std::vector<uint64_t> fwdStrides = bufferBytes(xs, ys);
      const uint64_t structBytes = rs.empty() ? 1 : lay.size; // sizeof, as C lays out the struct
      fwdStrides.push_back(structBytes);
      exportMap(cn + "_fwd", fwdStrides, fmt::format("{}, {}_residuals* residuals", cParams(xs, ys), cn));
      std::vector<uint64_t> bwdStrides{structBytes};
      const std::vector<uint64_t> rest = bufferBytes(dys, bwd.resultTypes());
      bwdStrides.insert(bwdStrides.end(), rest.begin(), rest.end());
      exportMap(cn + "_bwd", bwdStrides, fmt::format("const {}_residuals* residuals, {}", cn, cParams(dys, bwd.resultTypes(), "dy", "dx")));
    }
  }
  if (defineReport(lm, "adjit_loop_limit", "adjit: a while_loop ran past its max_iterations")) header += kLoopLimitHook;
  if (llvm::Function* pushed = lm.getFunction("adjit_stack_pushed"); pushed && pushed->isDeclaration()) {
    // Objects keep no count of residual stack bytes (residual_bytes() is the JIT's).
    pushed->setLinkage(llvm::GlobalValue::InternalLinkage);
    llvm::IRBuilder<>(llvm::BasicBlock::Create(lm.getContext(), "entry", pushed)).CreateRetVoid();
  }
  if (defineReport(lm, "adjit_out_of_memory", "adjit: out of memory for a while_loop's residual stack")) header += kOutOfMemoryHook;
  header += "\n#ifdef __cplusplus\n}\n#endif\n\n#endif\n";
  std::vector<std::string> objects = c.emit();
  ADJIT_ASSERT(objects.size() == 1, "compile: an unpartitioned compilation makes one object");
  AotResult result{std::move(objects[0]), header};
  if (cacheable) {
    diskStore(key, {result.object, result.header});
    if (logEnabled("compile") && !cacheDirectory().empty()) logLine("compile", "ahead of time: disk miss");
  }
  return result;
}

} // namespace adjit::engine
