"""The eager modes by one set of names: the command line's ``--mode`` names are accepted by
``torch.tpu.eager_mode`` and ``set_eager_mode`` (``torch.tpu.eager_mode = "fused"`` raised), each naming the
mode the command line runs; ``set_eager_mode(X)`` without ``with`` switches for good; the README's snippet
runs as written."""
import pathlib
import re

import pytest
import torch

import torch_tpu
from torch_tpu import EagerMode
from torch_tpu.cli import arguments as cli_arguments

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(autouse=True)
def _strict_after():
    yield
    torch.tpu.eager_mode = EagerMode.DEFER_NEVER


def _cli_modes() -> dict:
    parser = cli_arguments.parser()
    generate = parser._subparsers._group_actions[0].choices["generate"]
    mode = next(a for a in generate._actions if a.dest == "mode")
    return {name: cli_arguments.MODES[name] for name in mode.choices}


def test_every_cli_mode_name_sets_the_mode_the_cli_runs():
    modes = _cli_modes()
    assert set(modes) == {"eager", "debug", "fused", "compile"}
    for name, member in modes.items():
        if name == "compile":
            with pytest.raises(ValueError, match=r"not an eager mode: compiled mode is torch.compile\(model, "
                                                 r"backend='tpu'\).*'fused' \(EagerMode.DEFER_AND_FUSE\)"):
                torch.tpu.eager_mode = name
            continue
        torch.tpu.eager_mode = name
        assert torch.tpu.eager_mode is EagerMode[member], name
        torch.tpu.eager_mode = name.upper()  # any case, as EagerMode's own names
        assert torch.tpu.eager_mode is EagerMode[member]
        x = torch.arange(4.0).to("tpu")
        assert torch.equal((x * 2 + 1).cpu(), torch.arange(4.0) * 2 + 1)  # and the mode runs
    for spelling in ("DEFER_AND_FUSE", "defer_and_fuse", EagerMode.DEFER_AND_FUSE):
        torch.tpu.eager_mode = spelling
        assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE
    with pytest.raises(ValueError, match="unknown eager mode 'fast'; choose one of 'eager'"):
        torch.tpu.eager_mode = "fast"


def test_set_eager_mode_without_with_switches_for_good():
    torch.tpu.set_eager_mode("fused")
    assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE
    y = torch.ones(3).to("tpu") + 1  # still fused after the call returned
    assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE and torch.equal(y.cpu(), torch.full((3,), 2.0))
    with torch.tpu.set_eager_mode("debug"):
        assert torch.tpu.eager_mode is EagerMode.DEFER_NEVER_AND_LAUNCH_BLOCKING
    assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE  # the block restored the mode from before it


def test_the_readme_snippet_runs_as_it_says():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    snippet = next(b for b in blocks if "torch.tpu.eager_mode" in b)
    assert 'torch.tpu.eager_mode = "fused"' in snippet
    exec(compile(snippet, "README.md", "exec"), {"torch": torch})
    assert torch.tpu.eager_mode is EagerMode.DEFER_AND_FUSE  # its last line, set_eager_mode without with
    assert "switches the mode for good" in README.read_text()
    assert torch_tpu.EagerMode is EagerMode
