// ir/Effects.cpp — side effects of ops, through the functions they reference.
#include "ir/Effects.h"

#include "ir/OpInfo.h"

namespace adjit::ir {

Effects::Effects(const ir::Module& m) {
  // callers[g]: the functions with an op referencing g. A worklist spreads
  // "effectful" from functions with a non-pure op to their callers: each
  // function enters the list at most once.
  std::unordered_map<std::string, std::vector<std::string>> callers;
  std::vector<std::string> work;
  for (const auto& fp : m.functions) {
    bool direct = false;
    for (const ir::Op& op : fp->ops) {
      direct = direct || !info(op.kind).has(kPure);
      for (const std::string& c : op.callees) callers[c].push_back(fp->name);
    }
    fn_[fp->name] = direct;
    if (direct) work.push_back(fp->name);
  }
  while (!work.empty()) {
    const std::string g = std::move(work.back());
    work.pop_back();
    auto it = callers.find(g);
    if (it == callers.end()) continue;
    for (const std::string& caller : it->second) {
      bool& e = fn_[caller];
      if (!e) {
        e = true;
        work.push_back(caller);
      }
    }
  }
}

bool Effects::functionEffectful(const std::string& name) const {
  auto it = fn_.find(name);
  return it != fn_.end() && it->second;
}

bool Effects::effectful(const ir::Op& op) const {
  if (!info(op.kind).has(kPure)) return true;
  for (const std::string& c : op.callees)
    if (functionEffectful(c)) return true;
  return false;
}

} // namespace adjit::ir
