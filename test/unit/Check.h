// test/unit/Check.h — helpers: run a function three ways (expected values,
// reference interpreter, JIT) and record which ops the tests exercised.
#pragma once

#include "ir/IR.h"
#include "ir/Text.h"

#include <adjit/adjit.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

namespace adjit::test {

/// A one-op function @f applying the elementwise op `name` of `arity`
/// operands to f64[3] parameters: the table tests' example for ops that
/// carry none of their own.
inline std::string elementwiseExample(std::string_view name, int arity) {
  std::string params, args;
  for (int i = 0; i < arity; ++i) {
    params += (i ? ", %" : "%") + std::to_string(i) + ": f64[3]";
    args += (i ? ", %" : "%") + std::to_string(i);
  }
  return "func @f(" + params + ") -> (f64[3]) {\n  %r = " + std::string(name) + "(" + args +
         ") : f64[3]\n  return %r\n}\n";
}

/// The table tests' example for op `name`: a small .adj module whose function
/// @f (f64 parameters) uses the op (op_examples.inc), or null where the op has
/// none (plain floating elementwise ops get elementwiseExample).
inline const char* opExample(std::string_view name) {
  static const std::map<std::string_view, const char*> examples = {
#include "op_examples.inc"
  };
  auto it = examples.find(name);
  return it == examples.end() ? nullptr : it->second;
}

/// Op kinds seen in any module checked through `check3` (or `agrees`).
std::set<ir::OpKind>& exercisedOps();
/// The names of the ops of the table none of those checks has seen (main.cpp
/// asks once every test case has run).
std::vector<std::string_view> unexercisedOps();

/// Random arguments for function f's parameters, every element in [0.3,
/// 1.7]: inside every op's domain, away from kinks (integers get 0 or 1).
inline std::vector<Array> randomArgs(const ir::Function& f, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(0.3, 1.7);
  std::vector<Array> args;
  for (ir::ValueId p : f.params) {
    Array a(f.type(p));
    for (int64_t i = 0; i < a.size(); ++i) a.set(i, d(rng));
    args.push_back(std::move(a));
  }
  return args;
}

/// The bytes of an Array, for bitwise comparison.
inline std::string bytesOf(const Array& a) { return std::string(static_cast<const char*>(a.raw()), a.bytes()); }

inline bool close(const Array& got, const Array& want, double rtol, std::string* why) {
  if (got.type() != want.type()) {
    *why = "type " + got.type().str() + " != " + want.type().str();
    return false;
  }
  for (int64_t i = 0; i < got.size(); ++i) {
    double g = got.at(i), w = want.at(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;
    if (std::fabs(g - w) <= rtol * std::max(1.0, std::fabs(w))) continue;
    *why = "element " + std::to_string(i) + ": got " + std::to_string(g) + ", want " + std::to_string(w) + "\n got  " +
           got.str() + "\n want " + want.str();
    return false;
  }
  return true;
}

#define ADJIT_CHECK_CLOSE(got, want, rtol)                                                                   \
  do {                                                                                                       \
    std::string why_;                                                                                        \
    bool ok_ = ::adjit::test::close((got), (want), (rtol), &why_);                                           \
    INFO(why_);                                                                                              \
    CHECK(ok_);                                                                                              \
  } while (0)

/// Checks f(inputs) == expected by the interpreter and by the JIT (at -O2 and
/// -O0), and that the traced module prints, parses and prints identically.
template <class F>
void check3(F f, const std::vector<Array>& inputs, const Array& expected, double rtol = 1e-6) {
  std::vector<Type> types;
  for (const Array& a : inputs) types.push_back(a.type());
  Module m = trace(f, types);
  for (const auto& fn : m.impl().functions)
    for (const auto& op : fn->ops) exercisedOps().insert(op.kind);
  m.verify();
  std::string text = m.str(true);
  CHECK(Module::parse(text).str(true) == text);
  // The traced function takes one vector parameter; the interpreter takes its leaves.
  Array viaInterp = m.interpret("f", inputs).at(0);
  ADJIT_CHECK_CLOSE(viaInterp, expected, rtol);
  for (int level : {2, 0}) {
    auto jf = jit(f, {.opt_level = level});
    Array viaJit = jf(inputs);
    ADJIT_CHECK_CLOSE(viaJit, expected, rtol);
  }
}

/// An array of `v`, 1-D unless a shape is given; one value without a shape is a scalar.
template <class T> Array arrayOf(std::vector<T> v, Shape s) {
  if (s.empty() && v.size() != 1) s = {static_cast<int64_t>(v.size())};
  return Array(v, s);
}
inline Array f32(std::vector<float> v, Shape s = {}) { return arrayOf(std::move(v), std::move(s)); }
inline Array f64(std::vector<double> v, Shape s = {}) { return arrayOf(std::move(v), std::move(s)); }
inline Array i32(std::vector<int32_t> v, Shape s = {}) { return arrayOf(std::move(v), std::move(s)); }
inline Array i1(std::vector<bool> v, Shape s = {}) { return arrayOf(std::move(v), std::move(s)); }

/// The adjit::Error that f raises (a test failure if it raises none).
template <class F> Error errorOf(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no adjit::Error was raised");
  return Error("");
}

// Batches, for the tests of vmap and map.

/// Example b of `a` along `axis` (negative counts from the end), a copy.
inline Array exampleOf(const Array& a, int64_t axis, int64_t b) {
  const Shape& s = a.shape();
  if (axis < 0) axis += static_cast<int64_t>(s.size());
  const std::size_t ax = static_cast<std::size_t>(axis);
  int64_t outer = 1, inner = 1;
  for (std::size_t d = 0; d < ax; ++d) outer *= s[d];
  for (std::size_t d = ax + 1; d < s.size(); ++d) inner *= s[d];
  Shape rs = s;
  rs.erase(rs.begin() + axis);
  Array out(Type{a.dtype(), rs});
  const std::size_t chunk = static_cast<std::size_t>(inner) * size_of(a.dtype());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(static_cast<char*>(out.raw()) + static_cast<std::size_t>(o) * chunk,
                static_cast<const char*>(a.raw()) + static_cast<std::size_t>(o * s[ax] + b) * chunk, chunk);
  return out;
}
/// Example b of `a` along axis 0.
inline Array row(const Array& a, int64_t b) { return exampleOf(a, 0, b); }

/// Stacks equal-typed arrays along a new axis `axis` (negative counts from the end).
inline Array stackAt(const std::vector<Array>& rows, int64_t axis) {
  const Shape& one = rows.at(0).shape();
  if (axis < 0) axis += static_cast<int64_t>(one.size()) + 1;
  Shape s = one;
  s.insert(s.begin() + axis, static_cast<int64_t>(rows.size()));
  Array r(Type{rows[0].dtype(), s});
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= one[static_cast<std::size_t>(d)];
  const std::size_t inner = rows[0].bytes() / static_cast<std::size_t>(outer == 0 ? 1 : outer);
  char* out = static_cast<char*>(r.raw());
  for (int64_t o = 0; o < outer; ++o)
    for (const Array& x : rows) {
      std::memcpy(out, static_cast<const char*>(x.raw()) + inner * static_cast<std::size_t>(o), inner);
      out += inner;
    }
  return r;
}
/// Stacks equal-typed arrays along a new axis 0.
inline Array stackRows(const std::vector<Array>& rows) { return stackAt(rows, 0); }

/// Values in [-1, 1] from `seed`, multiples of 1/1000 (exact in f32 and f64).
inline Array randomArray(Type t, uint32_t seed) {
  Array a(t);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < a.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    a.set(i, static_cast<double>((x >> 8) % 2001) / 1000.0 - 1.0);
  }
  return a;
}

/// Sets a Jacobian policy (batched, scan, automatic) for its lifetime.
struct WithJacobianPolicy {
  detail::JacobianPolicy before;
  explicit WithJacobianPolicy(const detail::JacobianPolicy& p) : before(detail::setJacobianPolicy(p)) {}
  ~WithJacobianPolicy() { detail::setJacobianPolicy(before); }
  WithJacobianPolicy(const WithJacobianPolicy&) = delete;
  WithJacobianPolicy& operator=(const WithJacobianPolicy&) = delete;
};

} // namespace adjit::test
