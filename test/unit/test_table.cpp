// test/unit/test_table.cpp — walks the op table: every op has every hook.
#include "ops/OpTable.h"

#include <doctest/doctest.h>

#include <set>

using namespace adjit;

TEST_CASE("every op has its hooks") {
  for (ir::OpKind k : ops::allOps()) {
    const ops::OpInfo& info = ops::info(k);
    INFO("op " << info.name);
    CHECK(!info.name.empty());
    CHECK(bool(info.hooks.infer));
    CHECK(bool(info.hooks.eval));
    CHECK(bool(info.hooks.fold));
    // Exactly one lowering hook, and `scalar` exactly for elementwise ops.
    int lowerings = (info.hooks.scalar != nullptr) + (info.hooks.element != nullptr) + (info.hooks.lower != nullptr) +
                    (info.hooks.reduce != nullptr);
    CHECK(lowerings == 1);
    CHECK((info.hooks.scalar != nullptr) == info.has(ops::kElementwise));
    // Ops that read operand buffers must write whole results.
    if (info.has(ops::kMaterializesOperands)) CHECK(bool(info.hooks.lower));
    // VJP and JVP rules unless the op's results carry no gradient.
    if (!info.has(ops::kNonDifferentiable)) CHECK(bool(info.hooks.vjp));
    if (!info.has(ops::kNonDifferentiable)) CHECK(bool(info.hooks.jvp));
    // The mnemonic parses back to the same kind.
    REQUIRE(ops::lookup(info.name).has_value());
    CHECK(*ops::lookup(info.name) == k);
  }
}

TEST_CASE("mnemonics are unique and unknown names are rejected") {
  CHECK(!ops::lookup("no_such_op").has_value());
  std::set<std::string_view> names;
  for (ir::OpKind k : ops::allOps()) CHECK(names.insert(ops::info(k).name).second);
}
