"""assets/head_data.json, the How it works tab's curve of what the head's data bought: well formed,
and the shipped head's point agrees with what its own file records."""

from pathlib import Path

import pytest

from app import how_it_works
from specdec.kernels.head_offer import SHIPPED
from specdec.kernels.head_store import read_head

SHIPPED_FILE = next(iter(SHIPPED.values()))


def test_every_point_is_drawn_with_its_figures():
    points = how_it_works.head_points()
    assert len(points) >= 2 and [p["train_tokens"] for p in points] == sorted(p["train_tokens"] for p in points)
    for p in points:
        assert 0 < p["walk_at_1"]["answers"] <= 1 and 0 < p["walk_at_1"]["read_text"] <= 1 and p["label"]
    fig = how_it_works.head_data_figure(points)
    assert [list(trace.y) for trace in fig.data] == [[p["walk_at_1"][k] for p in points] for k in ("answers", "read_text")]
    text = how_it_works.head_data_text(points)
    assert all(f"{p['train_tokens']:,}" in text and f"{p['walk_at_1']['answers']:.2f}" in text for p in points)
    assert all(p["held_out"] in text for p in points if p.get("held_out"))  # a point on another held-out set says so
    assert how_it_works.head_data_text([{**points[0], "held_out": "on another set"}]).count("on another set") == 1


def test_the_shipped_heads_point_is_what_its_file_records():
    stored = read_head(Path(SHIPPED_FILE))
    point = next((p for p in how_it_works.head_points() if p.get("file_digest") == stored.digest), None)
    assert point is not None, "assets/head_data.json has no point for the shipped head file"
    figures = stored.record["figures"]
    assert point["train_tokens"] == figures["train_tokens"] and point["steps"] == figures["steps"]
    assert point["walk_at_1"]["answers"] == pytest.approx(figures["walk"]["rates"][0], abs=0.005)
    assert point["walk_at_1"]["read_text"] == pytest.approx(figures["read_text"]["walk"]["rates"][0], abs=0.005)


def test_an_unreadable_file_draws_nothing(tmp_path):
    (tmp_path / "broken.json").write_text("{")
    assert how_it_works.head_points(tmp_path / "broken.json") == []
    assert how_it_works.head_data_text([]) == "" and len(how_it_works.head_data_figure([]).data) == 2
