// adjit/autodiff.h — every differentiation API: reverse mode (grad,
// value_and_grad, vjp: adjit/reverse.h), forward mode (jvp, linearize,
// jacfwd, jacrev, hessian, hvp: adjit/forward.h) and TensorFlow's
// (gradients, GradientTape, ForwardAccumulator: adjit/tf.h).
#pragma once

#include <adjit/forward.h>
#include <adjit/reverse.h>
#include <adjit/tf.h>
