// adjit/error.h — the one exception type for user mistakes, and source locations.
#pragma once

#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace adjit {

/// A position in user code: a C++ file:line:column captured at trace time, or
/// a line:column in `.adj` text. An empty file means "unknown".
///
/// Every traced op carries one, so copying it must be cheap: `file` views
/// characters that live as long as the process (a `std::source_location`'s
/// file name, or a name interned by the constructor). Assign to `file` only
/// from such storage; the constructor takes any string.
struct Location {
  std::string_view file;
  uint32_t line = 0;
  uint32_t column = 0;

  /// Unknown.
  Location() = default;
  /// A position in `file`, whose name is interned (it may be a temporary).
  Location(std::string_view file, uint32_t line, uint32_t column);
  /// Captures the caller's position (used as a default argument).
  static Location from(const std::source_location& loc) {
    Location l;
    l.file = loc.file_name(); // static storage: no interning needed
    l.line = loc.line();
    l.column = loc.column();
    return l;
  }
  /// Whether the position is known.
  bool known() const { return line != 0; }
  /// "file:line:col" (or "line:col" when there is no file), empty if unknown.
  std::string str() const;
  friend bool operator==(const Location&, const Location&) = default;
};

/// Raised for every user mistake: a shape or dtype mismatch, malformed IR
/// text, a wrong call of a jitted function, a bad CLI flag. `what()` is the
/// whole message ("<where>: error: <message>"); `message()` and `location()`
/// give its parts.
class Error : public std::runtime_error {
public:
  explicit Error(std::string message, Location where = {});
  /// The message without the location: "add: incompatible shapes f32[3] and f32[4]".
  const std::string& message() const { return message_; }
  /// Where the mistake was made (may be unknown).
  const Location& location() const { return where_; }

private:
  std::string message_;
  Location where_;
};

/// Raised when one of adjit's internal invariants fails: always a bug in
/// adjit (please report it), never a mistake of yours. The message names
/// adjit's source file and line.
class InternalError : public std::logic_error {
public:
  /// Built from the message (which names adjit's file and line).
  using std::logic_error::logic_error;
};

} // namespace adjit
