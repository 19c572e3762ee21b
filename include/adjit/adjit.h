// adjit/adjit.h — the whole public API: trace C++ functions over adjit::Tensor
// into IR, and compile them to native code through LLVM.
#pragma once

#include <adjit/array.h>
#include <adjit/autodiff.h>
#include <adjit/check.h>
#include <adjit/control_flow.h>
#include <adjit/conv.h>
#include <adjit/custom_gradient.h>
#include <adjit/debug.h>
#include <adjit/decompositions.h>
#include <adjit/dtype.h>
#include <adjit/error.h>
#include <adjit/jit.h>
#include <adjit/linalg.h>
#include <adjit/map.h>
#include <adjit/module.h>
#include <adjit/random.h>
#include <adjit/sparse.h>
#include <adjit/sparse_derivatives.h>
#include <adjit/tensor.h>
#include <adjit/trace.h>
#include <adjit/variable.h>
#include <adjit/vmap.h>
