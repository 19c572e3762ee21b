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
// The first evaluation's time is the cold one: tracing, adjit's passes, the
// first tier's code generation (JitOptions::tiers) and one run. Before the
// second evaluation the tool waits, untimed, for the optimised tier
// (adjit::wait_all_optimized), which compiles on a background thread, so the
// later times are the optimised code's: the steady state of a function
// called many times, which the suite's per-run times compare. Without the
// wait, a function whose runs take microseconds would run the first tier for
// every run the suite asks for.
//
// A bad command line, an unreadable input or an adjit::Error prints one line
// to stderr and exits 1. Every eval runs adjit on one thread.
#pragma once

#include <adjit/adjit.h>

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
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

/// A Function made of two callables: `run()`, evaluated and timed (a jitted
/// function compiles on its first call), and `format(result)`, the untimed
/// conversion of the last result to the eval's JSON output.
template <class Run, class Format> class Timed : public Function {
public:
  Timed(Run run, Format format) : run_(std::move(run)), format_(std::move(format)) {}
  void evaluate() override { result_.emplace(run_()); }
  json output() const override { return format_(*result_); }

private:
  Run run_;
  Format format_;
  std::optional<std::invoke_result_t<Run&>> result_;
};

template <class Run, class Format> std::unique_ptr<Function> timed(Run run, Format format) {
  return std::make_unique<Timed<Run, Format>>(std::move(run), std::move(format));
}

/// A Timed that calls `compiled(args...)` on arguments made once from the input.
template <class Compiled, class Format, class... Args>
std::unique_ptr<Function> call(Compiled compiled, Format format, Args... args) {
  return timed([compiled = std::move(compiled), ... args = std::move(args)]() mutable { return compiled(args...); },
               std::move(format));
}

/// A scalar result as a JSON number.
inline json scalar(const adjit::Array& a) { return a.item<double>(); }
/// A result's numbers as a flat JSON list.
inline json list(const adjit::Array& a) { return a.to_vector<double>(); }
/// A rank-0 result as a number, any other as a flat list.
inline json numbersOf(const adjit::Array& a) { return a.shape().empty() ? scalar(a) : list(a); }

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
