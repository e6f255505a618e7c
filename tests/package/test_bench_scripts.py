"""The TPU lane (bench/tpu_lane.py) runs benchmark scripts on a machine with little device time to spare: a
script refusing the lane's arguments there loses the whole step (the lane once passed ``--out`` to scripts
that had no such option). The arguments are checked here, where it costs nothing."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _module(name):
    spec = importlib.util.spec_from_file_location(f"bench_script_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LANE = _module("tpu_lane")


@pytest.mark.parametrize("name", sorted(LANE.BENCH_ARGS))
def test_every_script_the_lane_runs_accepts_its_arguments(name, tmp_path):
    out = tmp_path / f"{name}.json"
    args = _module(f"bench_{name}").parser().parse_args(["--out", str(out), *LANE.BENCH_ARGS[name]])
    assert Path(args.out) == out


def test_a_benchmark_json_goes_where_it_is_told(tmp_path):
    common = _module("_common")
    path = common.write("lane_check", {"value": 3}, path=tmp_path / "deep" / "x.json", quiet=True)
    assert path == tmp_path / "deep" / "x.json"
    text = path.read_text()
    assert '"benchmark": "lane_check"' in text and '"value": 3' in text
