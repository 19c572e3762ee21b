// ir/Verifier.cpp — structural and type checks over a whole module.
#include "ir/Verifier.h"

#include "ir/Builder.h"
#include "ir/Text.h"
#include "ir/OpInfo.h"

#include <cstdlib>
#include <functional>
#include <set>

namespace adjit::ir {
namespace {

[[noreturn]] void fail(const Function& f, const Op* op, const std::string& msg) {
  std::string s = "verifier: in @" + f.name + ": " + msg;
  if (op) s += "\n  in op: " + printOp(f, *op);
  throw Error(s, op ? op->loc : f.loc);
}

void verifyFunction(const Module& m, const Function& f) {
  std::vector<bool> defined(f.types.size());
  auto define = [&](ValueId v, const Op* op) {
    if (v < 0 || static_cast<std::size_t>(v) >= f.types.size()) fail(f, op, "value %" + std::to_string(v) + " has no type");
    if (defined[v]) fail(f, op, "value %" + std::to_string(v) + " is defined twice");
    defined[v] = true;
  };
  for (ValueId p : f.params) define(p, nullptr);
  for (const Op& op : f.ops) {
    for (ValueId v : op.operands)
      if (v < 0 || static_cast<std::size_t>(v) >= f.types.size() || !defined[v])
        fail(f, &op, "operand %" + std::to_string(v) + " is used before it is defined");
    std::vector<Type> types;
    try {
      types = inferTypes(m, f, op.kind, op.operands, op.attrs, op.callees, op.loc);
    } catch (const Error& e) {
      fail(f, &op, e.message());
    }
    if (types.size() != op.results.size())
      fail(f, &op, "op has " + std::to_string(op.results.size()) + " results, its type rule gives " +
                       std::to_string(types.size()));
    for (std::size_t i = 0; i < types.size(); ++i) {
      define(op.results[i], &op);
      if (f.type(op.results[i]) != types[i])
        fail(f, &op, "result " + std::to_string(i) + " has type " + f.type(op.results[i]).str() + ", expected " +
                         types[i].str());
    }
  }
  for (ValueId v : f.outputs)
    if (v < 0 || static_cast<std::size_t>(v) >= f.types.size() || !defined[v])
      fail(f, nullptr, "returns %" + std::to_string(v) + ", which is not defined");
}

} // namespace

void verify(const Module& m) {
  std::set<std::string> names;
  for (const auto& f : m.functions)
    if (!names.insert(f->name).second) throw Error("verifier: function @" + f->name + " is defined twice", f->loc);
  for (const auto& f : m.functions) verifyFunction(m, *f);
  // No recursion: calls form a DAG.
  std::set<std::string> done, active;
  std::function<void(const Function&)> visit = [&](const Function& f) {
    if (done.count(f.name)) return;
    if (!active.insert(f.name).second) fail(f, nullptr, "function calls itself (recursion is not supported)");
    for (const Op& op : f.ops)
      for (const std::string& c : op.callees) visit(*m.lookup(c));
    active.erase(f.name);
    done.insert(f.name);
  };
  for (const auto& f : m.functions) visit(*f);
}

bool verifyAfterPasses() {
#ifndef NDEBUG
  return true;
#else
  static const bool on = [] {
    const char* v = std::getenv("ADJIT_VERIFY");
    return v && std::string(v) == "1";
  }();
  return on;
#endif
}

} // namespace adjit::ir
