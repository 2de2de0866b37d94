"""benchmarks/recall_sweep.py in a tiny configuration: it runs, and its summary is its runs' mean and spread."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from companion import linear_attention as la
from companion import random_features as rf

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recall_sweep.py"


def load_script():
    spec = importlib.util.spec_from_file_location("recall_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_tiny_sweep_summarises_its_runs(tmp_path, capsys):
    sweep = load_script()
    out = tmp_path / "runs.json"
    rows = sweep.main(
        "--pairs 2 3 --keys 4 --values 3 --kinds softmax performer fmmformer --seeds 0 1 --steps 4 --every 2 "
        f"--d-model 16 --heads 2 --features 8 --jobs 1 --text-steps 1 --json {out}".split()
    )
    printed = capsys.readouterr().out
    assert "| 3 | 8 | performer |" in printed and "held-out loss" in printed
    runs = json.loads(out.read_text())["runs"]
    assert len(runs) == 2 * 3 * 2
    for row in rows[:6]:
        accuracies = [r["accuracy"] for r in runs if r["kind"] == row["kind"] and r["n_pairs"] == row["n_pairs"]]
        assert row["mean"] == sum(accuracies) / 2 and row["spread"] == (max(accuracies) - min(accuracies)) / 2
        assert row["min"] == min(accuracies) and row["seeds"] == 2
        assert row["no_lookup"][0] <= row["no_lookup"][1]
    # the same parameters for every kind except FMMformer's two blend weights per layer
    parameters = {row["kind"]: row["parameters"] for row in rows[:3]}
    assert parameters["performer"] == parameters["softmax"] == parameters["fmmformer"] - 4
    text = [row for row in rows if row.get("task") == "text"]
    assert [row["kind"] for row in text] == ["softmax", "performer", "fmmformer"]
    assert all(3 < row["mean"] < 6 for row in text)  # about ln(vocabulary) after one step


def test_performer_attention_is_causal_and_is_favor_plus():
    sweep = load_script()
    attention = sweep.make_attention("performer", band=3, d_k=4, features=16, seed=0)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 4, generator=g) for _ in range(3))
    out = attention(q, k, v, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 5:, :], v2[..., 5:, :] = 3.0, -2.0  # change the future
    assert torch.allclose(attention(q, k2, v2, causal=True)[..., :5, :], out[..., :5, :], atol=1e-5)
    phi = rf.PerformerFeatures(4, 16, seed=0)
    assert torch.equal(attention.features.w, phi.w)
    expected = la.quadratic_linear_attention(q, k, v, causal=True, feature_map=phi)
    assert torch.allclose(out, expected, atol=1e-5)
