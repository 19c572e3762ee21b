// fuzz/fuzz_compile.cpp — libFuzzer target: .adj text through the passes
// (simplify, cse, dce), differentiation (grad(F), vjp-split(F)) and the
// fusion plan and LLVM lowering of its first function. Every input must end
// in a lowered module or adjit::Error; an InternalError or a crash is a finding.
#include "codegen/Stats.h"
#include "transforms/Passes.h"

#include <adjit/module.h>

#include <cstdint>
#include <string_view>

using namespace adjit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Module m = Module::parse(std::string_view(reinterpret_cast<const char*>(data), size));
    m.verify();
    const std::vector<std::string> names = m.function_names();
    if (names.empty()) return 0;
    const std::string& f = names.front();
    transforms::runPipeline(m.impl(), {"simplify", "cse", "dce"}, {.verifyEach = true});
    for (const char* pass : {"grad", "vjp-split"}) {
      std::unique_ptr<ir::Module> copy = m.impl().clone();
      try {
        transforms::runPipeline(*copy, {std::string(pass) + "(" + f + ")"}, {.verifyEach = true});
      } catch (const Error&) { // not differentiable, not scalar-valued, ...
      }
    }
    transforms::runPipeline(m.impl(), transforms::defaultPipeline(), {.verifyEach = true});
    codegen::measureLowering(m.impl(), f);
  } catch (const Error&) {
  }
  return 0;
}
