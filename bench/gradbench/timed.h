// bench/gradbench/timed.h — a gradbench::Function made of two callables: the
// timed work (compiled on its first call) and the untimed conversion of its
// result to the eval's JSON output.
#pragma once

#include "tool.h"

#include <memory>
#include <type_traits>
#include <utility>

namespace gradbench {

/// `run()` is evaluated (and timed); `format(result)` makes the output.
template <class Run, class Format> class Timed : public Function {
public:
  Timed(Run run, Format format) : run_(std::move(run)), format_(std::move(format)) {}
  void evaluate() override { result_ = run_(); }
  json output() const override { return format_(result_); }

private:
  Run run_;
  Format format_;
  std::invoke_result_t<Run&> result_{};
};

template <class Run, class Format> std::unique_ptr<Function> timed(Run run, Format format) {
  return std::make_unique<Timed<Run, Format>>(std::move(run), std::move(format));
}

} // namespace gradbench
