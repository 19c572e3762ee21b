// autodiff/Passes.cpp — the derivative transforms as passes of the pipeline
// (`adjit opt --passes='grad(f)'`), registered with transforms' registry when
// the library is loaded.
#include "autodiff/Reverse.h"
#include "transforms/Passes.h"

namespace adjit::autodiff {

namespace {

const bool gRegistered = [] {
  // The derivative transforms build functions by tracing, which needs shared
  // ownership of the module; the pipeline's caller owns it.
  auto shared = [](ir::Module& m) { return std::shared_ptr<ir::Module>(&m, [](ir::Module*) {}); };
  for (transforms::Pass& p : std::vector<transforms::Pass>{
      {"grad", "grad(F): add @F.grad (x...) -> (dx...) for a scalar-valued @F",
       [shared](ir::Module& m, const std::string& f) { gradFunction(shared(m), f); }, true},
      {"jvp", "jvp(F): add @F.jvp (x..., dx...) -> (y..., dy...), forward mode",
       [shared](ir::Module& m, const std::string& f) { jvpFunction(shared(m), f); }, true},
      {"vjp", "vjp(F): add @F.vjp (x..., dy...) -> (y..., dx...), forward and backward together",
       [shared](ir::Module& m, const std::string& f) { combinedVjp(shared(m), f); }, true},
      {"vjp-split", "vjp-split(F): add @F.fwd (x...) -> (y..., residuals...) and @F.bwd (residuals..., dy...) -> (dx...)",
       [shared](ir::Module& m, const std::string& f) { splitVjp(shared(m), f); }, true},
      {"linearize", "linearize(F): add @F.primal (x...) -> (y..., residuals...), what reads no tangent, and @F.linear "
                    "(residuals..., dx...) -> (dy...), linear in dx",
       [shared](ir::Module& m, const std::string& f) { splitJvp(shared(m), f); }, true},
  })
    transforms::registerPass(std::move(p));
  return true;
}();

} // namespace

} // namespace adjit::autodiff
