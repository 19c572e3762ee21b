// transforms/Pipeline.cpp — the pass registry and the pipeline runner.
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "support/Log.h"
#include "autodiff/Reverse.h"
#include "transforms/Passes.h"

#include <fmt/format.h>

#include <chrono>

namespace adjit::transforms {

const std::vector<Pass>& allPasses() {
  // Autodiff passes build functions by tracing, which needs shared ownership.
  auto shared = [](ir::Module& m) { return std::shared_ptr<ir::Module>(&m, [](ir::Module*) {}); };
  static const std::vector<Pass> passes = {
      {"fold", "constant folding and algebraic identities (x*1, x+0, ...)", [](ir::Module& m, const std::string&) { fold(m); }},
      {"simplify", "the same as fold", [](ir::Module& m, const std::string&) { fold(m); }},
      {"cse", "common subexpression elimination", [](ir::Module& m, const std::string&) { cse(m); }},
      {"contract", "einsum written with broadcasts (sum of a broadcast product) becomes a batched matmul",
       [](ir::Module& m, const std::string&) { contract(m); }},
      {"pad-sum", "a sum of pads becomes one pad_sum: each group of addends with one region is added into it once",
       [](ir::Module& m, const std::string&) { padSum(m); }},
      {"dce", "dead code elimination", [](ir::Module& m, const std::string&) { dce(m); }},
      {"grad", "grad(F): add @F.grad (x...) -> (dx...) for a scalar-valued @F",
       [shared](ir::Module& m, const std::string& f) { autodiff::gradFunction(shared(m), f); }, true},
      {"jvp", "jvp(F): add @F.jvp (x..., dx...) -> (y..., dy...), forward mode",
       [shared](ir::Module& m, const std::string& f) { autodiff::jvpFunction(shared(m), f); }, true},
      {"vjp", "vjp(F): add @F.vjp (x..., dy...) -> (y..., dx...), forward and backward together",
       [shared](ir::Module& m, const std::string& f) { autodiff::combinedVjp(shared(m), f); }, true},
      {"vjp-split", "vjp-split(F): add @F.fwd (x...) -> (y..., residuals...) and @F.bwd (residuals..., dy...) -> (dx...)",
       [shared](ir::Module& m, const std::string& f) { autodiff::splitVjp(shared(m), f); }, true},
      {"linearize", "linearize(F): add @F.primal (x...) -> (y..., residuals...), what reads no tangent, and @F.linear "
                    "(residuals..., dx...) -> (dy...), linear in dx",
       [shared](ir::Module& m, const std::string& f) { autodiff::splitJvp(shared(m), f); }, true},
  };
  return passes;
}

const std::vector<std::string>& defaultPipeline() {
  static const std::vector<std::string> p = {"fold", "cse", "contract", "pad-sum", "dce"};
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
