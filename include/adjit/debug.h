// adjit/debug.h — observing compiled code as it runs: host callbacks and prints.
#pragma once

#include <adjit/tensor.h>

#include <functional>
#include <string>

namespace adjit {

/// Calls `fn` with the tensors' values when the compiled code (or the
/// interpreter) reaches this point, in order with the computation and with
/// other callbacks. Never merged, dropped or moved by optimisations; a
/// recomputed region (recompute_grad) runs it again. Not differentiable.
void debug_callback(std::function<void(const std::vector<Array>&)> fn, const std::vector<Tensor>& tensors,
                    std::source_location loc = std::source_location::current());

/// Prints `format` to stdout with each "{}" replaced by the next tensor's value.
void debug_print(std::string format, const std::vector<Tensor>& tensors,
                 std::source_location loc = std::source_location::current());

} // namespace adjit
