// jit/Partition.cpp — splitting a module into parts compiled concurrently.
#include "jit/Partition.h"

#include <llvm/Analysis/LoopInfo.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <numeric>

namespace adjit::engine {

namespace {

/// The defined functions of `lm`, in module order.
std::vector<llvm::Function*> definitions(llvm::Module& lm) {
  std::vector<llvm::Function*> fns;
  for (llvm::Function& f : lm)
    if (!f.isDeclaration()) fns.push_back(&f);
  return fns;
}

/// The part of each function of `fns`; empty when fewer than two parts
/// would hold any.
std::vector<unsigned> partsOf(const std::vector<llvm::Function*>& fns, unsigned parts) {
  std::map<const llvm::Function*, std::size_t> id;
  for (std::size_t i = 0; i < fns.size(); ++i) id[fns[i]] = i;
  // A function called inside a loop is hot, and so is every function a hot
  // function calls.
  std::vector<std::vector<std::size_t>> callees(fns.size());
  std::vector<char> hot(fns.size(), 0);
  std::vector<std::size_t> work;
  for (std::size_t i = 0; i < fns.size(); ++i) {
    llvm::DominatorTree dt(*fns[i]);
    llvm::LoopInfo loops(dt);
    for (llvm::BasicBlock& bb : *fns[i])
      for (llvm::Instruction& inst : bb)
        if (auto* call = llvm::dyn_cast<llvm::CallBase>(&inst))
          if (auto it = id.find(call->getCalledFunction()); it != id.end()) {
            callees[i].push_back(it->second);
            if (loops.getLoopFor(&bb) && !hot[it->second]) {
              hot[it->second] = 1;
              work.push_back(it->second);
            }
          }
  }
  while (!work.empty()) {
    const std::size_t f = work.back();
    work.pop_back();
    for (std::size_t c : callees[f])
      if (!hot[c]) {
        hot[c] = 1;
        work.push_back(c);
      }
  }
  // Clusters (union-find): a hot callee the inliner may inline joins its caller.
  std::vector<std::size_t> parent(fns.size());
  std::iota(parent.begin(), parent.end(), std::size_t{0});
  auto root = [&](std::size_t i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (std::size_t i = 0; i < fns.size(); ++i)
    for (std::size_t c : callees[i])
      if (hot[c] && !fns[c]->hasFnAttribute(llvm::Attribute::NoInline)) parent[root(c)] = root(i);
  std::map<std::size_t, std::size_t> clusterSize; // root -> instructions
  for (std::size_t i = 0; i < fns.size(); ++i) clusterSize[root(i)] += fns[i]->getInstructionCount();
  std::vector<std::pair<std::size_t, std::size_t>> clusters(clusterSize.begin(), clusterSize.end());
  std::stable_sort(clusters.begin(), clusters.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  parts = static_cast<unsigned>(std::min<std::size_t>(parts, clusters.size()));
  if (parts < 2) return {};
  std::vector<std::size_t> load(parts, 0);
  std::map<std::size_t, unsigned> partOfCluster;
  for (const auto& [r, size] : clusters) {
    const unsigned p = static_cast<unsigned>(std::min_element(load.begin(), load.end()) - load.begin());
    partOfCluster[r] = p;
    load[p] += size;
  }
  std::vector<unsigned> part(fns.size());
  for (std::size_t i = 0; i < fns.size(); ++i) part[i] = partOfCluster[root(i)];
  return part;
}

} // namespace

std::map<std::string, unsigned> assignParts(llvm::Module& lm, unsigned parts) {
  const std::vector<llvm::Function*> fns = definitions(lm);
  const std::vector<unsigned> part = partsOf(fns, parts);
  std::map<std::string, unsigned> named;
  for (std::size_t i = 0; i < part.size(); ++i) named[fns[i]->getName().str()] = part[i];
  return named;
}

std::vector<std::string> splitModule(llvm::Module& lm, unsigned parts, const std::string& symbol) {
  const std::vector<llvm::Function*> fns = definitions(lm);
  const std::vector<unsigned> part = partsOf(fns, parts);
  if (part.empty()) return {};
  parts = *std::max_element(part.begin(), part.end()) + 1;
  // Functions used from another part, and variables, become global. Functions
  // used only in their part stay local (the optimiser may then specialise
  // them to their callers), and local constants are copied into every part
  // (the optimiser still sees their values).
  std::map<const llvm::GlobalValue*, unsigned> partOf;
  for (std::size_t i = 0; i < fns.size(); ++i) partOf[fns[i]] = part[i];
  auto usedElsewhere = [&](const llvm::Function& f) {
    for (const llvm::User* u : f.users()) {
      const auto* inst = llvm::dyn_cast<llvm::Instruction>(u);
      if (!inst || partOf[inst->getFunction()] != partOf[&f]) return true;
    }
    return false;
  };
  for (llvm::GlobalValue& g : lm.global_values()) {
    if (g.isDeclaration()) continue;
    auto* var = llvm::dyn_cast<llvm::GlobalVariable>(&g);
    if (var && var->isConstant() && g.hasLocalLinkage()) continue;
    auto* fn = llvm::dyn_cast<llvm::Function>(&g);
    if (fn && g.hasLocalLinkage() && !usedElsewhere(*fn)) continue;
    if (g.hasLocalLinkage()) {
      g.setName(symbol + "." + g.getName());
      g.setLinkage(llvm::GlobalValue::ExternalLinkage);
      g.setVisibility(llvm::GlobalValue::HiddenVisibility);
    }
    if (!fn) partOf[&g] = 0;
  }
  std::vector<std::string> bitcode;
  for (unsigned p = 0; p < parts; ++p) {
    llvm::ValueToValueMapTy map;
    std::unique_ptr<llvm::Module> module = llvm::CloneModule(lm, map, [&](const llvm::GlobalValue* g) {
      auto it = partOf.find(g);
      return it == partOf.end() || it->second == p; // local constants: everywhere
    });
    std::string bytes;
    llvm::raw_string_ostream os(bytes);
    llvm::WriteBitcodeToFile(*module, os);
    os.flush();
    bitcode.push_back(std::move(bytes));
  }
  return bitcode;
}

} // namespace adjit::engine
