// autodiff/Check.cpp — the host arithmetic behind check_grads.
#include <adjit/check.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace adjit::detail {

Array randomLike(const Type& t, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  Array a(Type{DType::f64, t.shape});
  for (int64_t i = 0; i < a.size(); ++i) a.set(i, normal(rng));
  return a;
}

Array asF64(const Array& a) {
  if (!is_floating(a.dtype()) || a.dtype() == DType::f64) return a;
  Array r(Type{DType::f64, a.shape()});
  for (int64_t i = 0; i < a.size(); ++i) r.set(i, a.at(i));
  return r;
}

Array axpy(const Array& x, double s, const Array& v) {
  Array r(Type{DType::f64, x.shape()});
  for (int64_t i = 0; i < r.size(); ++i) r.set(i, x.at(i) + s * v.at(i));
  return r;
}

double dotAll(const Array& a, const Array& b) {
  double total = 0;
  for (int64_t i = 0; i < a.size(); ++i) total += a.at(i) * b.at(i);
  return total;
}

void checkGradsOptions(const CheckGradsOptions& o, const Location& loc) {
  if (o.order < 1 || o.order > 3) throw Error(fmt::format("check_grads: order must be 1, 2 or 3, got {}", o.order), loc);
  if (!(o.eps > 0)) throw Error(fmt::format("check_grads: eps must be positive, got {}", o.eps), loc);
  for (const std::string& m : o.modes)
    if (m != "rev" && m != "fwd") throw Error("check_grads: unknown mode '" + m + "' (known: rev, fwd)", loc);
}

bool compareDirectional(double autodiff, double finite, const CheckGradsOptions& o, std::size_t argument, int order,
                        GradCheckWorst& worst) {
  const double scale = std::max(std::fabs(autodiff), std::fabs(finite));
  const double error = std::fabs(autodiff - finite);
  const double relative = scale > 0 ? error / scale : 0.0;
  const bool ok = std::isfinite(autodiff) && std::isfinite(finite) && error <= o.atol + o.rtol * scale;
  if (!ok && (worst.relative < 0 || relative > worst.relative || !std::isfinite(relative)))
    worst = {std::isfinite(relative) ? relative : INFINITY, autodiff, finite, argument, order};
  return ok;
}

void throwGradCheck(const GradCheckWorst& w, const CheckGradsOptions& o, const Location& loc, const char* mode) {
  throw Error(fmt::format("check_grads: the {}-mode {} of argument {} disagrees with central finite differences: "
                          "along a random direction it is {:.9g} by autodiff and {:.9g} by finite differences "
                          "(relative error {:.3g}, rtol {:g})",
                          mode, w.order == 1 ? "derivative" : fmt::format("derivative of order {}", w.order), w.argument,
                          w.autodiff, w.finite, w.relative, o.rtol),
              loc);
}

} // namespace adjit::detail
