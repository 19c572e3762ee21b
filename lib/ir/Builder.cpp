// ir/Builder.cpp — type-checked op creation.
#include "ir/Builder.h"

#include "ir/OpInfo.h"
#include "support/Assert.h"

namespace adjit::ir {

std::vector<Type> inferTypes(const Module& m, const Function& f, OpKind k, std::span<const ValueId> operands,
                             const Attrs& attrs, const std::vector<std::string>& callees, const Location& loc) {
  const ir::OpInfo& info = ir::info(k);
  const std::string name(info.name);
  if (info.arity >= 0 && static_cast<std::size_t>(info.arity) != operands.size())
    throw Error(fmt::format("{}: expected {} operand{}, got {}", name, info.arity, info.arity == 1 ? "" : "s",
                            operands.size()), loc);
  if (!info.has(ir::kHasCallee) && !callees.empty())
    throw Error(name + ": does not reference functions, but names @" + callees[0], loc);
  std::vector<const Function*> fns;
  for (const std::string& c : callees) {
    const Function* cf = m.lookup(c);
    if (!cf) throw Error(name + ": no function named @" + c + " in the module", loc);
    fns.push_back(cf);
  }
  constexpr std::size_t kInline = 8;
  const Type* inline_[kInline];
  std::vector<const Type*> many;
  const Type** refs = inline_;
  if (operands.size() > kInline) {
    many.resize(operands.size());
    refs = many.data();
  }
  for (std::size_t i = 0; i < operands.size(); ++i) refs[i] = &f.type(operands[i]);
  InferCtx ctx{info.name, TypeRefs::of({refs, operands.size()}), attrs, fns, loc};
  try {
    std::vector<Type> results = info.infer(ctx);
    const auto& entries = attrs.entries();
    for (std::size_t i = 0; i < entries.size(); ++i)
      if (i >= 64 || !(ctx.read >> i & 1))
        throw Error(fmt::format("{}: unknown attribute '{}'", name, entries[i].first), loc);
    for (const Type& t : results) t.bytes(); // sizes past the limit are errors here, at the op
    return results;
  } catch (const Error& e) {
    // A type rule's own error already names the op (and has no location when the op has none).
    if (e.location().known() || e.message().starts_with(name + ": ")) throw;
    throw Error(name + ": " + e.message(), loc); // an absurd shape, named with its op
  }
}

ValueId Builder::param(Type t) {
  t.bytes(); // a parameter type past kMaxElements is an adjit::Error
  ValueId v = f_.newValue(std::move(t));
  f_.params.push_back(v);
  return v;
}

ValueList Builder::create(OpKind k, ValueList operands, Attrs attrs, std::vector<std::string> callees, Location loc) {
  std::vector<Type> types = inferTypes(m_, f_, k, operands, attrs, callees, loc);
  Op op{k, std::move(operands), {}, std::move(attrs), std::move(callees), std::move(loc)};
  for (Type& t : types) op.results.push_back(f_.newValue(std::move(t)));
  f_.ops.push_back(std::move(op));
  return f_.ops.back().results;
}

ValueId Builder::create1(OpKind k, ValueList operands, Attrs attrs, Location loc) {
  auto r = create(k, std::move(operands), std::move(attrs), {}, std::move(loc));
  ADJIT_ASSERT(r.size() == 1, "create1 on a multi-result op");
  return r[0];
}

ValueId Builder::constant(Array value, Location loc) {
  Attrs a;
  a.set("value", std::move(value));
  return create1(OpKind::Constant, {}, std::move(a), std::move(loc));
}

} // namespace adjit::ir
