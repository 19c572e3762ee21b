// ir/Text.h — the `.adj` text form: printing and parsing. Printing then parsing
// then printing gives identical text. `//` starts a comment; `; loc(...)` after
// an op records its source location.
//
//   func @f(%0: f32[3], %1: f32[]) -> (f32[]) {
//     %2 = broadcast_to(%1) {shape = [3]} : f32[3]
//     %3 = mul(%0, %2) : f32[3]            ; loc("model.cpp":12:7)
//     %4 = reduce_sum(%3) {axes = [0], keepdims = false} : f32[]
//     return %4
//   }
#pragma once

#include "ir/IR.h"
#include "support/Hash.h"

#include <string>
#include <string_view>

namespace adjit::ir {

struct PrintOptions {
  bool locations = false; ///< append `; loc("file":line:col)` to ops that have one
  bool codeLocations = false; ///< the same for ops whose compiled code reports it (kLocationInCode) only
};

std::string print(const Module& m, PrintOptions o = {});
std::string print(const Function& f, PrintOptions o = {});
/// One op, naming values by their ids (for diagnostics).
std::string printOp(const Function& f, const Op& op);
/// An attribute value in text form.
std::string printAttr(const Attr& a);

/// The bytes of what `print(m, o)` would show, in a binary form without
/// formatting (values keep their ids): equal for equal modules, built an order
/// of magnitude faster than the text. Cache keys hash it.
std::string fingerprint(const Module& m, PrintOptions o = {});
/// The same bytes fed to `hash` in pieces: a large module's key without its
/// fingerprint in memory (tens of megabytes for 200,000 ops).
void fingerprint(const Module& m, PrintOptions o, LongHash& hash);

/// Appends bytes that identify `a` exactly and delimit themselves (its
/// alternative, then fixed-width or length-prefixed data; arrays by type and
/// bytes): a fast key for comparing attributes.
void appendAttrBytes(std::string& out, const Attr& a);

/// Parses `.adj` text; errors are adjit::Error at `<filename>:line:col`.
std::unique_ptr<Module> parse(std::string_view text, std::string_view filename = "<input>");
/// One type, "f32[2,3]", and nothing else; errors point at `filename`:1:col,
/// counting columns from `column` (where the text starts in a longer line).
Type parseType(std::string_view text, std::string_view filename, uint32_t column = 1);

} // namespace adjit::ir
