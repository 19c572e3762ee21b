#!/usr/bin/python3
"""Expected values and gradients of fixed linear-algebra programs by
PyTorch's float64 autograd: an independent reference for test_linalg.cpp.

Each program maps inputs A (and, for two-operand programs, B) to the scalar
sum(W * f(A, B)) with fixed random weights W shaped like f's result. For each
this writes the program's op and numeric parameters, A, B, W, the value, the
gradients with respect to A and B, and (for lu) the pivots and permutation as
C++ initialisers to torch_linalg_expected.inc, which the test compares with
adjit's compiled value and gradient (torchProgram in test_linalg.cpp writes
the same programs with adjit).

Where adjit's convention is not PyTorch's, the program here converts:
 - triangular_solve (lax.linalg's flags): transpose_a is solve_triangular on
   A^T with the other triangle named, left_side false is left=False;
 - lu: the factors, and a singular matrix's zero pivot and NaN gradient, are
   the same (lu_factor_ex, which does not refuse a singular matrix); adjit's
   pivots count from 0 (torch's from 1); adjit's permutation p has P a = L U
   with row i of P a row p[i] of a, torch.linalg.lu has a = P L U, so p[i] is
   the row of torch's P with its 1 in column i;
 - cholesky without symmetrize_input reads a's lower triangle, as torch's,
   but torch's gradient assumes a symmetric a: the reference differentiates
   the symmetric matrix built from a's lower triangle;
 - trace with an offset, on a batch: torch.trace has neither, so the sum of
   torch.diagonal; diag of a matrix is torch.diagonal where torch.diag
   raises (an offset past the matrix);
 - outer flattens its operands first, as numpy's (torch.outer takes vectors);
 - norm is a vector norm over the given axes (torch.linalg.vector_norm); both
   split the gradient at a tie of |x| for ord +-inf evenly among the tied
   elements (the "ties" programs).

Run by hand after changing the programs (Debian's python3-torch; the test
itself needs no Python):
    /usr/bin/python3 test/unit/torch_linalg.py > test/unit/torch_linalg_expected.inc
"""
import math

import torch

torch.set_default_dtype(torch.float64)
N, K = 4, 2
INF = math.inf


def uniform(g, *shape):
    return torch.rand(*shape, generator=g) * 2 - 1


def spd(g):
    x = uniform(g, N, N)
    return x @ x.T + N * torch.eye(N)


def spd_batch(g, batch, n):
    x = uniform(g, batch, n, n)
    return x @ x.mT + n * torch.eye(n)


def asymmetric_spd(g):
    return spd(g) + uniform(g, N, N).triu(1)


def general(g, n=N, batch=()):
    # a permuted, scaled identity added: well conditioned, and partial pivoting has rows to swap
    perm = [1, 3, 0, 2] if n == 4 else torch.roll(torch.arange(n), 1)
    return uniform(g, *batch, n, n) + 2 * torch.eye(n)[perm]


def triangular(g, batch=(), n=N):
    # both triangles and the diagonal random (the solve must not read what its flags exclude); a diagonal
    # of magnitude 1.5 to 2.5 keeps the solve well conditioned
    x = uniform(g, *batch, n, n)
    d = (torch.rand(*batch, n, generator=g) + 1.5) * torch.sign(uniform(g, *batch, n))
    return x - torch.diag_embed(torch.diagonal(x, 0, -2, -1)) + torch.diag_embed(d)


def tied_pivots(g):
    # column 0 has two rows of equal magnitude and opposite sign (rows 1 and 3): the first is the pivot;
    # after that step the values are no longer round, so later columns' ties are not constructed
    a = uniform(g, N, N)
    a[:, 0] = torch.tensor([0.5, -2.0, 1.0, 2.0])
    return a


def fixed(*rows):
    return lambda g: torch.tensor(rows)


def rand(*shape):
    return lambda g: uniform(g, *shape)


def tri_solve(lower, left, trans, unit):
    # adjit: op(a) x = b (left) or x op(a) = b, op(a) = a^T when trans; torch.linalg.solve_triangular
    # solves A X = B or X A = B with A upper unless told: a^T of a lower a is upper
    def f(a, b):
        m = a.mT if trans else a
        return torch.linalg.solve_triangular(m, b, upper=(lower == trans), left=left, unitriangular=unit)
    return f


def matrix_trace(offset):
    return lambda a, b: torch.diagonal(a, offset, -2, -1).sum(-1)


def vnorm(ord_, axes, keepdims):
    return lambda a, b: torch.linalg.vector_norm(a, ord_, dim=axes if axes else None, keepdim=keepdims)


