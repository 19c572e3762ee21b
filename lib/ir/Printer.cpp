// ir/Printer.cpp — prints modules in the `.adj` text form. Values are renumbered
// %0, %1, ... in definition order, attributes are sorted, floats are printed
// in the shortest form that reads back to the same bits.
#include "ir/Text.h"
#include "ir/OpInfo.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

namespace adjit::ir {
namespace {

std::string quote(std::string_view s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') { r += "\\n"; continue; }
    r += c;
  }
  return r + "\"";
}

template <class T> std::string floatStr(T v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return fmt::format("{}", v);
}

std::string element(const Array& a, int64_t i) {
  switch (a.dtype()) {
  case DType::f32: return floatStr(a.data<float>()[i]);
  case DType::f64: return floatStr(a.data<double>()[i]);
  case DType::i32: return std::to_string(a.data<int32_t>()[i]);
  case DType::i64: return std::to_string(a.data<int64_t>()[i]);
  case DType::i1: return a.data<uint8_t>()[i] ? "true" : "false";
  }
  return "?";
}

struct Names {
  std::unordered_map<ValueId, int> ids;
  std::string operator()(ValueId v) const {
    auto it = ids.find(v);
    std::string s = "%"; // appended, not "%" + ...: GCC 12 warns falsely (-Wrestrict) on that form
    s += std::to_string(it == ids.end() ? v : it->second);
    return s;
  }
};

std::string opText(const Function& f, const Op& op, const Names& name) {
  std::string s;
  for (std::size_t i = 0; i < op.results.size(); ++i) s += (i ? ", " : "") + name(op.results[i]);
  if (!op.results.empty()) s += " = ";
  s += ir::info(op.kind).name;
  for (std::size_t i = 0; i < op.callees.size(); ++i) s += (i ? ", @" : " @") + op.callees[i];
  s += "(";
  for (std::size_t i = 0; i < op.operands.size(); ++i) s += (i ? ", " : "") + name(op.operands[i]);
  s += ")";
  if (!op.attrs.entries().empty()) {
    s += " {";
    bool first = true;
    for (const auto& [k, v] : op.attrs.entries()) {
      s += (first ? "" : ", ") + k + " = " + printAttr(v);
      first = false;
    }
    s += "}";
  }
  if (!op.results.empty()) {
    s += " : ";
    for (std::size_t i = 0; i < op.results.size(); ++i) s += (i ? ", " : "") + f.type(op.results[i]).str();
  }
  return s;
}

} // namespace

std::string printAttr(const Attr& a) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>) {
          std::string s = floatStr(v);
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string s = "[";
          for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, DType>) return std::string(name_of(v));
        else if constexpr (std::is_same_v<T, std::string>) return quote(v);
        else {
          std::string s = "dense<" + v.type().str() + ", [";
          for (int64_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + element(v, i);
          return s + "]>";
        }
      },
      a);
}

std::string printOp(const Function& f, const Op& op) { return opText(f, op, Names{}); }

namespace {

void printTo(std::string& s, const Function& f, PrintOptions o) {
  Names name;
  int next = 0;
  for (ValueId p : f.params) name.ids[p] = next++;
  for (const Op& op : f.ops)
    for (ValueId r : op.results) name.ids[r] = next++;
  s += "func @";
  s += f.name;
  s += '(';
  for (std::size_t i = 0; i < f.params.size(); ++i) {
    if (i) s += ", ";
    s += name(f.params[i]);
    s += ": ";
    s += f.type(f.params[i]).str();
  }
  s += ") -> (";
  for (std::size_t i = 0; i < f.outputs.size(); ++i) {
    if (i) s += ", ";
    s += f.type(f.outputs[i]).str();
  }
  s += ") {\n";
  for (const Op& op : f.ops) {
    s += "  ";
    s += opText(f, op, name);
    if ((o.locations || (o.codeLocations && ir::info(op.kind).has(ir::kLocationInCode))) && op.loc.known())
      s += fmt::format("  ; loc({}:{}:{})", quote(op.loc.file), op.loc.line, op.loc.column);
    s += '\n';
  }
  s += "  return";
  for (std::size_t i = 0; i < f.outputs.size(); ++i) {
    s += i ? ", " : " ";
    s += name(f.outputs[i]);
  }
  s += "\n}\n";
}

} // namespace

