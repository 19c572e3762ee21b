// adjit/module.h — a traced (or parsed) IR module: functions over static tensor types.
#pragma once

#include <adjit/array.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace adjit {
namespace ir { struct Module; }

/// An IR module: named functions in SSA form. Its text form (`.adj`) prints
/// and parses back identically.
class Module {
public:
  Module();
  explicit Module(std::shared_ptr<ir::Module> impl) : impl_(std::move(impl)) {}

  /// The `.adj` text; with `locations`, ops carry `; loc("file":line:col)`.
  std::string str(bool locations = false) const;
  /// Parses `.adj` text. Throws adjit::Error at `filename:line:col` on malformed text.
  static Module parse(std::string_view text, std::string_view filename = "<input>");
  /// Reads and parses a `.adj` file.
  static Module load(const std::string& path);
  /// Writes the `.adj` text (with locations) to `path`, atomically. Pending
  /// custom-gradient VJPs are traced first, so the file can be differentiated
  /// (e.g. by `adjit compile --vjp`) in another process.
  void save(const std::string& path) const;

  /// Copies the functions of `other` into this module (names must not clash).
  void add(const Module& other);
  /// Names of the module's functions, in order.
  std::vector<std::string> function_names() const;
  /// Checks the module is well formed; throws adjit::Error naming the op otherwise.
  void verify() const;
  /// Runs function `name` with the reference interpreter.
  std::vector<Array> interpret(std::string_view name, const std::vector<Array>& args) const;

  /// Internal: the IR itself (lib/ir/IR.h), for adjit's own tools and tests.
  ir::Module& impl() { return *impl_; }
  const ir::Module& impl() const { return *impl_; }

private:
  std::shared_ptr<ir::Module> impl_;
};

} // namespace adjit
