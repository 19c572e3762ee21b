// bench/gradbench/call.h — a gradbench::Function that calls one jitted
// function on arguments made once from the input, and turns its last result
// into the eval's JSON output.
#pragma once

#include "tool.h"

#include <optional>
#include <tuple>
#include <utility>

namespace gradbench {

/// Calls `compiled(args...)` per evaluation (the first call compiles) and
/// keeps the result for `toJson`.
template <class Compiled, class ToJson, class... Args> class Call : public Function {
public:
  Call(Compiled compiled, ToJson toJson, Args... args)
      : compiled_(std::move(compiled)), toJson_(std::move(toJson)), args_(std::move(args)...) {}
  void evaluate() override { result_.emplace(std::apply(compiled_, args_)); }
  json output() const override { return toJson_(*result_); }

private:
  using Result = decltype(std::apply(std::declval<Compiled&>(), std::declval<std::tuple<Args...>&>()));
  Compiled compiled_;
  ToJson toJson_;
  std::tuple<Args...> args_;
  std::optional<Result> result_;
};

/// A Call as the unique_ptr a Prepare returns.
template <class Compiled, class ToJson, class... Args>
std::unique_ptr<Function> call(Compiled compiled, ToJson toJson, Args... args) {
  return std::make_unique<Call<Compiled, ToJson, Args...>>(std::move(compiled), std::move(toJson), std::move(args)...);
}

/// A scalar result as a JSON number.
inline json scalar(const adjit::Array& a) { return a.item<double>(); }
/// A result's numbers as a flat JSON list.
inline json list(const adjit::Array& a) { return a.to_vector<double>(); }

} // namespace gradbench
