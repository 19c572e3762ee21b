// ir/Interpreter.cpp — evaluates functions op by op.
#include "ir/Interpreter.h"

#include "ir/OpInfo.h"
#include "support/Assert.h"

namespace adjit::ir {

std::vector<Array> interpret(const Module& m, std::string_view name, std::span<const Array> args) {
  const Function* f = m.lookup(name);
  if (!f) throw Error("interpret: no function named @" + std::string(name));
  if (args.size() != f->params.size())
    throw Error(fmt::format("interpret: @{} takes {} arguments, got {}", name, f->params.size(), args.size()));
  std::vector<std::optional<Array>> vals(f->types.size());
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].type() != f->type(f->params[i]))
      throw Error(fmt::format("interpret: argument {} of @{} must be {}, got {}", i, name,
                              f->type(f->params[i]).str(), args[i].type().str()));
    vals[f->params[i]] = args[i];
  }
  auto call = [&m](const std::string& callee, std::span<const Array> a) { return interpret(m, callee, a); };
  for (const Op& op : f->ops) {
    std::vector<Array> in;
    in.reserve(op.operands.size());
    for (ValueId v : op.operands) in.push_back(*vals[v]);
    EvalCtx ctx{op, *f, in, call};
    std::vector<Array> out = ir::info(op.kind).eval(ctx);
    ADJIT_ASSERT(out.size() == op.results.size(), std::string(ir::info(op.kind).name) + ": eval result count");
    for (std::size_t i = 0; i < out.size(); ++i) {
      ADJIT_ASSERT(out[i].type() == f->type(op.results[i]),
                   std::string(ir::info(op.kind).name) + ": eval gave " + out[i].type().str());
      vals[op.results[i]] = std::move(out[i]);
    }
  }
  std::vector<Array> res;
  for (ValueId v : f->outputs) res.push_back(*vals[v]);
  return res;
}

} // namespace adjit::ir
