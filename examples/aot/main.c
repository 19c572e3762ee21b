/* examples/aot/main.c — a plain C program calling code compiled ahead of time
 * by `adjit compile model.adj --vjp f --jvp f --map f`: no adjit or LLVM at run time. */
#include "model.h"

#include <stdio.h>
#include <string.h>

/* A sparse derivative's pattern (CSR, from the header) and values, row by row. */
static void printSparse(const char* name, int64_t rows, int64_t cols, int64_t nnz, int64_t colors, const int64_t* rowPtr,
                        const int64_t* colIdx, const double* values) {
  printf("%s: %lld x %lld, %lld nonzeros from %lld colors\n", name, (long long)rows, (long long)cols, (long long)nnz,
         (long long)colors);
  for (int64_t r = 0; r < rows; ++r) {
    printf("  row %lld:", (long long)r);
    for (int64_t k = rowPtr[r]; k < rowPtr[r + 1]; ++k) printf(" (%lld) %.5f", (long long)colIdx[k], values[k]);
    printf("\n");
  }
}

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

  // [snippet:aot-sparse]
  /* Sparse derivatives (--sparse-jacobian g --sparse-hessian h): the pattern is
   * static data in the header, the values one call. */
  const double x6[6] = {0.5, -1.0, 2.0, 1.5, -0.25, 3.0};
  double jac[g_jac_nnz], hess[h_hess_nnz];
  g_jac(x6, jac);
  h_hess(x6, hess);
  printSparse("g_jac", g_jac_rows, g_jac_cols, g_jac_nnz, g_jac_colors, g_jac_row_ptr, g_jac_col_idx, jac);
  printSparse("h_hess", h_hess_rows, h_hess_cols, h_hess_nnz, h_hess_colors, h_hess_row_ptr, h_hess_col_idx, hess);
  /* The _work twin allocates nothing: its scratch is the caller's (here static). */
  static _Alignas(16) unsigned char work[g_jac_WORK_BYTES + 1];
  double jac2[g_jac_nnz];
  g_jac_work(x6, jac2, work);
  // [/snippet:aot-sparse]
  printf("g_jac_work: %s\n", memcmp(jac, jac2, sizeof jac) == 0 ? "the same values, nothing allocated" : "DIFFERENT values");
  return 0;
}