# (name, op, parameters, A's maker, B's maker or None, f(A, B)). The first six are the original programs (their
# random values come first from the generator, so adding programs after them leaves theirs unchanged).
PROGRAMS = [
    ("cholesky", "cholesky", [], spd, rand(N, K), lambda a, b: torch.linalg.cholesky(a)),
    ("solve", "solve", [], general, rand(N, K), lambda a, b: torch.linalg.solve(a, b)),
    ("inv", "inv", [], general, rand(N, K), lambda a, b: torch.linalg.inv(a)),
    ("det", "det", [], general, rand(N, K), lambda a, b: torch.linalg.det(a).reshape(1)),
    ("slogdet", "slogdet", [], general, rand(N, K), lambda a, b: torch.linalg.slogdet(a)[1].reshape(1)),
    ("cho_solve", "cho_solve", [], spd, rand(N, K), lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a))),
]
# triangular_solve: every combination of the four flags; parameters {lower, left_side, transpose_a, unit_diagonal}
for lower in (True, False):
    for left in (True, False):
        for trans in (False, True):
            for unit in (False, True):
                flags = [lower, left, trans, unit]
                name = "triangular_solve %s %s%s%s" % ("lower" if lower else "upper", "left" if left else "right",
                                                         " transpose_a" if trans else "", " unit_diagonal" if unit else "")
                PROGRAMS.append((name, "triangular_solve", [float(v) for v in flags], triangular,
                                 rand(N, K) if left else rand(K, N), tri_solve(lower, left, trans, unit)))
PROGRAMS += [
    # batch axes broadcast ([2, 3, 3] with [1, 3, 2]); eight matrices take the across-the-batch kernel
    ("triangular_solve batch broadcast lower left", "triangular_solve", [1, 1, 0, 0],
     lambda g: triangular(g, (2,), 3), rand(1, 3, 2), tri_solve(True, True, False, False)),
    ("triangular_solve batch of 8 upper left transpose_a", "triangular_solve", [0, 1, 1, 0],
     lambda g: triangular(g, (8,), 3), rand(8, 3, 2), tri_solve(False, True, True, False)),
    ("triangular_solve order 10 lower right", "triangular_solve", [1, 0, 0, 0],
     lambda g: triangular(g, (), 10), rand(3, 10), tri_solve(True, False, False, False)),
]
# A batch of at least a SIMD vector's lanes of matrices of order up to 32 is solved across the batch (a kernel
# of its own per flag combination, with the gradient's solves too): every combination at a batch of 9 (8 lanes
# of f64 with AVX-512 and one left over), and that kernel's blocked (4 or more systems) and rolled (order above
# 8) forms.
for lower in (True, False):
    for left in (True, False):
        for trans in (False, True):
            for unit in (False, True):
                name = "triangular_solve batch of 9 %s %s%s%s" % (
                    "lower" if lower else "upper", "left" if left else "right", " transpose_a" if trans else "",
                    " unit_diagonal" if unit else "")
                PROGRAMS.append((name, "triangular_solve", [float(lower), float(left), float(trans), float(unit)],
                                 lambda g: triangular(g, (9,), 2), rand(9, 2, 1) if left else rand(9, 1, 2),
                                 tri_solve(lower, left, trans, unit)))
PROGRAMS += [
    ("triangular_solve batch of 8, 5 systems, lower left", "triangular_solve", [1, 1, 0, 0],
     lambda g: triangular(g, (8,), 3), rand(8, 3, 5), tri_solve(True, True, False, False)),
    ("triangular_solve batch of 8, 5 systems, upper right transpose_a unit_diagonal", "triangular_solve", [0, 0, 1, 1],
     lambda g: triangular(g, (8,), 3), rand(8, 5, 3), tri_solve(False, False, True, True)),
    ("triangular_solve batch of 8 order 9 upper left", "triangular_solve", [0, 1, 0, 0],
     lambda g: triangular(g, (8,), 9), rand(8, 9, 1), tri_solve(False, True, False, False)),
    # cholesky of a matrix that is not symmetric: symmetrize_input (the default, parameter 1) factors
    # (a + a^T) / 2; without it (0) only the lower triangle is read, as LAPACK's potrf and torch.linalg.cholesky,
    # whose gradient assumes a symmetric a (so torch differentiates the matrix built from a's lower triangle)
    ("cholesky symmetrized", "cholesky", [1], asymmetric_spd, None,
     lambda a, b: torch.linalg.cholesky((a + a.mT) / 2)),
    ("cholesky lower triangle only", "cholesky", [0], asymmetric_spd, None,
     lambda a, b: torch.linalg.cholesky(a.tril() + a.tril(-1).mT)),
    # cholesky, cho_solve and solve on a batch of 9 (cholesky and the solves across the batch)
    ("cholesky batch of 9", "cholesky", [], lambda g: spd_batch(g, 9, 3), None, lambda a, b: torch.linalg.cholesky(a)),
    ("cho_solve batch of 9", "cho_solve", [], lambda g: spd_batch(g, 9, 3), rand(9, 3, 2),
     lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a))),
    ("solve batch of 9", "solve", [], lambda g: general(g, 3, (9,)), rand(9, 3, 2), lambda a, b: torch.linalg.solve(a, b)),
    # lu: the packed factors (torch.linalg.lu_factor's LU), its gradient, the pivots and the permutation
    ("lu", "lu", [], general, None, None),
    ("lu tied pivots", "lu", [], tied_pivots, None, None),
    ("lu batch", "lu", [], lambda g: general(g, 3, (2,)), None, None),
    ("lu order 10", "lu", [], lambda g: general(g, 10), None, None),
    # singular: U gets a zero pivot, nothing is scaled by it (LAPACK's getrf, and adjit's), and the gradient is
    # NaN where the rule divides by it; a zero column is no pivot at all (the first row, no swap)
    ("lu singular", "lu", [], fixed([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]), None, None),
    ("lu zero column", "lu", [], fixed([0.0, 2.0, 3.0], [0.0, 4.0, 6.0], [0.0, 0.0, 1.0]), None, None),
]
for n in (0, 1, 2, 3, 5, -1, -3):
    PROGRAMS.append(("matrix_power %d" % n, "matrix_power", [n], general, None,
                     lambda a, b, n=n: torch.linalg.matrix_power(a, n)))
