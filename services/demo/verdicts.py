"""The demo's verdict: what must hold for a user to believe what the report shows. Pure.

The rules, and why each is as it is:

* **the loop settles**: after each shift of the hot set, the Ballast run's max/mean (counted from
  the routed topic, per interval) is at most 1 + θ from the ``SETTLE``-th interval on until the next
  shift. The controller needs 2 intervals above θ to act (``--consecutive 2``: the second lies
  wholly after the shift, so the plan is made from the new hot set), and its plan lands within the
  next one;
* **hash stays above**: the hash run's median max/mean over its intervals is above 1 + θ: the
  imbalance the loop removes is real on this input;
* **lag back under target**: with shedding, the Ballast run's time lag (router + reduce stage, as
  the shedder measured it) comes back under the target after the burst and stays there: every
  sample of the input's last ``HOLD_CYCLES`` policy cycles is under it, and the report says how
  long after the burst it got there. During the burst and just after it may be over: the shedder
  needs a cycle or two to see the overload, and the backlog piled up meanwhile is worked off
  after. (The shedding benchmark holds the shedder to the tighter "within 3 cycles", over a
  3-minute overload; the demo's burst is 20 s.)
* **results**: every unshed window exact and present, no exact row wrong, and the shed windows'
  95 % intervals hold the truth at the stated rate (at least ``MIN_COVERAGE`` of the shed windows
  with a row; a window whose every record was shed has no row and no interval, and is reported
  apart);
* **nothing left running**: every process the demo started is gone.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from services.demo.summary import RunSummary, Verdict

SETTLE = 3  # intervals after a shift within which the loop must be back under 1 + theta
HOLD_CYCLES = 2  # policy cycles at the end of the input in which every lag sample must be under target
MIN_COVERAGE = 0.90  # share of shed windows (with a row) whose interval holds the truth (95 % stated)
MIN_SHED_WINDOWS = 30  # fewer shed windows say nothing about a rate


def settle_intervals(run: RunSummary, end_s: float) -> list[int | None]:
    """Per shift: how many intervals after it the run's max/mean stayed above 1 + θ before it stayed
    at most 1 + θ until the next shift (None: it never did)."""
    limit = 1 + run.theta
    bounds = [*run.shifts_s[1:], end_s]
    out: list[int | None] = []
    for shift, nxt in zip(run.shifts_s, bounds, strict=True):
        rows = [r for t, r in run.imbalance if shift <= t < nxt]
        settled = None
        for k in range(len(rows), -1, -1):  # the earliest k from which every interval is under
            if all(r <= limit for r in rows[k:]):
                settled = k
            else:
                break
        out.append(settled if rows and settled is not None and settled < len(rows) else None)
    return out


def loop_settles(run: RunSummary, end_s: float) -> Verdict:
    settles = settle_intervals(run, end_s)
    run.figures["settle_intervals"] = settles
    ok = bool(settles) and all(k is not None and k <= SETTLE for k in settles)
    pairs = zip(run.shifts_s, settles, strict=True)
    shown = ", ".join(f"{t:g} s: {'never' if k is None else k}" for t, k in pairs)
    return Verdict(f"max/mean back under {1 + run.theta:g} within {SETTLE} intervals of each shift", ok,
                   f"intervals above after each shift: {shown}")  # fmt: skip


def imbalance_median(run: RunSummary) -> float | None:
    return round(median(r for _, r in run.imbalance), 3) if run.imbalance else None


def hash_stays_above(hash_run: RunSummary, ballast: RunSummary | None) -> Verdict:
    m = imbalance_median(hash_run)
    hash_run.figures["max_mean_median"] = m
    other = f"; Ballast's {imbalance_median(ballast)}" if ballast is not None else ""
    limit = 1 + hash_run.theta
    return Verdict(f"hash-only max/mean stays above {limit:g}", m is not None and m > limit,
                   f"median over {len(hash_run.imbalance)} intervals {m}{other}")  # fmt: skip


def lag_figures(run: RunSummary) -> dict[str, Any]:
    lag = run.pipeline_lag()
    burst_end = run.burst_s[1] if run.burst_s else None
    after = [v for t, v in lag if burst_end is not None and t >= burst_end]
    over = [t for t, v in lag if v > run.target_s]
    return {
        "lag_peak_s": round(max((v for _, v in lag), default=0.0), 2) if lag else None,
        "lag_end_s": round(lag[-1][1], 2) if lag else None,
        "lag_peak_after_burst_s": round(max(after), 2) if after else None,
        "last_over_target_s": round(over[-1], 1) if over else None,
        "lag_samples": len(lag),
    }


def lag_back_under(run: RunSummary, cycle_s: float, end_s: float) -> Verdict:
    """After the burst the lag comes back under the target and stays there to the end of the input
    (every sample of the last ``HOLD_CYCLES`` policy cycles under it)."""
    figures = lag_figures(run)
    run.figures.update(figures)
    lag = run.pipeline_lag()
    what = f"time lag back under the {run.target_s:g} s target after the burst, and staying under"
    if not run.burst_s or not lag:
        return Verdict(what, False, "no burst or no lag measured")
    burst_end = run.burst_s[1]
    after = [(t, v) for t, v in lag if burst_end <= t <= end_s]
    hold_from = end_s - HOLD_CYCLES * cycle_s
    held = [v for t, v in after if t >= hold_from]
    over = [t for t, v in after if v > run.target_s]
    back = next((t for t, v in after if v <= run.target_s and (not over or t > over[-1])), None)
    run.figures["back_under_target_after_burst_s"] = None if back is None else round(back - burst_end, 1)
    ok = bool(held) and all(v <= run.target_s for v in held)
    when = "never" if back is None else f"{back - burst_end:.0f} s after the burst's end"
    return Verdict(what, ok, f"peak {figures['lag_peak_s']} s; back under {when} ({burst_end:g} s); "
                             f"{len(held)} samples in the last {HOLD_CYCLES * cycle_s:g} s of input, "
                             f"highest {max(held, default=float('nan')):.1f} s")  # fmt: skip


def results_hold(run: RunSummary) -> list[Verdict]:
    r, cov = run.figures.get("results"), run.figures.get("coverage")
    if r is None or cov is None:
        return [Verdict(f"{run.name}: results match the reference", False, "not judged")]
    wrong = r["exact_wrong"] + r["missing_unshed"] + r["unexpected"]
    exact_ok = wrong == 0 and r["windows"] > 0
    out = [Verdict(
        f"{run.name}: every unshed window exact and present, none unexpected",
        exact_ok,
        f"{r['rows']:,} rows over {r['windows']:,} windows; exact {r['exact_windows']:,}, wrong "
        f"{r['exact_wrong']}, missing {r['missing_unshed']}, unexpected {r['unexpected']}",
    )]  # fmt: skip
    if run.shedding:
        n = cov["shed_windows"] - cov["without_row"]
        count, total = cov.get("count_with_row"), cov.get("sum_with_row")
        enough = n >= MIN_SHED_WINDOWS
        ok = enough and count is not None and count >= MIN_COVERAGE
        ok = ok and (total is None or total >= MIN_COVERAGE) and cov["no_estimate_over"] == 0
        out.append(Verdict(
            f"{run.name}: shed windows inside their 95 % interval (at least {MIN_COVERAGE:.0%})",
            ok,
            f"count {count}, sum {total} over {n:,} shed windows with a row"
            + ("" if enough else f" (fewer than {MIN_SHED_WINDOWS})")
            + f"; {cov['without_row']:,} windows had every record shed (no row), "
            f"{cov['no_estimate']:,} rows said no estimate "
            f"({cov['no_estimate_over']} of them over the truth)",
        ))  # fmt: skip
    return out


def verdicts(runs: dict[str, RunSummary], end_s: float, cycle_s: float) -> list[Verdict]:
    """Every check the runs allow (a run not made is not judged)."""
    out: list[Verdict] = []
    ballast, hash_run = runs.get("ballast"), runs.get("hash")
    if ballast is not None:
        out.append(loop_settles(ballast, end_s))
    if hash_run is not None:
        out.append(hash_stays_above(hash_run, ballast))
        hash_run.figures.update(lag_figures(hash_run))
    if ballast is not None:
        out.append(lag_back_under(ballast, cycle_s, end_s))
        out += results_hold(ballast)
    if hash_run is not None and "results" in hash_run.figures:
        out += results_hold(hash_run)
    return out
