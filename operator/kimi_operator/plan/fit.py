"""Least squares with non-negative coefficients, for a handful of points and columns.

`y ≈ intercept + Σ coefficient_j x x_j`. A column that does not vary across the points, or whose
coefficient comes out negative (noise on a small effect), is dropped and the rest refitted: a
step cost never shrinks as a batch or a context grows.
"""

import statistics
from collections.abc import Sequence


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (matrix is square and small). A pivot that is
    rounding error next to the matrix's largest entry means collinear columns: singular."""
    size = len(vector)
    tiny = 1e-9 * max(abs(value) for row in matrix for value in row)
    rows = [[*matrix[i], vector[i]] for i in range(size)]
    for column in range(size):
        pivot = max(range(column, size), key=lambda r: abs(rows[r][column]))
        rows[column], rows[pivot] = rows[pivot], rows[column]
        lead = rows[column][column]
        if abs(lead) <= tiny:
            raise ValueError("singular")
        for row in range(size):
            if row != column:
                factor = rows[row][column] / lead
                rows[row] = [a - factor * b for a, b in zip(rows[row], rows[column], strict=True)]
    return [rows[i][size] / rows[i][i] for i in range(size)]


def fit(xs: Sequence[Sequence[float]], ys: Sequence[float]) -> tuple[float, list[float]]:
    """(intercept, coefficients) for points `xs[i]` (one value per column) and values `ys`."""
    columns = len(xs[0]) if xs else 0
    active = [j for j in range(columns) if len({x[j] for x in xs}) > 1]
    while True:
        design = [[1.0, *(x[j] for j in active)] for x in xs]
        width = len(design[0])
        normal = [[sum(r[a] * r[b] for r in design) for b in range(width)] for a in range(width)]
        moment = [sum(r[a] * y for r, y in zip(design, ys, strict=True)) for a in range(width)]
        try:
            solution = _solve(normal, moment)
        except ValueError:
            active = active[:-1]  # collinear columns: keep the earlier ones
            continue
        negative = [j for j, value in zip(active, solution[1:], strict=True) if value < 0]
        if not negative:
            break
        active = [j for j in active if j not in negative]
    coefficients = [0.0] * columns
    for j, value in zip(active, solution[1:], strict=True):
        coefficients[j] = value
    return max(solution[0], 0.0), coefficients


def fit_without_stalls(
    xs: Sequence[Sequence[float]], ys: Sequence[float], spread: float = 4.0
) -> tuple[float, list[float]]:
    """`fit`, refitted without the points whose residual is above the median residual by more
    than `spread` times the residuals' median absolute deviation (at least 1% of the median
    value), until none is: a single request's time on a busy machine can include a stall of the
    whole server (584 ms for a 128-token prefill that took 24-59 ms in the same minute), which is
    no cost of its own. Measured from the median residual, two stalls that pull the first fit up
    (and every other point below it) still stand out."""
    keep = list(range(len(ys)))
    while True:
        intercept, coefficients = fit([xs[i] for i in keep], [ys[i] for i in keep])
        residuals = {
            i: ys[i] - intercept - sum(c * x for c, x in zip(coefficients, xs[i], strict=True))
            for i in keep
        }
        middle = statistics.median(residuals.values())
        typical = max(
            statistics.median(abs(r - middle) for r in residuals.values()),
            0.01 * statistics.median(ys[i] for i in keep),
        )
        stalled = [i for i, r in residuals.items() if r - middle > spread * typical]
        if not stalled or len(keep) - len(stalled) < len(coefficients) + 2:
            return intercept, coefficients
        keep = [i for i in keep if i not in stalled]
