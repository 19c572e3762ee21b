// codegen/VectorMath.cpp — the one table mapping scalar libm functions (as the
// op lowerings call them) to glibc's libmvec vector variants, by ISA:
// SSE (b), AVX2 (d) and AVX-512 (e). Registered with TargetLibraryInfo so the
// loop vectorizer calls `_ZGVdN8v_tanhf` instead of eight `tanhf` calls.
#include "codegen/VectorMath.h"

#include <llvm/TargetParser/Triple.h>

#include <deque>
#include <string>

namespace adjit::codegen {
namespace {

struct MathFn {
  const char* name;
  int arity;
  bool hasIntrinsic; ///< llvm.<name>.f32/.f64 exists and maps the same way
};

constexpr MathFn kMathFns[] = {
    {"exp", 1, true},   {"log", 1, true},   {"log1p", 1, false}, {"expm1", 1, false},
    {"sin", 1, true},   {"cos", 1, true},   {"tanh", 1, false},  {"pow", 2, true},
};

struct Isa {
  char letter;
  int bits;
  const char* feature;
};
constexpr Isa kIsas[] = {{'b', 128, "+sse2"}, {'d', 256, "+avx2"}, {'e', 512, "+avx512f"}};

} // namespace

void addVectorMath(llvm::TargetLibraryInfoImpl& tlii, const llvm::Triple& triple, llvm::StringRef features) {
  if (triple.getArch() != llvm::Triple::x86_64 || !triple.isOSGlibc()) return;
  // VecDesc holds StringRefs: keep the strings alive for the process.
  static std::deque<std::string> strings;
  static std::mutex m;
  std::lock_guard lock(m);
  auto keep = [](std::string s) -> llvm::StringRef { return strings.emplace_back(std::move(s)); };
  std::vector<llvm::VecDesc> descs;
  for (const Isa& isa : kIsas) {
    if (isa.letter != 'b' && !features.contains(isa.feature)) continue;
    for (const MathFn& fn : kMathFns) {
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
