/* examples/aot/main.c — a plain C program calling code compiled ahead of time
 * by `adjit compile model.adj --vjp f --jvp f --map f`: no adjit or LLVM at run time. */
#include "model.h"

#include <stdio.h>

/* A threads hook (see model.h) that runs the chunks last to first, on this thread. */
static int hookCalls = 0;
static void lastToFirst(void (*fn)(void* ctx, int64_t chunk), void* ctx, int64_t n) {
  ++hookCalls;
  for (int64_t c = n - 1; c >= 0; --c) fn(ctx, c);
}

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

  // [snippet:aot-map]
  /* n instances at once, for any n: each buffer holds n of f's, one after another. */
  const float xs[3][4] = {{0.5f, -1.0f, 2.0f, 30.0f}, {1.0f, 2.0f, 3.0f, 4.0f}, {-0.5f, 0.25f, 0.0f, 1.0f}};
  const float ws[3] = {1.5f, -0.5f, 2.0f};
  float ys[3];
  f_map(2, &xs[0][0], ws, ys);
  printf("f_map(2): y = [%.5f, %.5f]\n", ys[0], ys[1]);
  adjit_parallel_for_hook = lastToFirst; /* one chunk per instance, run wherever the hook says */
  f_map(3, &xs[0][0], ws, ys);
  printf("f_map(3): y = [%.5f, %.5f, %.5f]\n", ys[0], ys[1], ys[2]);
  // [/snippet:aot-map]
  printf("f_map(3): the hook ran %d time\n", hookCalls);

  /* The gradient bundle, mapped: an array of n residual structs. */
  f_residuals rs[2];
  float ys2[2];
  const float dys[2] = {1.0f, 1.0f};
  float dxs[2][4], dws[2];
  f_fwd_map(2, &xs[0][0], ws, ys2, rs);
  f_bwd_map(2, rs, dys, &dxs[0][0], dws);
  printf("f_bwd_map(2): dx[1] = [%.5f, %.5f, %.5f, %.5f], dw = [%.5f, %.5f]\n", dxs[1][0], dxs[1][1], dxs[1][2], dxs[1][3],
         dws[0], dws[1]);

  /* Forward mode, mapped: the same tangents for both instances. */
  const float txs[2][4] = {{1.0f, 0.0f, -1.0f, 0.5f}, {1.0f, 0.0f, -1.0f, 0.5f}}, tws[2] = {2.0f, 2.0f};
  float ys3[2], tys[2];
  f_jvp_map(2, &xs[0][0], ws, &txs[0][0], tws, ys3, tys);
  printf("f_jvp_map(2): ty = [%.5f, %.5f]\n", tys[0], tys[1]);
  return 0;
}
