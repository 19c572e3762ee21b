// ir/Dot.cpp — Graphviz output of a function.
#include "ir/Dot.h"

#include "ir/Text.h"
#include "ir/OpInfo.h"

#include <fmt/format.h>

namespace adjit::ir {
namespace {

std::string escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r;
}

} // namespace

std::string toDot(const Module& m, const std::string& name) {
  const Function* f = m.lookup(name);
  if (!f) throw Error("dot: no function named @" + name);
  std::string s = fmt::format("digraph \"{}\" {{\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n"
                              "  edge [fontname=\"monospace\", fontsize=9];\n  label=\"@{}  {}\";\n",
                              escape(f->name), escape(f->name), escape(f->signature()));
  std::vector<std::string> source(f->types.size());
  for (std::size_t i = 0; i < f->params.size(); ++i) {
    const std::string id = fmt::format("p{}", i);
    s += fmt::format("  {} [shape=invhouse, label=\"%{}\"];\n", id, f->params[i]);
    source[static_cast<std::size_t>(f->params[i])] = id;
  }
  for (std::size_t k = 0; k < f->ops.size(); ++k) {
    const Op& op = f->ops[k];
    const std::string id = fmt::format("op{}", k);
    const std::string label = std::string(ir::info(op.kind).name);
    if (op.callees.empty()) {
      s += fmt::format("  {} [shape=box, label=\"{}\"];\n", id, escape(label));
    } else {
      s += fmt::format("  subgraph cluster_{} {{\n    style=rounded; color=gray40; label=\"{}\";\n", id, escape(label));
      s += fmt::format("    {} [shape=box, style=bold, label=\"{}\"];\n", id, escape(label));
      for (std::size_t c = 0; c < op.callees.size(); ++c) {
        const Function* callee = m.lookup(op.callees[c]);
        s += fmt::format("    {}_f{} [shape=note, label=\"@{}\\n{}\"];\n    {}_f{} -> {} [style=dashed, arrowhead=none];\n", id, c,
                         escape(op.callees[c]), callee ? escape(callee->signature()) : "", id, c, id);
      }
      s += "  }\n";
    }
    for (ValueId o : op.operands)
      s += fmt::format("  {} -> {} [label=\"{}\"];\n", source[static_cast<std::size_t>(o)], id, f->type(o).str());
    for (ValueId r : op.results) source[static_cast<std::size_t>(r)] = id;
  }
  for (std::size_t i = 0; i < f->outputs.size(); ++i) {
    s += fmt::format("  out{} [shape=house, label=\"result {}\"];\n", i, i);
    s += fmt::format("  {} -> out{} [label=\"{}\"];\n", source[static_cast<std::size_t>(f->outputs[i])], i,
                     f->type(f->outputs[i]).str());
  }
  return s + "}\n";
}

} // namespace adjit::ir
