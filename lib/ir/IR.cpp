// ir/IR.cpp — attributes, functions and modules; dtype and type helpers.
#include "ir/IR.h"

#include "support/Assert.h"

#include <fmt/format.h>

#include <algorithm>

namespace adjit {

std::size_t size_of(DType t) {
  switch (t) {
  case DType::f32: case DType::i32: return 4;
  case DType::f64: case DType::i64: return 8;
  case DType::i1: return 1;
  }
  return 0;
}

std::string_view name_of(DType t) {
  switch (t) {
  case DType::f32: return "f32";
  case DType::f64: return "f64";
  case DType::i32: return "i32";
  case DType::i64: return "i64";
  case DType::i1: return "i1";
  }
  return "?";
}

int64_t num_elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return -1; // callers report negative dimensions in their own words
    if (__builtin_mul_overflow(n, d, &n) || n > kMaxElements)
      throw Error(fmt::format("shape {} has more than 2^62 elements", shape_str(s)));
  }
  return n;
}

std::size_t Type::bytes() const {
  const int64_t n = size();
  if (n < 0) return 0;
  if (n > kMaxElements / static_cast<int64_t>(size_of(dtype)))
    throw Error(fmt::format("{} takes more than 2^62 bytes", str()));
  return static_cast<std::size_t>(n) * size_of(dtype);
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) r += ','; // not (i ? "," : "") + ...: GCC 12 warns falsely (-Wrestrict)
    r += std::to_string(s[i]);
  }
  return r + "]";
}

std::string Type::str() const { return std::string(name_of(dtype)) + shape_str(shape); }

} // namespace adjit

namespace adjit::ir {

void Attrs::set(std::string name, Attr value) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  if (it != entries_.end() && it->first == name) it->second = std::move(value);
  else entries_.insert(it, {std::move(name), std::move(value)});
}

const Attr* Attrs::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.first == name) return &e.second;
  return nullptr;
}

template <class T> static const T& get(const Attrs& a, std::string_view name) {
  const Attr* v = a.find(name);
  ADJIT_ASSERT(v && std::holds_alternative<T>(*v), "attribute '" + std::string(name) + "' missing or mistyped");
  return std::get<T>(*v);
}

int64_t Attrs::integer(std::string_view n) const { return get<int64_t>(*this, n); }
bool Attrs::boolean(std::string_view n) const { return get<bool>(*this, n); }
const std::vector<int64_t>& Attrs::ints(std::string_view n) const { return get<std::vector<int64_t>>(*this, n); }
DType Attrs::dtype(std::string_view n) const { return get<DType>(*this, n); }
const Array& Attrs::array(std::string_view n) const { return get<Array>(*this, n); }
const std::string& Attrs::string(std::string_view n) const { return get<std::string>(*this, n); }

std::vector<Type> Function::paramTypes() const {
  std::vector<Type> r;
  for (ValueId v : params) r.push_back(type(v));
  return r;
}

std::vector<Type> Function::resultTypes() const {
  std::vector<Type> r;
  for (ValueId v : outputs) r.push_back(type(v));
  return r;
}

static std::string typeList(const std::vector<Type>& ts) {
  std::string s = "(";
  for (std::size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].str();
  return s + ")";
}

std::string Function::signature() const { return typeList(paramTypes()) + " -> " + typeList(resultTypes()); }

Function* Module::lookup(std::string_view name) {
  for (auto& f : functions)
    if (f->name == name) return f.get();
  return nullptr;
}

const Function* Module::lookup(std::string_view name) const {
  return const_cast<Module*>(this)->lookup(name);
}

Function& Module::add(const std::string& base) {
  std::string name = base;
  for (int i = 1; lookup(name); ++i) name = base + "." + std::to_string(i);
  functions.push_back(std::make_unique<Function>());
  functions.back()->name = name;
  return *functions.back();
}

std::unique_ptr<Module> Module::clone() const {
  auto m = std::make_unique<Module>();
  for (const auto& f : functions) m->functions.push_back(std::make_unique<Function>(*f));
  for (const auto& [k, v] : lazyVjps) m->lazyVjps[k] = copyLazyVjp(*v); // not shared: see copyLazyVjp
  m->derived = derived;
  return m;
}

} // namespace adjit::ir
