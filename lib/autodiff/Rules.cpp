// autodiff/Rules.cpp — the table of derivative rules.
#include "autodiff/Rules.h"

#include <array>

namespace adjit::autodiff {

namespace {
std::array<Rules, ir::kNumOps> gRules{};
} // namespace

const Rules& rules(ir::OpKind k) { return gRules[static_cast<std::size_t>(k)]; }

void define(ir::OpKind k, const Rules& r) { gRules[static_cast<std::size_t>(k)] = r; }

} // namespace adjit::autodiff
