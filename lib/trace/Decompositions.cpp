// trace/Decompositions.cpp — the C++ API of the decompositions (qr, eigh,
// svd): each records one op with several results (ops/LinalgSpectral.cpp).
#include "trace/Tracer.h"

#include <adjit/decompositions.h>

namespace adjit::linalg {

namespace {

/// Records op k on a and returns its results.
std::vector<Tensor> decompose(const char* api, ir::OpKind k, const Tensor& a, const std::source_location& l) {
  const Location loc = Location::from(l);
  detail::TraceState& s = detail::traceOf(a, api, loc);
  const ir::ValueId v = detail::valueOf(a, api, loc);
  std::vector<Tensor> out;
  for (ir::ValueId r : s.builder.create(k, {v}, {}, {}, s.locOverride ? *s.locOverride : loc)) out.push_back(detail::wrap(s, r));
  return out;
}

} // namespace

QR qr(const Tensor& a, std::source_location loc) {
  std::vector<Tensor> r = decompose("qr", ir::OpKind::Qr, a, loc);
  return {r[0], r[1]};
}

Eigh eigh(const Tensor& a, std::source_location loc) {
  std::vector<Tensor> r = decompose("eigh", ir::OpKind::Eigh, a, loc);
  return {r[0], r[1]};
}

SVD svd(const Tensor& a, std::source_location loc) {
  std::vector<Tensor> r = decompose("svd", ir::OpKind::Svd, a, loc);
  return {r[0], r[1], r[2]};
}

} // namespace adjit::linalg
