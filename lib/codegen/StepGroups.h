// codegen/StepGroups.h — where the planner cuts unrolled loops so that
// every group of steps plans alike (used by the planner, Planner.h).
#pragma once

#include "ir/IR.h"

#include <cstddef>
#include <span>
#include <vector>

namespace adjit::codegen {

/// The users of every value of a function, in op order, in one array (one
/// allocation, not one per value).
struct Users {
  std::vector<std::size_t> begin; ///< per value v: its users are ops[begin[v], begin[v + 1])
  std::vector<const ir::Op*> ops;
  std::span<const ir::Op* const> of(ir::ValueId v) const {
    const auto i = static_cast<std::size_t>(v);
    return {ops.data() + begin[i], ops.data() + begin[i + 1]};
  }
  static Users of(const ir::Function& f);
};

struct StepGroups {
  std::vector<ir::ValueId> carries; ///< values to store: they cross a boundary
  std::vector<int> cuts;            ///< op positions of the boundaries, ascending
  std::size_t work = 0;             ///< steps of the finder's inner loops (tests check it grows linearly)
};

/// The values an unrolled loop carries across the boundaries of its groups
/// of steps. The body budget cuts a long chain at offsets that drift against
/// the steps of an unrolled recurrence (or of its gradient's backward), so
/// its loops repeat only after many steps, and LLVM compiles every variant:
/// an LSTM's gradient over 64 steps had 82 distinct loop bodies. Storing
/// what crosses a group boundary makes every group start from the same
/// state; the budget then cuts each group alike, and equal code is emitted
/// once (`share`, `findRuns`).
///
/// Periods are found by content, in one pass. h(i) hashes op i's kind,
/// attributes, types and distances back to its operands (near ones; a far
/// one by its identity when many ops read it, a weight every step reads,
/// else only by its type), g(i) the kWindow ops ending at i, and d(i) is the
/// distance back to the previous equal g. Position i repeats when
/// d(i) = d(i - d(i)) = ...: kMinCopies copies in a row. In each period,
/// the position of the least g is an anchor: one per period, at the same
/// offset in every copy. A group is as many whole periods as a loop body
/// holds; its boundary goes where, within the period from its anchor on, the
/// fewest values not stored anyway cross. The boundaries keep that phase
/// through the region, one group apart, wherever later anchors fall, and
/// reach back to the end of the region before, where the steps are alike but
/// for operands the hash tells apart (the first steps of a backward read the
/// last steps' values from near by). A value made in the group before a
/// boundary and read in the group after it is a carry. Code that does not
/// repeat, or repeats for fewer than kMinGroups groups, has no boundaries.
///
/// `position`: per value, the index of its producing op (-1: a parameter);
/// `storedBefore`: per value, stored whatever the plan (parameters, outputs, data,
/// operands read from memory); `budget`: ops per loop body.
StepGroups findStepGroups(const ir::Function& f, const Users& users, std::span<const int> position,
                          std::span<const char> storedBefore, int budget);

} // namespace adjit::codegen
