// transforms/Pipeline.cpp — the pass registry and the pipeline runner. The
// clean-up passes are registered here; a layer above that defines passes
// (autodiff: grad, jvp, vjp, ...) registers its own at start-up.
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "support/Log.h"
#include "transforms/Passes.h"

#include <fmt/format.h>

#include <chrono>

namespace adjit::transforms {

static std::vector<Pass>& registry() {
  static std::vector<Pass> passes = {
      {"fold", "constant folding and algebraic identities (x*1, x+0, ...)", [](ir::Module& m, const std::string&) { fold(m); }},
      {"simplify", "the same as fold", [](ir::Module& m, const std::string&) { fold(m); }},
      {"scale-sum", "the sum of an array times a broadcast number becomes the scaled sum",
       [](ir::Module& m, const std::string&) { scaleSum(m); }},
      {"cse", "common subexpression elimination", [](ir::Module& m, const std::string&) { cse(m); }},
      {"contract", "einsum written with broadcasts (sum of a broadcast product) becomes a batched matmul",
       [](ir::Module& m, const std::string&) { contract(m); }},
      {"pad-sum", "a sum of pads becomes one pad_sum: each group of addends with one region is added into it once",
       [](ir::Module& m, const std::string&) { padSum(m); }},
      {"dce", "dead code elimination", [](ir::Module& m, const std::string&) { dce(m); }},
  };
  return passes;
}

const std::vector<Pass>& allPasses() { return registry(); }

void registerPass(Pass pass) { registry().push_back(std::move(pass)); }

const std::vector<std::string>& defaultPipeline() {
  static const std::vector<std::string> p = {"fold", "scale-sum", "cse", "contract", "pad-sum", "dce"};
  return p;
}

void runPipeline(ir::Module& m, const std::vector<std::string>& names, const PipelineOptions& o) {
  std::vector<std::pair<const Pass*, std::string>> passes;
  for (const std::string& spec : names) {
    std::string name = spec, arg;
    if (auto open = spec.find('('); open != std::string::npos) {
      if (spec.back() != ')') throw Error("malformed pass '" + spec + "': expected name(argument)");
      name = spec.substr(0, open);
      arg = spec.substr(open + 1, spec.size() - open - 2);
    }
    const Pass* pass = nullptr;
    for (const Pass& p : allPasses())
      if (p.name == name) pass = &p;
    if (!pass) {
      std::string known;
      for (const Pass& p : allPasses()) known += (known.empty() ? "" : ", ") + p.name;
      throw Error("unknown pass '" + name + "' (known passes: " + known + ")");
    }
    if (pass->takesArgument && arg.empty()) throw Error("pass '" + name + "' needs a function: " + name + "(NAME)");
    if (!pass->takesArgument && spec != name) throw Error("pass '" + name + "' takes no argument");
    passes.push_back({pass, arg});
  }
  runPasses(m, passes, o);
}

void runPasses(ir::Module& m, const std::vector<std::pair<const Pass*, std::string>>& passes, const PipelineOptions& o) {
  const bool timing = logEnabled("passes");
  for (const auto& [pass, arg] : passes) {
    const std::string spec = arg.empty() ? pass->name : pass->name + "(" + arg + ")";
    auto t0 = std::chrono::steady_clock::now();
    pass->run(m, arg);
    if (timing)
      logLine("passes", fmt::format("{}{}: {:.3f} ms", o.subject.empty() ? "" : o.subject + ": ", spec,
                                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()));
    if (o.verifyEach || ir::verifyAfterPasses()) {
      try {
        ir::verify(m);
      } catch (const Error& e) {
        throw Error("pass '" + spec + "' produced invalid IR: " + e.message(), e.location());
      }
    }
    if (o.printAfterAll && o.print) o.print("// -----// IR after " + spec + " //----- //\n" + ir::print(m));
  }
}

} // namespace adjit::transforms
