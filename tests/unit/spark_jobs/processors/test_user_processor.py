"""A processor of the user's own, named by module path: loaded, checked, and run by the engine.

The processor is docs/examples/top_values.py, the worked example of docs/processors.md, loaded
from a copy in a folder outside the project (as a user's package would be). Its results through
the engine, with a key moved between workers mid-window, must equal a plain-loop reference.
"""

from __future__ import annotations

import shutil
import sys
from collections import defaultdict

import pytest

from ballast.paths import PROJECT_ROOT
from ballast.routing.murmur2 import kafka_partition
from spark_jobs.processors.batch import PerKeyAdapter, batch_processor
from spark_jobs.processors.spec import from_spec
from spark_jobs.reduce.ownership import OwnershipView
from tests.support.engine_rows import N, Worker, chunk_row, data, genesis, marker

pytestmark = pytest.mark.unit

EXAMPLE = PROJECT_ROOT / "docs" / "examples" / "top_values.py"


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The example as module ``acme_processors.top_values`` of a package outside the project."""
    package = tmp_path / "site" / "acme_processors"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copy(EXAMPLE, package / "top_values.py")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield "acme_processors.top_values"
    for name in ("acme_processors.top_values", "acme_processors"):
        sys.modules.pop(name, None)


def test_a_top_level_module_works_too(tmp_path, monkeypatch):
    shutil.copy(EXAMPLE, tmp_path / "top_values_alone.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert from_spec("top_values_alone:TopValues:n=4").n == 4
    finally:
        sys.modules.pop("top_values_alone", None)
    with pytest.raises(ValueError, match="unknown processor 'agregate'"):
        from_spec("agregate:size=10s")  # a misspelled built-in is not taken for a module


def test_a_users_class_is_built_from_its_options(user_module):
    p = from_spec(f"{user_module}:TopValues:n=2,size=5s")
    assert (p.name, p.n, p.windows.size_ms, p.mergeable) == ("top_values", 2, 5000, True)
    assert isinstance(batch_processor(p), PerKeyAdapter)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_module_xyz:Thing", "cannot be imported"),
        ("{m}:Nothing", "has no class"),
        ("{m}:Window", "neither a Processor"),
        ("{m}:TopValues:n=0", "n must be positive"),
        ("{m}:TopValues:colour=red", "colour"),
        ("{m}", "name the class"),
    ],
)
def test_a_bad_users_processor_is_one_clear_error(user_module, spec, message):
    with pytest.raises(ValueError, match=message):
        from_spec(spec.format(m=user_module))


def _reference(events: list[tuple[str, float, int]], n: int, size: int) -> dict:
    windows: dict = defaultdict(list)
    for key, value, t in events:
        windows[(key, t - t % size)].append(value)
    return {w: (len(v), sum(v), tuple(sorted(v, reverse=True)[:n])) for w, v in windows.items()}


def test_the_engine_runs_it_and_moves_its_state_mid_window(user_module):
    """Key k moves from its home to another worker at epoch 1, inside window [0, 100): the new
    owner's partial state and the shipped one merge to the reference."""
    from ballast.control.state import make_event

    p = from_spec(f"{user_module}:TopValues:n=2,size=100ms")
    key = "k"
    home = kafka_partition(key.encode(), N)
    target = (home + 1) % N
    view = OwnershipView(N)
    view.apply(genesis())
    view.apply(make_event(1, "ROUTING_UPDATE", {"assign": {key: target}, "unassign": [], "reason": ""}))
    old, new = Worker(home, view, p), Worker(target, view, p)
    before = [(key, 5.0, 10), (key, 1.0, 20), (key, 7.0, 30)]
    after = [(key, 6.0, 40), (key, 9.0, 50), (key, 2.0, 150)]
    old.step([marker(0, home), *(data(k, v, t, 0) for k, v, t in before)])
    new.step([marker(0, target), marker(1, target), *(data(k, v, t, 1) for k, v, t in after)])
    shipped = old.step([marker(1, home)])
    assert [c.key for c in shipped.chunks] == [key]
    got = new.step([chunk_row(c) for c in shipped.chunks], watermark=1000)
    rows = {(r.key, r.window_start): (r.count, r.sum, tuple(r.values)) for r in got.results.rows()}
    assert rows == _reference(before + after, 2, 100)


def test_a_per_key_state_emptied_by_emission_leaves_its_bin_beside_others(user_module):
    """Several keys share a hash bin; emission empties some states (their rows leave the table)
    while others stay: the step must not trip over the table shrinking (a crash here would fail
    the same batch on every replay)."""
    p = from_spec(f"{user_module}:TopValues:n=2,size=100ms")
    view = OwnershipView(N)
    view.apply(genesis())
    w = Worker(0, view, PerKeyAdapter(p, bins=1))  # one bin: every key in it
    keys = [k for k in (f"u{i}" for i in range(200)) if kafka_partition(k.encode(), N) == 0][:6]
    done, open_ = keys[:3], keys[3:]
    rows = [data(k, 1.0, 10, 0) for k in done] + [data(k, 2.0, 10, 0) for k in open_]
    rows += [data(k, 3.0, 950, 0) for k in open_]  # a later window keeps these states alive
    w.step([marker(0, 0), *rows])
    out = w.step([], watermark=500)
    assert sorted((r.key, r.window_start, r.count) for r in out.results.rows()) == sorted(
        [(k, 0, 1) for k in keys]
    )
    later = w.step([], watermark=2000)
    assert sorted((r.key, r.window_start) for r in later.results.rows()) == sorted((k, 900) for k in open_)
