// bench/gradbench/saddle.cpp — GradBench's `saddle` eval: min over p1 of max
// over p2 of f(p1, p2) = |p1|^2 - |p2|^2, both by the descent of descent.h
// from the input's start. The inner argmax (its gradient in p2: the inner
// derivative) runs inside the outer objective, whose gradient in p1
// differentiates through the inner descent's loop (the outer derivative).
// Then p2 = argmax f(p1, .) from the start again, its gradient in the outer
// mode as the spec asks. Functions `ff`, `fr`, `rf`, `rr`: outer mode, then
// inner mode (f = forward, jacfwd; r = reverse, grad). Output [p1, p2], one
// compiled function of the start.
#include "descent.h"
#include "tool.h"

using namespace adjit;

namespace {

/// The eval's f at p1, p2 ([2] each).
Tensor objective(const Tensor& p1, const Tensor& p2) { return sum(p1 * p1) - sum(p2 * p2); }

/// The argmax over p2 of f(p1, .) from `start`, gradients in the mode given.
Tensor innerArgmax(const Tensor& p1, const Tensor& start, bool forward) {
  auto f = [&](const Tensor& p2) { return objective(p1, p2); };
  return gradbench::argmax(f, [&](const Tensor& p2) { return gradbench::gradientOf(forward, f, p2); }, start);
}

/// [p1, p2] from the start ([2]).
Tensor saddle(const Tensor& start, bool outerForward, bool innerForward) {
  auto maxOver = [&](const Tensor& p1) { return objective(p1, innerArgmax(p1, start, innerForward)); };
  Tensor p1 = gradbench::argmin(maxOver, [&](const Tensor& p1) { return gradbench::gradientOf(outerForward, maxOver, p1); }, start);
  Tensor p2 = innerArgmax(p1, start, outerForward);
  return concatenate({p1, p2}, 0);
}

class Saddle : public gradbench::Function {
public:
  Saddle(const gradbench::json& input, bool outerForward, bool innerForward)
      : start_(gradbench::array(input.at("start"), {2})),
        compiled_(jit(std::function<Tensor(Tensor)>([outerForward, innerForward](Tensor s) { return saddle(s, outerForward, innerForward); }),
                      gradbench::jitOptions(std::string("saddle.") + (outerForward ? "f" : "r") + (innerForward ? "f" : "r")))) {}
  void evaluate() override { result_ = compiled_(start_); }
  gradbench::json output() const override {
    std::vector<double> v(4);
    for (int64_t i = 0; i < 4; ++i) v[static_cast<size_t>(i)] = result_.at(i);
    return v;
  }

private:
  Array start_;
  Jitted<std::function<Tensor(Tensor)>> compiled_;
  Array result_;
};

gradbench::Prepare variant(bool outerForward, bool innerForward) {
  return [=](const gradbench::json& in) { return std::make_unique<Saddle>(in, outerForward, innerForward); };
}

} // namespace

int main(int argc, char** argv) {
  return gradbench::main(argc, argv, {{"ff", variant(true, true)}, {"fr", variant(true, false)}, {"rf", variant(false, true)}, {"rr", variant(false, false)}});
}
