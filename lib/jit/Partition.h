// jit/Partition.h — splits an LLVM module into parts that are optimised and
// compiled on threads of their own (jit/Engine.cpp), keeping together the
// functions the optimiser should see together.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace adjit::engine {

/// The part (0 to parts-1) of each function `lm` defines, by name; empty when
/// they cannot be spread over two parts. Functions go to parts whole. One
/// the inliner may inline stays in its caller's part when it is called
/// inside a loop or by a function so called (a scan's step and what the step
/// calls), so that the optimiser still inlines it. Other functions (an LLVM
/// function of a fusion plan, a chunk the thread pool runs, code called from
/// several places, hence never inlined) lose nothing by living apart.
/// Clusters of functions are dealt out largest first to the part with the
/// fewest instructions so far.
std::map<std::string, unsigned> assignParts(llvm::Module& lm, unsigned parts);

/// Splits `lm` as assignParts says and returns each part as bitcode; returns
/// none when assignParts does. Symbols a part shares with another become
/// hidden globals prefixed with `symbol`, so that kernels loaded side by
/// side never clash; `lm` is changed so.
std::vector<std::string> splitModule(llvm::Module& lm, unsigned parts, const std::string& symbol);

} // namespace adjit::engine
