// transforms/Passes.h — IR-to-IR passes over whole modules, and the pipeline
// that runs a list of them by name (verifying after each in debug builds).
#pragma once

#include "ir/IR.h"

#include <functional>
#include <string>
#include <vector>

namespace adjit::transforms {

/// Replaces ops whose operands are all constants by constants (via the op's
/// `eval`), and applies each op's `fold` identities (x*1 -> x, ...).
/// Before: verified IR. After: same results; dead ops may remain (run dce).
void fold(ir::Module& m);
/// Merges ops without side effects (ir::Effects: a call is effectful if its
/// callee is) with the same kind, operands, callees and attributes.
/// Before: verified IR. After: each such value computed once.
void cse(ir::Module& m);
/// Rewrites reduce_sum(mul(broadcast_to(a), broadcast_to(b))) (einsum written
/// with broadcasting) into transposes, reshapes and a batched matmul.
/// Before: verified IR. After: same results; replaced ops may be dead (run dce).
void contract(ir::Module& m);
/// Rewrites a sum of pads (add chains whose addends are zero-padded values)
/// into one pad_sum: addends with the same region are summed first, and each
/// group is added into its region once, not tested at every element.
/// Before: verified IR. After: same sums in another order of additions;
/// replaced adds and pads may be dead (run dce).
void padSum(ir::Module& m);
/// Rewrites reduce_sum(c * x) (c one number broadcast; negations between
/// them allowed) into c * reduce_sum(x).
/// Before: verified IR. After: same sums, scaled after summing; replaced ops
/// may be dead (run dce), new sums may repeat earlier ones (run cse).
void scaleSum(ir::Module& m);
/// Removes ops without side effects whose results are unused.
/// Before: verified IR. After: every remaining such op's result is used.
void dce(ir::Module& m);

struct Pass {
  std::string name;
  std::string description;
  /// `arg` is the text between parentheses for passes written `name(arg)`.
  std::function<void(ir::Module&, const std::string& arg)> run;
  bool takesArgument = false;
};

/// Every registered pass, in the order `--help` lists them.
const std::vector<Pass>& allPasses();
/// Adds a pass to the registry: a layer that defines passes calls it from a
/// static initialiser, before any pipeline runs (autodiff/Passes.cpp).
void registerPass(Pass pass);

struct PipelineOptions {
  bool printAfterAll = false;                 ///< print the IR after each pass
  bool verifyEach = false;                    ///< verify after each pass (always in debug builds)
  std::function<void(const std::string&)> print; ///< where printed IR goes
  std::string subject; ///< what the passes run for (a function and its signature): starts each ADJIT_LOG=passes line
};

/// Runs passes by name, e.g. {"vjp(f)", "fold", "cse", "dce"}. Unknown names raise
/// adjit::Error listing the known ones.
void runPipeline(ir::Module& m, const std::vector<std::string>& passes, const PipelineOptions& o = {});

/// Runs the given passes in order (with their arguments), as runPipeline does.
void runPasses(ir::Module& m, const std::vector<std::pair<const Pass*, std::string>>& passes, const PipelineOptions& o = {});

/// The default clean-up pipeline run before code generation.
const std::vector<std::string>& defaultPipeline();

/// Replaces every use of each value v with `map[v]` (where map[v] != v).
void replaceUses(ir::Function& f, const std::vector<ir::ValueId>& map);

} // namespace adjit::transforms
