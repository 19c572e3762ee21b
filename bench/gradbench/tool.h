// bench/gradbench/tool.h — GradBench's C++ tool convention, for adjit's evals.
//
//   bin/EVAL INPUT.json FUNCTION
//
// reads INPUT.json (the `input` object of the eval's `evaluate` message, with
// its optional `min_runs` and `min_seconds`), makes FUNCTION from it (timed as
// `prepare`: parsing and set-up only; no compilation, which GradBench's rules
// count in the first evaluation), evaluates it at least `min_runs` times and
// for at least `min_seconds`, then prints the last output as one JSON line,
// the `prepare` timing and one `evaluate` timing per run, in that order:
//
//   {...output...}
//   {"name": "prepare", "nanoseconds": N}
//   {"name": "evaluate", "nanoseconds": N}   (one line per run; the first is the cold one)
//
// A bad command line, an unreadable input or an adjit::Error prints one line
// to stderr and exits 1. Every eval runs adjit on one thread.
#pragma once

#include <adjit/adjit.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gradbench {

using json = nlohmann::json;

/// adjit's options for every eval: one thread, as the suite compares tools.
inline adjit::JitOptions jitOptions(std::string name) { return {.name = std::move(name), .threads = 1}; }

/// One function of an eval, made from its input.
class Function {
public:
  virtual ~Function() = default;
  /// One timed evaluation (the first one compiles).
  virtual void evaluate() = 0;
  /// The last evaluation's output, in the eval's JSON layout.
  virtual json output() const = 0;
};

/// Makes a function from the eval's input object.
using Prepare = std::function<std::unique_ptr<Function>(const json& input)>;

/// The tool's main: `functions` maps each function name the eval sends to
/// how it is made. Returns the process's exit code.
int main(int argc, char** argv, const std::map<std::string, Prepare>& functions);

/// The numbers of a JSON array (nested arrays flattened in order).
std::vector<double> numbers(const json& j);

/// A row-major f64 Array of `shape` from a JSON array (nested or flat).
adjit::Array array(const json& j, std::vector<int64_t> shape);

} // namespace gradbench