std::string print(const Function& f, PrintOptions o) {
  std::string s;
  printTo(s, f, o);
  return s;
}

std::string print(const Module& m, PrintOptions o) {
  std::string s;
  for (std::size_t i = 0; i < m.functions.size(); ++i) {
    if (i) s += '\n';
    printTo(s, *m.functions[i], o);
  }
  return s;
}

namespace {

/// Appends fixed-width fields and length-prefixed strings, so no two modules
/// give the same bytes.
struct Bytes {
  std::string& s;
  template <class T> void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    s.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(std::string_view v) {
    put<uint64_t>(v.size());
    s.append(v);
  }
  void ids(std::span<const ValueId> v) {
    put<uint64_t>(v.size());
    s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(ValueId));
  }
  void type(const Type& t) {
    put(t.dtype);
    ints(t.shape);
  }
  void ints(const std::vector<int64_t>& v) {
    put<uint64_t>(v.size());
    s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  void attr(const Attr& a) {
    put<uint8_t>(static_cast<uint8_t>(a.index()));
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>>) ints(v);
          else if constexpr (std::is_same_v<T, std::string>) str(v);
          else if constexpr (std::is_same_v<T, Array>) {
            type(v.type());
            s.append(static_cast<const char*>(v.raw()), v.bytes());
          } else put(v);
        },
        a);
  }
};

} // namespace

void appendAttrBytes(std::string& out, const Attr& a) { Bytes{out}.attr(a); }

namespace {

/// Bytes a fingerprint collects before handing them to a hash.
constexpr std::size_t kFingerprintPiece = 1 << 16;

/// Appends the fingerprint's bytes to `s`; calls flush() whenever `s` has
/// grown past a piece (flush may hand the bytes on and clear `s`).
template <class Flush> void fingerprintTo(const Module& m, PrintOptions o, std::string& s, Flush flush) {
  Bytes b{s};
  for (const auto& fp : m.functions) {
    const Function& f = *fp;
    b.str(f.name);
    b.ids(f.params);
    for (ValueId p : f.params) b.type(f.type(p));
    b.ids(f.outputs);
    for (ValueId v : f.outputs) b.type(f.type(v));
    b.put<uint64_t>(f.ops.size());
    for (const Op& op : f.ops) {
      b.put(op.kind);
      b.ids(op.operands);
      b.ids(op.results);
      for (ValueId r : op.results) b.type(f.type(r));
      b.put<uint64_t>(op.callees.size());
      for (const std::string& c : op.callees) b.str(c);
      b.put<uint64_t>(op.attrs.entries().size());
      for (const auto& [k, v] : op.attrs.entries()) {
        b.str(k);
        b.attr(v);
      }
      const bool loc = (o.locations || (o.codeLocations && ir::info(op.kind).has(ir::kLocationInCode))) && op.loc.known();
      b.put<uint8_t>(loc);
      if (loc) {
        b.str(op.loc.file);
        b.put(op.loc.line);
        b.put(op.loc.column);
      }
      if (s.size() >= kFingerprintPiece) flush();
    }
  }
}

} // namespace

std::string fingerprint(const Module& m, PrintOptions o) {
  std::string s;
  fingerprintTo(m, o, s, [] {});
  return s;
}

void fingerprint(const Module& m, PrintOptions o, LongHash& hash) {
  std::string s;
  s.reserve(2 * kFingerprintPiece);
  fingerprintTo(m, o, s, [&] {
    hash.update(s);
    s.clear();
  });
  hash.update(s);
}

} // namespace adjit::ir
