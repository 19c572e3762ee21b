// batching/Vmap.cpp — vmap inside a trace (adjit/vmap.h): the function
// traced once on one example's types into a function of the module, then
// copied into the enclosing trace with its ops batched; and vmap as a pass
// of the pipeline (`adjit opt --passes='vmap(f, in_axes=[0,-], axis_size=8)'`).
#include "batching/Rules.h"
#include "support/Assert.h"
#include "trace/Tracer.h"
#include "transforms/Passes.h"

#include <adjit/vmap.h>

#include <fmt/format.h>

#include <charconv>

namespace adjit::detail {

void vmapOutAxesError(std::size_t given, std::size_t results, const Location& loc) {
  throw Error(fmt::format("vmap: out_axes has {} entries, but the function returns {} results (give one per result, or "
                          "one for all)",
                          given, results),
              loc);
}

std::vector<Tensor> vmapCall(const FlatFn& f, const std::vector<Tensor>& leaves, const std::vector<std::optional<int64_t>>& axes,
                             const std::function<std::vector<std::optional<int64_t>>(std::size_t)>& outAxes,
                             std::optional<int64_t> axisSize, const Location& loc) {
  TraceState* sp = currentTrace();
  if (!sp) throw Error("vmap: called with Tensors outside of a trace", loc);
  TraceState& s = *sp;
  ADJIT_ASSERT(axes.size() == leaves.size(), "vmapCall: one axis per leaf");
  if (axisSize && *axisSize < 0) throw Error(fmt::format("vmap: axis_size must be at least 0, got {}", *axisSize), loc);
  // The batch size, from the batched leaves (which must agree) or axis_size.
  std::optional<int64_t> size = axisSize;
  std::optional<std::size_t> sizeFrom;
  std::vector<Type> example;
  std::vector<int64_t> axisOf(leaves.size(), -1);
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    traceOf(leaves[i], "vmap", loc);
    const Type t = leaves[i].type();
    if (!axes[i]) {
      example.push_back(t);
      continue;
    }
    const int64_t r = t.rank();
    if (r == 0)
      throw Error(fmt::format("vmap: argument leaf {} is the scalar {}, which has no axis {} to batch over (give it "
                              "in_axes std::nullopt to share it)",
                              i, t.str(), *axes[i]),
                  loc);
    if (*axes[i] < -r || *axes[i] >= r)
      throw Error(fmt::format("vmap: in_axes gives axis {} for argument leaf {}, which is {}: expected an axis in [{}, {}]",
                              *axes[i], i, t.str(), -r, r - 1),
                  loc);
    const int64_t axis = *axes[i] < 0 ? *axes[i] + r : *axes[i];
    axisOf[i] = axis;
    const int64_t n = t.shape[static_cast<std::size_t>(axis)];
    if (size && *size != n) {
      if (sizeFrom)
        throw Error(fmt::format("vmap: batch sizes disagree: argument leaf {} ({}) has {} examples along axis {}, but "
                                "argument leaf {} ({}) has {} along axis {}",
                                *sizeFrom, leaves[*sizeFrom].type().str(), *size, axisOf[*sizeFrom], i, t.str(), n, axis),
                    loc);
      throw Error(fmt::format("vmap: axis_size is {}, but argument leaf {} ({}) has {} examples along axis {}", *size, i,
                              t.str(), n, axis),
                  loc);
    }
    size = n;
    sizeFrom = i;
    Shape shape = t.shape;
    shape.erase(shape.begin() + axis);
    example.push_back(Type{t.dtype, shape});
  }
  if (!size)
    throw Error("vmap: no argument is batched, so the batch size is unknown: give VmapOptions::axis_size", loc);
  const NestedFunction g = traceNested(s, "vmap.body", example, [&](const std::vector<Tensor>& ps) {
    currentTrace()->vmapBody = true; // assign is an error in it (trace/Variable.cpp)
    return f(ps);
  });
  std::vector<std::optional<int64_t>> outs;
  std::vector<Tensor> result;
  try {
    const ir::Function& fn = *s.module->lookup(g.name);
    std::vector<batching::Batched> args;
    for (std::size_t i = 0; i < leaves.size(); ++i)
      args.push_back(axisOf[i] < 0 ? batching::Batched{leaves[i], false}
                                   : batching::Batched{batching::moveAxis(leaves[i], axisOf[i], 0), true});
    for (ir::ValueId v : g.captured) args.push_back({wrap(s, v), false});
    const std::vector<batching::Batched> ys = batching::batchInline(fn, args, *size);
    outs = outAxes(ys.size());
    ADJIT_ASSERT(outs.size() == ys.size(), "vmapCall: one out axis per result leaf");
    for (std::size_t k = 0; k < ys.size(); ++k) {
      const std::optional<int64_t>& a = outs[k];
      if (!a) {
        if (ys[k].batched)
          throw Error(fmt::format("vmap: result leaf {} ({} per example) depends on a batched argument, but out_axes "
                                  "gives it std::nullopt",
                                  k, fn.type(fn.outputs[k]).str()),
                      loc);
        result.push_back(ys[k].t);
        continue;
      }
      const int64_t r = ys[k].t.rank() + (ys[k].batched ? 0 : 1);
      if (*a < -r || *a >= r)
        throw Error(fmt::format("vmap: out_axes gives axis {} for result leaf {}, which is {} per example: expected an axis "
                                "in [{}, {}]",
                                *a, k, fn.type(fn.outputs[k]).str(), -r, r - 1),
                    loc);
      result.push_back(batching::moveAxis(batching::withBatch(ys[k].t, ys[k].batched, *size), 0, *a));
    }
  } catch (...) {
    std::erase_if(s.module->functions, [&](const auto& fn) { return fn->name == g.name; });
    throw;
  }
  // Its ops live on, batched, in this trace: the per-example function is not needed.
  std::erase_if(s.module->functions, [&](const auto& fn) { return fn->name == g.name; });
  return result;
}

} // namespace adjit::detail

