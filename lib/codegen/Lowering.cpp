// codegen/Lowering.cpp — the table of lowerings.
#include "codegen/Lowering.h"

#include <array>

namespace adjit::codegen {

namespace {
std::array<Lowering, ir::kNumOps> gLowerings{};
} // namespace

const Lowering& lowering(ir::OpKind k) { return gLowerings[static_cast<std::size_t>(k)]; }

void define(ir::OpKind k, const Lowering& l) { gLowerings[static_cast<std::size_t>(k)] = l; }

} // namespace adjit::codegen
