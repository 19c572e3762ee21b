// bench/UnrolledLstm.h — ADBench's LSTM cell (layers of 14-wide diagonal
// gates, two by default) unrolled over a constant character sequence: many
// tiny elementwise ops with long dependence chains. The compile-time benchmark times it; a
// unit test checks that its gradient's loops repeat with the steps.
#pragma once

#include <adjit/adjit.h>

#include <vector>

namespace adjit::programs {

/// ADBench's LSTM objective over `seq` (steps × 14) with the gate weights and
/// biases in the rows of `p` (2 · layers × 56): the log-likelihood of each
/// next character given the state after the previous one.
inline Tensor unrolledLstm(const Tensor& p, const Tensor& seq, int steps, int layers = 2) {
  const int64_t b = 14;
  auto gate = [&](int64_t r, int64_t k) { return p(r, range(k * b, (k + 1) * b)); };
  std::vector<Tensor> h(static_cast<std::size_t>(layers), zeros_like(gate(0, 0))), c = h;
  Tensor total = zeros_like(sum(gate(0, 0)));
  for (int t = 0; t + 1 < steps; ++t) {
    Tensor y = seq(t);
    for (std::size_t l = 0; l < h.size(); ++l) {
      const int64_t w = 2 * static_cast<int64_t>(l); // the layer's weights' row
      Tensor f = sigmoid(y * gate(w, 0) + gate(w + 1, 0)), i = sigmoid(h[l] * gate(w, 1) + gate(w + 1, 1));
      Tensor o = sigmoid(y * gate(w, 2) + gate(w + 1, 2)), g = tanh(h[l] * gate(w, 3) + gate(w + 1, 3));
      c[l] = c[l] * f + i * g;
      h[l] = o * tanh(c[l]);
      y = h[l];
    }
    total = total + sum(seq(t + 1) * (y - log(sum(exp(y)) + 2.0)));
  }
  return total;
}

} // namespace adjit::programs
