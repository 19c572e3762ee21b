// autodiff/Linearity.cpp — is a function linear in some of its parameters?
// Forward mode differentiates a custom gradient by transposing its grad_fn
// (the JVP is the transpose of the VJP), which is sound only when grad_fn is
// linear in its output gradients; reverse mode differentiates a custom_jvp
// by transposing its rule, sound only when the rule is linear in its
// tangents. This proves it from op traits, or names the first op that
// breaks it.
#include "autodiff/Reverse.h"
#include "ir/OpInfo.h"
#include "autodiff/Rules.h"

#include <fmt/format.h>

#include <map>

namespace adjit::autodiff {
namespace {

class Checker {
public:
  Checker(const ir::Module& m, const std::string& what, const std::string& purpose, const Location& site)
      : m_(m), what_(what), purpose_(purpose), site_(site) {}

  /// Per result of `fn`: whether it varies with the `dependent` parameters.
  /// Calls are followed into their callees (each callee and mask once); the
  /// depth of this recursion is the depth of call nesting, not program size.
  std::vector<char> run(const ir::Function& fn, const std::vector<char>& dependent) {
    auto key = std::make_pair(fn.name, dependent);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::vector<char> dep(fn.types.size());
    for (std::size_t i = 0; i < fn.params.size(); ++i) dep[static_cast<std::size_t>(fn.params[i])] = dependent[i];
    for (const ir::Op& op : fn.ops) {
      std::vector<char> in(op.operands.size());
      std::size_t count = 0;
      for (std::size_t i = 0; i < op.operands.size(); ++i) {
        in[i] = dep[static_cast<std::size_t>(op.operands[i])];
        count += in[i] ? 1 : 0;
      }
      if (!count) continue;
      const ir::OpInfo& info = ir::info(op.kind);
      for (std::size_t i = 0; i < op.operands.size(); ++i)
        if (in[i] && !is_floating(fn.type(op.operands[i]).dtype)) fail(fn, op, "reads an integer or boolean computed from them");
      std::vector<char> out(op.results.size(), 1);
      if (autodiff::rules(op.kind).has(autodiff::kLinear) || (autodiff::rules(op.kind).has(autodiff::kLinearInEach) && count == 1) ||
          (autodiff::rules(op.kind).has(autodiff::kLinearInFirst) && count == 1 && in[0]) ||
          (autodiff::rules(op.kind).has(autodiff::kLinearInLast) && count == 1 && in.back())) {
        // linear: every result varies with them
      } else if (info.has(ir::kForwardsToCallee)) {
        const ir::Function* callee = m_.lookup(op.callees.at(0));
        out = run(*callee, in);
      } else if (autodiff::rules(op.kind).has(autodiff::kLinearInFirst) && !in[0]) {
        fail(fn, op, "divides by a value computed from them");
      } else if (autodiff::rules(op.kind).has(autodiff::kLinearInLast)) {
        fail(fn, op, "takes a value computed from them as an operand other than its last");
      } else if (autodiff::rules(op.kind).has(autodiff::kLinearInEach) || autodiff::rules(op.kind).has(autodiff::kLinearInFirst)) {
        fail(fn, op, "multiplies or divides two values computed from them");
      } else {
        fail(fn, op, "is not linear");
      }
      for (std::size_t k = 0; k < op.results.size(); ++k) dep[static_cast<std::size_t>(op.results[k])] = out[k];
    }
    std::vector<char> result;
    for (ir::ValueId o : fn.outputs) result.push_back(dep[static_cast<std::size_t>(o)]);
    memo_.emplace(std::move(key), result);
    return result;
  }

private:
  [[noreturn]] void fail(const ir::Function& fn, const ir::Op& op, const char* why) const {
    const std::string where = op.loc.known() ? fmt::format(" at {}", op.loc.str()) : std::string();
    throw Error(fmt::format("{}: {}, but its op '{}'{} (in @{}) {}", what_, purpose_, ir::info(op.kind).name, where,
                            fn.name, why), site_);
  }

  const ir::Module& m_;
  std::string what_, purpose_;
  Location site_;
  std::map<std::pair<std::string, std::vector<char>>, std::vector<char>> memo_;
};

} // namespace

std::vector<char> checkLinear(const ir::Module& m, const ir::Function& fn, const std::vector<char>& dependent,
                              const std::string& what, const std::string& purpose, const Location& site) {
  return Checker(m, what, purpose, site).run(fn, dependent);
}

} // namespace adjit::autodiff
