// adjit/error.h — the one exception type for user mistakes, and source locations.
#pragma once

#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>

namespace adjit {

/// A position in user code: a C++ file:line:column captured at trace time, or
/// a line:column in `.adj` text. An empty file means "unknown".
struct Location {
  std::string file;
  uint32_t line = 0;
  uint32_t column = 0;

  /// Captures the caller's position (used as a default argument).
  static Location from(const std::source_location& loc) {
    return {loc.file_name(), loc.line(), loc.column()};
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