PROGRAMS += [
    ("matrix_power batch -2", "matrix_power", [-2], lambda g: general(g, 3, (2,)), None,
     lambda a, b: torch.linalg.matrix_power(a, -2)),
    ("trace", "trace", [0], rand(4, 4), None, lambda a, b: torch.trace(a)),
    ("trace rectangular 2", "trace", [2], rand(3, 5), None, matrix_trace(2)),
    ("trace rectangular -1", "trace", [-1], rand(3, 5), None, matrix_trace(-1)),
    ("trace batch 1", "trace", [1], rand(2, 3, 4), None, matrix_trace(1)),
    # diagonal: parameters {offset, axis1, axis2}
    ("diagonal", "diagonal", [0, -2, -1], rand(3, 4), None, lambda a, b: torch.diagonal(a)),
    ("diagonal 1 axes 0 2", "diagonal", [1, 0, 2], rand(3, 4, 5), None, lambda a, b: torch.diagonal(a, 1, 0, 2)),
    ("diagonal -2", "diagonal", [-2, -2, -1], rand(2, 5, 3), None, lambda a, b: torch.diagonal(a, -2, -2, -1)),
    ("diagonal 1 axes 2 0", "diagonal", [1, 2, 0], rand(3, 4, 5), None, lambda a, b: torch.diagonal(a, 1, 2, 0)),
    # diag: parameter {k}
    ("diag vector", "diag", [0], rand(4), None, lambda a, b: torch.diag(a)),
    ("diag vector 1", "diag", [1], rand(4), None, lambda a, b: torch.diag(a, 1)),
    ("diag vector -2", "diag", [-2], rand(3), None, lambda a, b: torch.diag(a, -2)),
    ("diag matrix", "diag", [0], rand(3, 5), None, lambda a, b: torch.diag(a)),
    ("diag matrix 2", "diag", [2], rand(3, 5), None, lambda a, b: torch.diag(a, 2)),
    ("diag matrix -1", "diag", [-1], rand(3, 5), None, lambda a, b: torch.diag(a, -1)),
    # offsets past the matrix: an empty diagonal (a sum of none for trace), as numpy's and torch's
    ("diagonal past the matrix", "diagonal", [4, -2, -1], rand(3, 4), None, lambda a, b: torch.diagonal(a, 4)),
    ("trace past the matrix", "trace", [-3], rand(3, 4), None, matrix_trace(-3)),
    # (torch.diag raises "numel: integer multiplication overflow" here in 1.13; numpy's diag of a matrix is
    # its diagonal, empty)
    ("diag matrix past it", "diag", [7], rand(3, 4), None, lambda a, b: torch.diagonal(a, 7)),
    ("outer", "outer", [], rand(4), rand(3), lambda a, b: torch.outer(a, b)),
    ("outer flattens", "outer", [], rand(2, 2), rand(3), lambda a, b: torch.outer(a.flatten(), b.flatten())),
    ("kron", "kron", [], rand(2, 3), rand(3, 2), lambda a, b: torch.kron(a, b)),
    ("kron ranks differ", "kron", [], rand(2), rand(2, 3), lambda a, b: torch.kron(a, b)),
    ("kron 3-d", "kron", [], rand(2, 1, 2), rand(2, 3, 2), lambda a, b: torch.kron(a, b)),
]
# norm: parameters {ord, keepdims, axes...} (no axes: all of them)
for ord_, axes, keepdims, make in [(2, [], False, rand(3, 4)), (1, [], False, rand(3, 4)),
                                   (INF, [], False, rand(3, 4)), (-INF, [], False, rand(3, 4)),
                                   (2, [0, 1], False, rand(3, 4)), (2, [1], True, rand(3, 4)),
                                   (1, [0], False, rand(3, 4)), (INF, [1], False, rand(3, 4)),
                                   (-INF, [0], True, rand(3, 4)), (2, [-1], False, rand(2, 3, 4))]:
    name = "norm %s%s%s" % (ord_, " axes " + " ".join(map(str, axes)) if axes else "", " keepdims" if keepdims else "")
    PROGRAMS.append((name, "norm", [ord_, float(keepdims)] + axes, make, None, vnorm(ord_, axes, keepdims)))
