"""The scaling benchmark's figures and verdicts, on runs made by hand."""

from __future__ import annotations

import pytest

from bench.scaling.figures import (
    Decision,
    Step,
    instance_seconds,
    seconds_over,
    step_figures,
    summary,
    verdicts,
)

pytestmark = pytest.mark.unit

STEPS = [Step(0, 100, 1), Step(100, 200, 2), Step(200, 300, 4), Step(300, 400, 1)]


def test_instance_seconds_integrate_the_count_in_force():
    decisions = [Decision(110, "reduce", 1, 2), Decision(210, "reduce", 2, 4), Decision(350, "reduce", 4, 1)]
    # 1 × 110 + 2 × 100 + 4 × 140 + 1 × 50
    assert instance_seconds(decisions, "reduce", 1, 400) == 110 + 200 + 560 + 50
    assert instance_seconds([], "reduce", 8, 400) == 3200  # fixed at the maximum
    assert instance_seconds(decisions, "router", 1, 400) == 400  # another stage's decisions do not count


def test_step_figures_count_decisions_time_to_final_and_revisits():
    decisions = [
        Decision(120, "reduce", 1, 2), Decision(150, "reduce", 2, 3),  # 2×: two decisions, final at 50 s
        Decision(210, "reduce", 3, 5), Decision(230, "reduce", 5, 4), Decision(260, "reduce", 4, 5),  # 4×
    ]  # fmt: skip
    figs = step_figures(STEPS, decisions, "reduce", 1)
    assert [(f.decisions, f.time_to_final_s, f.final, f.revisits) for f in figs] == [
        (0, 0.0, 1, 0), (2, 50.0, 3, 0), (3, 60.0, 5, 1), (0, 0.0, 5, 0)]  # fmt: skip


def test_seconds_over_the_target_count_each_sample_until_the_next():
    samples = [(0, 5.0), (10, 40.0), (20, 35.0), (30, 10.0), (40, 31.0)]
    assert seconds_over(samples, 30.0, 50) == 10 + 10 + 10


def test_verdicts_compare_ds2_with_the_busy_time_rule_and_fixed_at_max():
    ds2 = [Decision(120, "reduce", 1, 2), Decision(220, "reduce", 2, 4), Decision(360, "reduce", 4, 1)]
    busy = [Decision(105, "reduce", 1, 3), Decision(205, "reduce", 3, 6), Decision(305, "reduce", 6, 2)]
    lags = [(0, 5.0), (110, 50.0), (130, 5.0)]
    runs = {
        "ds2": summary(STEPS, ds2, {"reduce": 1}, lags, 30.0, 400, 0),
        "busy-time": summary(STEPS, busy, {"reduce": 1}, lags, 30.0, 400, 0),
        "fixed-max": summary(STEPS, [], {"reduce": 8}, [], 30.0, 400, 0),
    }
    assert verdicts(runs) == {
        "within_3_decisions_each_step": True,
        "no_count_revisited": True,
        "fewer_instance_seconds_than_fixed_max": True,
        "instance_seconds_at_most_busy_time": True,
        "lag_over_target_at_most_busy_time": True,
    }
    worse = dict(runs, ds2=summary(STEPS, ds2, {"reduce": 1}, [(0, 50.0)], 30.0, 400, 0))
    assert verdicts(worse)["lag_over_target_at_most_busy_time"] is False


def test_the_runs_schedule_and_its_decisions_from_the_control_log():
    from bench.scaling.params import Params
    from bench.scaling.run import decisions, schedule

    phases = schedule(Params(unit_rate=200, steps="1,2,4,1", step_s=60))
    assert [(p.name, p.rate, p.seconds) for p in phases] == [
        ("0:1x", 200, 60), ("1:2x", 400, 60), ("2:4x", 800, 60), ("3:1x", 200, 60)]  # fmt: skip
    log = [
        {"type": "SCALING", "issued_at": 31_000, "payload": ["x", {"mode": "APPLIED", "stage": "reduce",
                                                                   "from_instances": 1, "to_instances": 2}]},
        {"type": "SCALE", "issued_at": 31_000, "payload": ["x", {"num_workers": 2}]},
        {"type": "SCALING", "issued_at": 40_000, "payload": ["x", {"mode": "DRY_RUN", "stage": "router",
                                                                   "from_instances": 1, "to_instances": 2}]},
    ]  # fmt: skip
    assert decisions(log, 1_000) == [Decision(30.0, "reduce", 1, 2)]


def test_the_plot_draws_from_the_report_alone_with_and_without_measured_rates(tmp_path):
    """The fixed-max run has no true rates (its controller does not scale); the plot still draws."""
    from bench.scaling.plot import plot

    def sample(t: float, workers: int, rate: float | None) -> dict:
        return {"t_s": t, "workers": workers, "router_s": 0.5, "reduce_s": 20.0, "true_rate": rate}

    steps = [{"start_s": 0, "end_s": 50, "times": 1}, {"start_s": 50, "end_s": 100, "times": 2}]
    report = {
        "params": {"target_s": 60, "unit_rate": 200},
        "policies": {
            "ds2": {"samples": [sample(0, 1, None), sample(40, 1, 210.0), sample(80, 2, 205.0)],
                    "keeps": [{"t_s": 60, "keep": 0.5}], "steps": steps},
            "fixed-max": {"samples": [sample(0, 8, None), sample(80, 8, None)], "keeps": [], "steps": steps},
            "busy-time": {"error": "the broker went away"},
        },
    }  # fmt: skip
    out = tmp_path / "scaling.png"
    plot(report, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
