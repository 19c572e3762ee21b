// bench/UnrolledLstm.h — ADBench's LSTM cell (two layers of 14-wide diagonal
// gates) unrolled over a constant character sequence: many tiny elementwise
// ops with long dependence chains. The compile-time benchmark times it; a
// unit test checks that its gradient's loops repeat with the steps.
#pragma once

#include <adjit/adjit.h>

namespace adjit::programs {

/// ADBench's LSTM objective over `seq` (steps × 14) with the gate weights and
/// biases in the rows of `p` (4 × 56): the log-likelihood of each next
/// character given the state after the previous one.
inline Tensor unrolledLstm(const Tensor& p, const Tensor& seq, int steps) {
  const int64_t b = 14;
  auto gate = [&](int64_t r, int64_t k) { return p(r, range(k * b, (k + 1) * b)); };
  Tensor h[2] = {zeros_like(gate(0, 0)), zeros_like(gate(0, 0))}, c[2] = {h[0], h[1]};
  Tensor total = zeros_like(sum(gate(0, 0)));
  for (int t = 0; t + 1 < steps; ++t) {
    Tensor y = seq(t);
    for (int l = 0; l < 2; ++l) {
      Tensor f = sigmoid(y * gate(2 * l, 0) + gate(2 * l + 1, 0)), i = sigmoid(h[l] * gate(2 * l, 1) + gate(2 * l + 1, 1));
      Tensor o = sigmoid(y * gate(2 * l, 2) + gate(2 * l + 1, 2)), g = tanh(h[l] * gate(2 * l, 3) + gate(2 * l + 1, 3));
      c[l] = c[l] * f + i * g;
      h[l] = o * tanh(c[l]);
      y = h[l];
    }
    total = total + sum(seq(t + 1) * (y - log(sum(exp(y)) + 2.0)));
  }
  return total;
}

} // namespace adjit::programs