PROGRAMS += [
    # ord 2 at zero: the gradient is 0 (a subgradient), in both; ord 1 at a zero element: sign(0) = 0
    ("norm 2 at zero", "norm", [2, 0], fixed(0.0, 0.0, 0.0), None, vnorm(2, [], False)),
    ("norm 1 with a zero", "norm", [1, 0], fixed(0.0, -1.5, 2.0, 0.25), None, vnorm(1, [], False)),
    # ties of |x|: both split the gradient evenly among the tied elements
    ("norm inf ties", "norm", [INF, 0], fixed(1.0, -3.0, 3.0, 2.0), None, vnorm(INF, [], False)),
    ("norm -inf ties", "norm", [-INF, 0], fixed(0.5, -0.5, 3.0, 2.0), None, vnorm(-INF, [], False)),
    # lu of rectangular matrices: L is m x k, U k x n (k = min(m, n)); k pivots, an m-row permutation
    ("lu wide", "lu", [], lambda g: uniform(g, 3, 5), None, None),
    ("lu tall", "lu", [], lambda g: uniform(g, 5, 3), None, None),
    ("lu wide batch", "lu", [], lambda g: uniform(g, 2, 2, 4), None, None),
    ("lu tall batch", "lu", [], lambda g: uniform(g, 2, 6, 2), None, None),
]


def cxx(values):
    return "{" + ", ".join(repr(float(v)) for v in values) + "}"


def ints(values):
    return "{" + ", ".join(str(int(v)) for v in values) + "}"


def lu_program(a, ints_out):
    lu, piv, _ = torch.linalg.lu_factor_ex(a)  # lu_factor would refuse a singular matrix
    p, _, _ = torch.linalg.lu(a.detach())
    # adjit's permutation: P a = L U with torch's a = P L U, so P_adjit = P^T and p[i] = argmax_j P[j, i]
    perm = p.argmax(-2)
    # the pivots applied as swaps to 0..n-1 give the same permutation
    piv0 = piv.long() - 1
    check = torch.arange(a.shape[-2]).expand(perm.shape).clone()
    for i in range(min(a.shape[-2], a.shape[-1])):
        j = piv0[..., i]
        ci = check[..., i].clone()
        cj = check.gather(-1, j.unsqueeze(-1)).squeeze(-1)
        check[..., i] = cj
        check.scatter_(-1, j.unsqueeze(-1), ci.unsqueeze(-1))
    assert torch.equal(check, perm), (check, perm)
    ints_out += piv0.flatten().tolist() + perm.flatten().tolist()
    return lu


def main():
    g = torch.Generator().manual_seed(52)
    print("// Generated by test/unit/torch_linalg.py with PyTorch %s (float64 autograd); do not edit." % torch.__version__)
    print("// {name, op, parameters, A shape, A, B shape, B (none: {} and {}), W shape, W, sum(W * f(A, B)), d/dA, d/dB,")
    print("//  lu: pivots counted from 0 then the permutation}")
    for name, op, params, make_a, make_b, f in PROGRAMS:
        a = make_a(g).requires_grad_()
        b = None if make_b is None else make_b(g).requires_grad_()
        extra = []
        y = lu_program(a, extra) if op == "lu" else f(a, b)
        w = torch.rand(y.shape, generator=g) * 2 - 1
        loss = (w * y).sum()
        inputs = [a] if b is None else [a, b]
        grads = torch.autograd.grad(loss, inputs, allow_unused=True)
        grads = [torch.zeros_like(x) if gx is None else gx for x, gx in zip(inputs, grads)]
        gb = grads[1] if b is not None else None
        print('{"%s", "%s", %s, %s, %s, %s, %s, %s, %s, %r, %s, %s, %s},' % (
            name, op, cxx(params), ints(a.shape), cxx(a.detach().flatten()),
            "{}" if b is None else ints(b.shape), "{}" if b is None else cxx(b.detach().flatten()),
            ints(w.shape), cxx(w.flatten()), float(loss), cxx(grads[0].flatten()),
            "{}" if gb is None else cxx(gb.flatten()), ints(extra)))


if __name__ == "__main__":
    main()
