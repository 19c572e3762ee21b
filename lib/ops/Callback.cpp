// ops/Callback.cpp — host_callback(xs...) {id}: runs a registered host
// function on the operands' values when compiled code (or the interpreter)
// reaches it. No results; not pure, so never merged, dropped or reordered
// with other callbacks.
#include "batching/Rules.h"
#include "codegen/Emitter.h"

#include <llvm/IR/Module.h>
#include "runtime/Callbacks.h"
#include "ops/Common.h"

namespace adjit::ops {

void defineCallbackOps(Table& t) {
  set(t, OpKind::HostCallback, {
      .infer = [](const ir::InferCtx& c) {
        const int64_t id = c.integer("id");
        auto types = runtime::callbackTypes(id);
        if (!types) c.fail("no host callback with id {} in this process", id);
        if (std::vector<Type>(c.operands.begin(), c.operands.end()) != *types)
          c.fail("operands do not match the types callback {} was registered with", id);
        return std::vector<Type>{};
      },
      .eval = [](const ir::EvalCtx& c) {
        runtime::runCallback(c.op.attrs.integer("id"), std::vector<Array>(c.args.begin(), c.args.end()));
        return std::vector<Array>{};
      },
      .fold = noFold,
      .lower = [](codegen::LowerCtx& c) {
        const auto n = static_cast<int64_t>(c.op.operands.size());
        llvm::Type* ptrTy = c.b.getPtrTy();
        llvm::Value* array = c.entryAlloca(ptrTy, static_cast<uint64_t>(std::max<int64_t>(n, 1)));
        for (int64_t i = 0; i < n; ++i)
          c.b.CreateStore(c.operandBuffer(static_cast<std::size_t>(i)), c.b.CreateConstInBoundsGEP1_64(ptrTy, array, static_cast<uint64_t>(i)));
        llvm::Module& m = *c.b.GetInsertBlock()->getModule();
        llvm::FunctionCallee fn = m.getOrInsertFunction(
            "adjit_host_callback", llvm::FunctionType::get(c.b.getVoidTy(), {c.b.getInt64Ty(), c.b.getInt64Ty(), ptrTy}, false));
        c.b.CreateCall(fn, {c.i64(c.op.attrs.integer("id")), c.i64(n), array});
      },      // Under vmap, called once per example, in batch order, with that
      // example's slices (jax.debug.callback's behaviour): a scan over the
      // batch runs the callback at each step.
      .batch = batching::loopBatch,
  });
}

} // namespace adjit::ops
