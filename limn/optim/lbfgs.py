"""L-BFGS: a quasi-Newton method that re-evaluates the loss as it searches.

Unlike the other optimizers, a step is a loop: it asks ``closure`` (which zeroes the
gradients, computes the loss and calls ``backward``) for the loss and gradient as often
as it needs, up to ``max_iter`` iterations and ``max_eval`` evaluations. Each iteration
turns the gradient into a direction with the last ``history_size`` pairs of (parameter
change, gradient change) (the two-loop recursion: an estimate of the inverse Hessian
applied to the gradient), then moves along it: by ``lr`` (the first iteration scaled
down by the gradient's size), or, with ``line_search_fn="strong_wolfe"``, by a step that
satisfies the strong Wolfe conditions (sufficient decrease ``c1 = 1e-4``, curvature
``c2 = 0.9``), found by bracketing and zooming with cubic interpolation (Nocedal &
Wright, *Numerical Optimization*, algorithms 3.5 and 3.6).

Every decision of the loop (stop or go on, accept a step) reads numbers, so the
parameters and gradients are read back as one flat numpy vector in the parameters'
dtype, the direction is computed there, and each move writes every parameter in one
realize. The settings, the order of the tests that end a step and the safeguards of the
line search are torch's, so the iterates are torch's within rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ir.graph import dtypes
from limn.autograd import enable_grad
from limn.optim.optimizer import Optimizer
from limn.tensor import Tensor, realize


class LBFGS(Optimizer):
    """torch's ``optim.LBFGS(params, lr=1, max_iter=20, max_eval=None (max_iter * 5 / 4),
    tolerance_grad=1e-7, tolerance_change=1e-9, history_size=100, line_search_fn=None)``;
    ``step(closure)`` returns the loss of the closure's first call. One parameter group,
    as torch's. The history lives in ``state`` as numpy vectors (``state_dict`` holds the
    step count and the rate only)."""

    def __init__(self, params, lr=1.0, max_iter=20, max_eval=None, tolerance_grad=1e-7,
                 tolerance_change=1e-9, history_size=100, line_search_fn=None):  # fmt: skip
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(
                f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}"
            )
        max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        settings = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)  # fmt: skip
        super().__init__(params, settings)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS: takes one parameter group (torch's per-parameter options "
                             "are not supported by L-BFGS)")  # fmt: skip
        self.history: dict = {"func_evals": 0, "n_iter": 0}

    # ---- the parameters as one vector ---------------------------------------------

    def _flat_grad(self) -> np.ndarray:
        dt = dtypes.to_numpy(self.params[0].dtype)
        parts = [np.zeros(p.numel(), dt) if p.grad is None else
                 p.grad.numpy().astype(dt).reshape(-1) for p in self.params]  # fmt: skip
        return np.concatenate(parts)

    def _flat_params(self) -> np.ndarray:
        return np.concatenate([p.detach().numpy().reshape(-1) for p in self.params])

    def _write(self, flat: np.ndarray) -> None:
        """Every parameter set from ``flat``, in one realize."""
        writes, at = [], 0
        for p in self.params:
            n = p.numel()
            value = Tensor(flat[at : at + n].reshape(p.shape), dtype=p.dtype, device=p.device)
            writes.append(p.detach().assign(value))
            at += n
        realize(*writes)

    def _along(self, closure: Callable, x0: np.ndarray, d: np.ndarray) -> Callable:
        """(loss, gradient) at x0 + t d, as a function of t; the parameters go back to x0."""

        def at(t: float) -> tuple[float, np.ndarray]:
            self._write(x0 + d * np.asarray(t, d.dtype))
            value = self._evaluate(closure)
            self._write(x0)
            return value

        return at

    def _evaluate(self, closure: Callable) -> tuple[float, np.ndarray]:
        with enable_grad():
            loss = float(closure())
        return loss, self._flat_grad()

    # ---- one step -------------------------------------------------------------------

    def step(self, closure: Callable):
        """Up to ``max_iter`` iterations of L-BFGS, each evaluating ``closure`` (the loss,
        after ``zero_grad`` and ``backward``) as the move along the direction needs."""
        if closure is None:
            raise ValueError("LBFGS: step needs a closure that computes the loss and gradients")
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tol_grad, tol_change = group["tolerance_grad"], group["tolerance_change"]
        st = self.history
        with enable_grad():
            first = closure()
        loss, g = float(first), self._flat_grad()
        evals = 1
        st["func_evals"] += 1
        if np.abs(g).max() <= tol_grad:
            return first
        d, t = st.get("d"), st.get("t")
        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            st["n_iter"] += 1
            d = self._direction(g, d, t, group["history_size"])
            st["prev_g"], prev_loss = g.copy(), loss
            t = min(1.0, 1.0 / float(np.abs(g).sum())) * lr if st["n_iter"] == 1 else lr
            gtd = float(g.dot(d))
            if gtd > -tol_change:  # not a descent direction: nothing more to gain
                break
            used = 0
            if group["line_search_fn"] is None:
                self._write(self._flat_params() + d * np.asarray(t, d.dtype))
                if n_iter != max_iter:
                    loss, g = self._evaluate(closure)
                    used = 1
            else:
                x0 = self._flat_params()
                along = self._along(closure, x0, d)
                loss, g, t, used = strong_wolfe(along, t, d, loss, g, gtd, tol_change)
                self._write(x0 + d * np.asarray(t, d.dtype))
            evals += used
            st["func_evals"] += used
            if n_iter == max_iter or evals >= max_eval:
                break
            if np.abs(g).max() <= tol_grad:
                break
            if np.abs(d * t).max() <= tol_change or abs(loss - prev_loss) < tol_change:
                break
        st["d"], st["t"] = d, t
        return first

    def _direction(self, g: np.ndarray, d, t, history_size: int) -> np.ndarray:
        """-H g, H the inverse Hessian estimated from the kept pairs (s, y) = (parameter
        change, gradient change); a pair whose curvature y.s is not positive is not kept.
        The first iteration starts the history and goes down the gradient."""
        st = self.history
        if st["n_iter"] == 1:
            st["dirs"], st["steps"], st["ro"], st["h_diag"] = [], [], [], 1.0
            return -g
        y, s = g - st["prev_g"], d * np.asarray(t, d.dtype)
        ys = y.dot(s)
        if ys > 1e-10:
            if len(st["dirs"]) == history_size:
                for k in ("dirs", "steps", "ro"):
                    st[k].pop(0)
            st["dirs"].append(y)
            st["steps"].append(s)
            st["ro"].append(1.0 / ys)
            st["h_diag"] = ys / y.dot(y)
        ys_, ss, ro = st["dirs"], st["steps"], st["ro"]
        q, alpha = -g, [0.0] * len(ys_)
        for i in reversed(range(len(ys_))):
            alpha[i] = ss[i].dot(q) * ro[i]
            q = q - alpha[i] * ys_[i]
        r = q * st["h_diag"]
        for i in range(len(ys_)):
            beta = ys_[i].dot(r) * ro[i]
            r = r + ss[i] * (alpha[i] - beta)
        return r


# ---- the strong-Wolfe line search -----------------------------------------------------


def cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimizer of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2,
    kept inside ``bounds`` (the interval between x1 and x2 if None); the middle of the
    bounds when the cubic has no minimum (Nocedal & Wright, equation 3.59)."""
    lo, hi = bounds if bounds is not None else sorted((x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(disc)
    if x1 <= x2:
        at = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        at = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(at, lo), hi)


def strong_wolfe(along, t, d, f, g, gtd, tolerance_change=1e-9, c1=1e-4, c2=0.9, max_ls=25):
    """A step ``t`` along ``d`` from a point with loss ``f``, gradient ``g`` and slope
    ``gtd`` (< 0) where the loss has fallen enough (f + c1 t gtd) and the slope has
    flattened (|slope| <= c2 |gtd|). ``along(t)`` gives (loss, gradient) at that step.
    Returns (loss, gradient, t, evaluations).

    First a bracket: steps grow (to a cubic's minimum between 1.01 t and 10 t) until one
    satisfies both conditions, or the loss rises or the slope turns, which brackets an
    acceptable step. Then the bracket shrinks (zoom) by cubic interpolation, a trial too
    near an end pushed 10% of the width inside after two such in a row."""
    d_max = float(np.abs(d).max())
    f_new, g_new = along(t)
    evals, tries = 1, 0
    gtd_new = float(g_new.dot(d))
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False
    while tries < max_ls:
        if f_new > f + c1 * t * gtd or (tries > 1 and f_new >= f_prev):
            pts = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        if abs(gtd_new) <= -c2 * gtd:
            pts, done = [[t, f_new, g_new, gtd_new]], True
            break
        if gtd_new >= 0:
            pts = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        grown = cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                              bounds=(t + 0.01 * (t - t_prev), t * 10))  # fmt: skip
        t_prev, f_prev, g_prev, gtd_prev = t, f_new, g_new, gtd_new
        t = grown
        f_new, g_new = along(t)
        evals, tries = evals + 1, tries + 1
        gtd_new = float(g_new.dot(d))
    if tries == max_ls:  # never bracketed: between the start and the last step tried
        pts = [[0.0, f, g, gtd], [t, f_new, g_new, gtd_new]]
    low = 0 if pts[0][1] <= pts[-1][1] else 1
    stuck = False
    while not done and tries < max_ls:
        (a, fa, _, ga), (b, fb, _, gb) = pts
        if abs(b - a) * d_max < tolerance_change:
            break
        t = cubic_minimum(a, fa, ga, b, fb, gb)
        lo, hi = min(a, b), max(a, b)
        margin = 0.1 * (hi - lo)
        if min(hi - t, t - lo) < margin:  # too near an end
            if stuck or t >= hi or t <= lo:
                t = hi - margin if abs(t - hi) < abs(t - lo) else lo + margin
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        f_new, g_new = along(t)
        evals, tries = evals + 1, tries + 1
        gtd_new = float(g_new.dot(d))
        if f_new > f + c1 * t * gtd or f_new >= pts[low][1]:
            pts[1 - low] = [t, f_new, g_new, gtd_new]
            low = 0 if pts[0][1] <= pts[1][1] else 1
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (pts[1 - low][0] - pts[low][0]) >= 0:
                pts[1 - low] = pts[low]
            pts[low] = [t, f_new, g_new, gtd_new]
    t, f_new, g_new, _ = pts[low]
    return f_new, g_new, t, evals
