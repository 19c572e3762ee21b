// codegen/VectorMath.cpp — maps the scalar libm functions op lowerings call
// (each op declares its own in `.libm`, in its op-table block) to glibc's
// libmvec vector variants, by ISA: SSE (b), AVX2 (d) and AVX-512 (e).
// Registered with TargetLibraryInfo so the loop vectorizer calls
// `_ZGVdN8v_tanhf` instead of eight `tanhf` calls.
#include "codegen/VectorMath.h"

#include "ir/OpInfo.h"
#include "codegen/Lowering.h"

#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/TargetParser/Triple.h>

#include <deque>
#include <map>
#include <string>

namespace adjit::codegen {
namespace {

/// Every libm function some op declares, once each, by name.
std::vector<codegen::MathFunction> mathFunctions() {
  std::map<std::string, codegen::MathFunction> byName;
  for (ir::OpKind k : ir::allOps())
    if (const codegen::MathFunction& m = codegen::lowering(k).libm; m.name) byName.emplace(m.name, m);
  std::vector<codegen::MathFunction> out;
  for (const auto& [name, m] : byName) out.push_back(m);
  return out;
}

struct Isa {
  char letter;
  int bits;
  const char* feature;
};
constexpr Isa kIsas[] = {{'b', 128, "+sse2"}, {'d', 256, "+avx2"}, {'e', 512, "+avx512f"}};

} // namespace

void addVectorMath(llvm::TargetLibraryInfoImpl& tlii, const llvm::Triple& triple, const llvm::MCSubtargetInfo& sti) {
  if (triple.getArch() != llvm::Triple::x86_64 || !triple.isOSGlibc()) return;
  // VecDesc holds StringRefs: keep the strings alive for the process.
  static std::deque<std::string> strings;
  static std::mutex m;
  std::lock_guard lock(m);
  auto keep = [](std::string s) -> llvm::StringRef { return strings.emplace_back(std::move(s)); };
  static const std::vector<codegen::MathFunction> kMathFunctions = mathFunctions();
  std::vector<llvm::VecDesc> descs;
  for (const Isa& isa : kIsas) {
    // The subtarget, not the feature string: a named CPU (x86-64-v3) implies
    // features the string does not list.
    if (isa.letter != 'b' && !sti.checkFeatures(isa.feature)) continue;
    for (const codegen::MathFunction& fn : kMathFunctions) {
      if (!fn.vector) continue;
      for (bool f32 : {true, false}) {
        int lanes = isa.bits / (f32 ? 32 : 64);
        std::string params(static_cast<std::size_t>(fn.arity), 'v');
        std::string scalar = std::string(fn.name) + (f32 ? "f" : "");
        std::string vec = fmt::format("_ZGV{}N{}{}_{}", isa.letter, lanes, params, scalar);
        std::string prefix = fmt::format("_ZGV_LLVM_N{}{}", lanes, params);
        auto ec = llvm::ElementCount::getFixed(static_cast<unsigned>(lanes));
        descs.emplace_back(keep(scalar), keep(vec), ec, false, keep(prefix));
        if (fn.hasIntrinsic)
          descs.emplace_back(keep(fmt::format("llvm.{}.{}", fn.name, f32 ? "f32" : "f64")), keep(vec), ec, false,
                             keep(prefix));
      }
    }
  }
  tlii.addVectorizableFunctions(descs);
}

} // namespace adjit::codegen