namespace adjit::batching {
namespace {

/// Parses the pass argument `F, in_axes=[0,-,1], out_axes=[0], axis_size=8`.
struct PassArgs {
  std::string fn;
  std::optional<std::vector<std::optional<int64_t>>> in, out;
  std::optional<int64_t> size;
};

std::string trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return std::string(s);
}

int64_t parseInt(const std::string& s, const std::string& what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty())
    throw Error(fmt::format("vmap pass: {} must be an integer, got '{}'", what, s));
  return v;
}

std::vector<std::optional<int64_t>> parseAxes(const std::string& s, const std::string& key) {
  if (s.size() < 2 || s.front() != '[' || s.back() != ']')
    throw Error(fmt::format("vmap pass: {} must be a list like [0,-,1] (- for none), got '{}'", key, s));
  std::vector<std::optional<int64_t>> axes;
  const std::string inner = s.substr(1, s.size() - 2);
  if (trim(inner).empty()) return axes;
  std::size_t from = 0;
  while (true) {
    const std::size_t comma = inner.find(',', from);
    const std::string item = trim(std::string_view(inner).substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    axes.push_back(item == "-" ? std::nullopt : std::optional<int64_t>(parseInt(item, "an entry of " + key)));
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  return axes;
}

PassArgs parsePassArgs(const std::string& arg) {
  PassArgs a;
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : arg) {
    if (c == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
      continue;
    }
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    cur += c;
  }
  parts.push_back(trim(cur));
  a.fn = parts[0];
  if (a.fn.empty() || a.fn.find('=') != std::string::npos)
    throw Error("vmap pass: expected vmap(F, in_axes=[...], out_axes=[...], axis_size=N), got vmap(" + arg + ")");
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    const std::string key = trim(parts[i].substr(0, eq)), value = eq == std::string::npos ? "" : trim(parts[i].substr(eq + 1));
    if (key == "in_axes") a.in = parseAxes(value, key);
    else if (key == "out_axes") a.out = parseAxes(value, key);
    else if (key == "axis_size") a.size = parseInt(value, key);
    else
      throw Error(fmt::format("vmap pass: unknown option '{}' (known: in_axes, out_axes, axis_size)", parts[i]));
  }
  if (!a.size) throw Error("vmap pass: give the batch size: vmap(" + a.fn + ", axis_size=N)");
  return a;
}

const bool gRegistered = [] {
  transforms::registerPass(
      {"vmap", "vmap(F, in_axes=[A,...], out_axes=[A,...], axis_size=N): add @F.vmap, F over a batch of N examples; "
               "A is the batch axis of a parameter or result (default 0) or - for none",
       [](ir::Module& m, const std::string& arg) {
         const PassArgs a = parsePassArgs(arg);
         const ir::Function* g = m.lookup(a.fn);
         if (!g) throw Error("vmap pass: no function named @" + a.fn + " in the module");
         AxisSpec spec;
         spec.in = a.in ? *a.in : std::vector<std::optional<int64_t>>(g->params.size(), 0);
         spec.out = a.out ? *a.out : std::vector<std::optional<int64_t>>(g->outputs.size(), 0);
         if (spec.out.size() == 1 && g->outputs.size() > 1) spec.out.assign(g->outputs.size(), spec.out[0]);
         spec.size = *a.size;
         vmapFunction(std::shared_ptr<ir::Module>(&m, [](ir::Module*) {}), a.fn, spec);
       },
       true});
  return true;
}();

} // namespace
} // namespace adjit::batching
