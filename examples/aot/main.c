/* examples/aot/main.c — a plain C program calling code compiled ahead of time
 * by `adjit compile model.adj --vjp f --jvp f`: no adjit or LLVM at run time. */
#include "model.h"

#include <stdio.h>

int main(void) {
  const float x[4] = {0.5f, -1.0f, 2.0f, 30.0f};
  const float w = 1.5f;
  float y = 0;
  f(x, &w, &y); /* the primal */
  printf("f:     y = %.5f\n", y);

  f_residuals res; /* what the forward keeps for the backward */
  float y2 = 0;
  f_fwd(x, &w, &y2, &res);
  printf("f_fwd: y = %.5f\n", y2);

  const float dy = 1.0f;
  float dx[4], dw;
  f_bwd(&res, &dy, dx, &dw);
  printf("f_bwd: dx = [%.5f, %.5f, %.5f, %.5f], dw = %.5f\n", dx[0], dx[1], dx[2], dx[3], dw);

  /* Forward mode: f and its derivative along the tangents (tx, tw). */
  const float tx[4] = {1.0f, 0.0f, -1.0f, 0.5f};
  const float tw = 2.0f;
  float y3 = 0, ty = 0;
  f_jvp(x, &w, tx, &tw, &y3, &ty);
  printf("f_jvp: y = %.5f, ty = %.5f\n", y3, ty);
  return 0;
}
