// ops/Creation.cpp — constant (a dense array attribute) and iota.
#include "codegen/Emitter.h"
#include "ops/Common.h"

namespace adjit::ops {

using codegen::ElementCtx;
using ir::EvalCtx;
using ir::InferCtx;

namespace {

bool isSplat(const Array& v) {
  const std::size_t width = size_of(v.dtype());
  const char* raw = static_cast<const char*>(v.raw());
  for (int64_t i = 1; i < v.size(); ++i)
    if (std::memcmp(raw + static_cast<std::size_t>(i) * width, raw, width) != 0) return false;
  return true;
}

} // namespace

void defineCreationOps(Table& t) {
  // constant {value = dense<...>}: its value
  set(t, OpKind::Constant, {
      .infer = [](const InferCtx& c) { return std::vector<Type>{c.array("value").type()}; },
      .eval = [](const EvalCtx& c) { return std::vector<Array>{c.op.attrs.array("value")}; },
      // nothing to fold; what is known of its elements (small constants the
      // fold pass reads itself), for the folds of the ops that read it
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        const ir::Known k = ir::knownOf(c.op.attrs.array("value"));
        if (!k.splat && !k.ramp && !k.eye) return std::nullopt;
        return ir::Folded{k};
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Array& v = c.op.attrs.array("value");
        // i64 exactly: through a double (c.constant) values above 2^53 would lose bits
        if (isSplat(v) && v.dtype() == DType::i64)
          return llvm::ConstantInt::get(c.b.getInt64Ty(), static_cast<uint64_t>(v.data<int64_t>()[0]));
        if (isSplat(v)) return c.constant(v.dtype(), v.at(0));
        return c.load(v.dtype(), c.globalConstant(v), c.linear(c.index, v.shape()));
      },
      .data = [](const ir::Attrs& a) -> const Array* {
        const Array& v = a.array("value");
        return isSplat(v) ? nullptr : &v;
      },
  });

  // iota {shape, axis, dtype}: element = its index along `axis`
  set(t, OpKind::Iota, {
      .infer = [](const InferCtx& c) {
        Type r{c.dtype("dtype"), c.ints("shape")};
        for (int64_t d : r.shape)
          if (d < 0) c.fail("negative dimension in shape {}", shape_str(r.shape));
        if (r.dtype == DType::i1) c.fail("dtype must be numeric, got i1");
        c.axis("axis", r.rank());
        return std::vector<Type>{r};
      },
      .eval = [](const EvalCtx& c) {
        Array r(c.resultType());
        const int64_t axis = c.op.attrs.integer("axis");
        for (int64_t i = 0; i < r.size(); ++i) r.set(i, static_cast<double>(unravel(i, r.shape())[axis]));
        return std::vector<Array>{std::move(r)};
      },
      // nothing to fold; along the last axis (or one followed by axes of 1)
      // an integer iota is a ramp 0, 1, ..., n - 1 repeated (one_hot's fold reads it)
      .fold = [](const ir::FoldCtx& c) -> std::optional<ir::Folded> {
        const Type& rt = c.type(c.op.results[0]);
        const auto axis = static_cast<std::size_t>(c.op.attrs.integer("axis"));
        const bool last = std::all_of(rt.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, rt.shape.end(),
                                      [](int64_t d) { return d == 1; });
        const bool exact = rt.dtype == DType::i64 || (rt.dtype == DType::i32 && rt.shape[axis] <= (int64_t{1} << 31));
        if (!last || !exact || rt.shape[axis] == 0) return std::nullopt;
        return ir::Folded{ir::Known{.splat = {}, .ramp = rt.shape[axis]}};
      },
      .element = [](ElementCtx& c) -> llvm::Value* {
        const Type& rt = c.resultType();
        int64_t axis = c.op.attrs.integer("axis");
        llvm::Value* i = c.dims(c.index, rt.shape)[static_cast<std::size_t>(axis)];
        llvm::Type* ty = c.scalarType(rt.dtype);
        return is_floating(rt.dtype) ? c.b.CreateSIToFP(i, ty) : c.b.CreateSExtOrTrunc(i, ty);
      },
  });
}

} // namespace adjit::ops
