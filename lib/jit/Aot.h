// jit/Aot.h — ahead-of-time compilation: an object file with plain C
// functions and the C header declaring them. Deterministic: the same module
// and options give byte-identical outputs.
#pragma once

#include "jit/Pipeline.h"

#include "ir/IR.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace adjit::engine {

struct AotRequest {
  std::vector<std::string> functions; ///< exported as they are
  std::vector<std::string> grads;     ///< NAME: also NAME_grad (x...) -> (dx...)
  /// Per name in grads, the inputs NAME_grad differentiates, in this order
  /// (valid, distinct, floating); a name not here: every floating input.
  std::map<std::string, std::vector<std::size_t>> argnums;
  std::vector<std::string> jvps;      ///< NAME: also NAME_jvp (x..., dx...) -> (y..., dy...), forward mode
  std::vector<std::string> vjps;      ///< NAME: a gradient bundle NAME_fwd / NAME_bwd / NAME_residuals
  /// NAME: also NAME_map(n, ...), n instances of NAME run through the
  /// threads hook, and a _map twin of each other entry point made for NAME
  /// (NAME_grad_map, NAME_jvp_map, NAME_fwd_map, NAME_bwd_map); NAME itself
  /// is exported too.
  std::vector<std::string> maps;
  /// Functions of the module exported as `symbol`, with `preamble` put in the
  /// header before their declaration, and a `symbol_work` twin whose caller
  /// gives the scratch (`symbol_WORK_BYTES` bytes): nothing is allocated.
  /// The sparse derivatives of `adjit compile --sparse-jacobian` are these.
  struct Export {
    std::string function, symbol, what, preamble;
  };
  std::vector<Export> exports;
  /// How code is generated: threads split large loops through the header's
  /// adjit_parallel_for_hook (off by default); objects have no packed entry
  /// points and are one part (both forced).
  CompileOptions options{.threads = false};
  std::string headerGuard = "ADJIT_MODEL_H";
  std::string source = "model.adj";   ///< named in the header's comment
};

struct AotResult {
  std::string object; ///< ELF relocatable object
  std::string header; ///< C header
};

/// Compiles the requested functions of `m` (which is modified: gradient
/// functions are added). Throws adjit::Error for unknown functions, host
/// callbacks, and custom-gradient call sites whose VJP was never traced.
AotResult compileAot(const std::shared_ptr<ir::Module>& m, const AotRequest& r);

/// A C identifier for a function name ('.' and other characters become '_').
std::string cName(const std::string& name);

} // namespace adjit::engine
