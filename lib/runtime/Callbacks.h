// runtime/Callbacks.h — host callbacks run by compiled code (debug_callback):
// a process-wide registry by id, and the C entry point kernels call.
#pragma once

#include <string>

#include <adjit/array.h>

#include <functional>
#include <optional>

namespace adjit::runtime {

using HostFn = std::function<void(const std::vector<Array>&)>;

/// Registers a callback taking arrays of `types`; returns its id.
int64_t registerCallback(HostFn fn, std::vector<Type> types);
/// The argument types of callback `id`, if it exists.
std::optional<std::vector<Type>> callbackTypes(int64_t id);
/// Runs callback `id` on arrays.
void runCallback(int64_t id, const std::vector<Array>& args);

/// Exceptions never unwind through compiled code: a callback's exception is
/// kept for its thread (later callbacks of that kernel call are skipped) and
/// rethrown by the runtime as adjit::Error once the kernel returns. Clears it.
void rethrowCallbackFailure();

/// Bytes the residual stacks of while_vjp ops pushed on this thread, since it
/// started (a running total: the difference around a call is that call's).
int64_t stackBytesPushed();

/// "while_loop: the loop did not end within max_iterations = M iterations"
/// (the interpreter, compiled code, and loop_limit after a bounded reverse).
std::string loopLimitMessage(int64_t limit);
/// "while_loop: out of memory: ..." for a residual stack that cannot grow to `bytes`.
std::string stackOverflowMessage(int64_t bytes);

} // namespace adjit::runtime

/// Called by compiled code: runs callback `id` on `n` buffers (copied into Arrays).
extern "C" void adjit_host_callback(int64_t id, int64_t n, void* const* buffers) noexcept;
/// Called by compiled code when a while loop runs past its max_iterations:
/// the kernel call then raises adjit::Error (see rethrowCallbackFailure).
extern "C" void adjit_loop_limit(int64_t limit, const char* file, int64_t line, int64_t column) noexcept;
/// Called by compiled code when the residual stack of a while loop's reverse
/// (while_vjp) cannot grow to `bytes`: the kernel call then raises adjit::Error.
extern "C" void adjit_out_of_memory(int64_t bytes, const char* file, int64_t line, int64_t column) noexcept;
/// Called by compiled code when a while_vjp op frees its residual stack, with
/// the bytes its trips pushed (see stackBytesPushed).
extern "C" void adjit_stack_pushed(int64_t bytes) noexcept;
