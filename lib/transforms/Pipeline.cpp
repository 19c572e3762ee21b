// transforms/Pipeline.cpp — the pass registry and the pipeline runner.
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "support/Log.h"
#include "transforms/Passes.h"

#include <fmt/format.h>

#include <chrono>

namespace adjit::transforms {

const std::vector<Pass>& allPasses() {
  static const std::vector<Pass> passes = {
      {"fold", "constant folding and algebraic identities (x*1, x+0, ...)", fold},
      {"cse", "common subexpression elimination", cse},
      {"dce", "dead code elimination", dce},
  };
  return passes;
}

const std::vector<std::string>& defaultPipeline() {
  static const std::vector<std::string> p = {"fold", "cse", "dce"};
  return p;
}

void runPipeline(ir::Module& m, const std::vector<std::string>& names, const PipelineOptions& o) {
  const bool timing = logEnabled("passes");
  for (const std::string& name : names) {
    const Pass* pass = nullptr;
    for (const Pass& p : allPasses())
      if (p.name == name) pass = &p;
    if (!pass) {
      std::string known;
      for (const Pass& p : allPasses()) known += (known.empty() ? "" : ", ") + p.name;
      throw Error("unknown pass '" + name + "' (known passes: " + known + ")");
    }
    auto t0 = std::chrono::steady_clock::now();
    pass->run(m);
    if (timing)
      logLine("passes", fmt::format("{}: {:.3f} ms", name,
                                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    if (ir::verifyAfterPasses()) ir::verify(m);
    if (o.printAfterAll && o.print) o.print("// -----// IR after " + name + " //----- //\n" + ir::print(m));
  }
}

} // namespace adjit::transforms
