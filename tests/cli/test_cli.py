"""`python -m torch_tpu` in subprocesses: info, generate (tiny, 2 steps, 64x64) and compiled mode."""

import os
import re
import sys

import pytest
from tests.harness import REPO, hangs

pytestmark = pytest.mark.slow

_PIPES = None


@pytest.fixture(scope="module", autouse=True)
def _shared_tiny_pipelines(tmp_path_factory):
    # one offline build of the tiny pipelines for the file's runs (each run built its own before)
    global _PIPES
    _PIPES = str(tmp_path_factory.mktemp("pipes"))


def _run(args, tmp_path, timeout=240, **env_extra):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCH_TPU_TINY_PIPELINES_DIR=_PIPES, **env_extra)
    return hangs.run([sys.executable, "-m", "torch_tpu", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp_path)


def test_info(tmp_path):
    r = _run(["info"], tmp_path)
    assert r.returncode == 0, r.stderr
    for key in ("platform:", "devices:", "memory:", "torch ", "jax ", "jaxlib ", "diffusers ", "transformers ",
                "torch_tpu ", "compile cache: ", "offline pipelines: ", "TORCH_TPU_* settings: ", "PJRT plugins: "):
        assert key in r.stdout, (key, r.stdout)


def test_generate_tiny(tmp_path):
    """The demo model, 2 steps, a warm-up and 2 timed runs, on an empty disk cache: the stage table, the
    steady-state lines, the live compile status on stderr, and the compile share put on the warm-up
    call that compiled (it was put on the first timed call, which compiles nothing)."""
    out = tmp_path / "img.png"
    r = _run(["generate", "--steps", "2", "--height", "64", "--width", "64", "--output", str(out),
              "--warmup", "1", "--runs", "2"], tmp_path, TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"),
             TORCH_TPU_COMPILE_STATUS_AFTER="0.000001")
    assert r.returncode == 0, r.stdout + r.stderr
    assert out.is_file() and out.stat().st_size > 0
    from PIL import Image

    assert Image.open(out).size == (64, 64)
    for line in ("platform: ", "device: tpu:0", "load", "move to device", "text encoding",
                 "denoising step 1", "denoising step 2", "vae decode", "total", "peak device memory:",
                 "compiles=", "cache_hits=", "cache_loads=", "loaded ", "from cache", "programs: ", " distinct (",
                 "saved:", "steady state: 2 timed run(s) after 1 warm-up",
                 "pipeline call median", "denoising step median"):
        assert line in r.stdout, (line, r.stdout)
    assert "denoising step 3" not in r.stdout
    assert "it/s" in r.stderr or "s/it" in r.stderr  # diffusers' progress bar
    # the distinct programs, by stage: they add up to the run's program cache misses
    total, stages = re.search(r"programs: (\d+) distinct \(([^)]*)\)", r.stdout).groups()
    counts = dict(re.fullmatch(r"(.+) (\d+)", part).groups() for part in stages.split(", "))
    assert {"text encoding", "denoising", "vae decode"} <= set(counts), stages
    assert sum(int(n) for n in counts.values()) == int(total) == int(re.search(r"cache_misses=(\d+)", r.stdout)[1])
    assert "torch_tpu: compiled " in r.stderr, r.stderr[-2000:]  # the live compile status
    assert "of the first (warm-up) pipeline call was XLA compilation" in r.stdout, r.stdout


def test_quiet_prints_only_the_result_and_no_compile_status(tmp_path):
    out = tmp_path / "q.png"
    r = _run(["generate", "--steps", "1", "--quiet", "--output", str(out)], tmp_path,
             TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), TORCH_TPU_COMPILE_STATUS_AFTER="0.000001")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().startswith("saved:") and len(r.stdout.strip().splitlines()) == 1, r.stdout
    assert "torch_tpu: compil" not in r.stderr, r.stderr[-2000:]


def test_an_unknown_option_shows_the_subcommand_usage(tmp_path, capsys):
    from torch_tpu import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["generate", "--frobnicate"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "usage: python -m torch_tpu generate" in err
    assert "unrecognized arguments: --frobnicate" in err


def test_the_demo_model_warns_about_prompts_it_was_not_trained_on(tmp_path):
    from torch_tpu.cli import arguments

    def notes(*extra):
        args = arguments.parser().parse_args(["generate", "--output", str(tmp_path / "o.png"), *extra])
        return arguments.validate_generate(args)

    assert notes() == [] and notes("--prompt", "A Yellow  Triangle") == []
    warning = notes("--prompt", "a purple hexagon")
    assert len(warning) == 1 and "knows only the 12 prompts" in warning[0] and "'a purple hexagon'" in warning[0]
    assert notes("--kind", "flux", "--prompt", "a purple hexagon") == []  # random-weight pipelines: no list


def test_generate_compile_mode(tmp_path):
    out = tmp_path / "compiled.png"
    r = _run(["generate", "--mode", "compile", "--steps", "2", "--height", "64", "--width", "64",
              "--output", str(out)], tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.exists() and "graph_compiles=" in r.stdout, r.stdout


# --- bad arguments: one line, non-zero exit, before anything loads ---------------------------------
BAD_ARGUMENTS = [
    (["--steps", "0"], "--steps 0"),
    (["--height", "7"], "--height 7: too small"),
    (["--runs", "0"], "--runs 0"),
    (["--output", "{tmp}/missing-folder/x.png"], "does not exist"),
    (["--output", "{tmp}/out.xyz"], "unknown image extension"),
    (["--output", "{tmp}"], "is a directory"),
    (["--model", "{tmp}/no-such-model"], "no such folder"),
    (["--model", "{tmp}"], "no model_index.json"),
    (["--model", "some-org/not-in-the-cache"], "not in the local Hugging Face cache"),
    (["--device", "cpu", "--offload"], "--offload needs --device tpu"),
]


@pytest.mark.parametrize("extra,message", BAD_ARGUMENTS, ids=[m for _, m in BAD_ARGUMENTS])
def test_bad_arguments_fail_before_loading(extra, message, tmp_path, monkeypatch, capsys):
    from torch_tpu import cli
    from torch_tpu.cli import loading

    with loading.import_notices_kept_off(True):  # (diffusers' imports log to the stream an earlier test captured)
        import diffusers

        assert diffusers.DiffusionPipeline is not None  # (resolves diffusers' lazy import of the pipeline module)

    def loaded(*a, **k):
        raise AssertionError("the pipeline was loaded before the arguments were checked")

    monkeypatch.setattr(diffusers.DiffusionPipeline, "from_pretrained", loaded)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    argv = ["generate", "--output", str(tmp_path / "ok.png")] + [a.format(tmp=tmp_path) for a in extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_size_rounding_is_announced_and_help_shows_defaults(tmp_path):
    from torch_tpu.cli import arguments

    args = arguments.parser().parse_args(["generate", "--height", "70", "--width", "64",
                                          "--output", str(tmp_path / "o.png")])
    notes = arguments.validate_generate(args)
    assert args.height == 64 and args.width == 64 and args.dtype == "float32"
    assert notes == ["note: --height 70 is not a multiple of 16; using 64"]
    help_text = arguments.parser()._subparsers._group_actions[0].choices["generate"].format_help()
    assert "(default: 4)" in help_text and "--warmup" in help_text and "--quiet" in help_text


def test_a_failure_after_validation_is_one_line_without_traceback(tmp_path):
    model = tmp_path / "broken"
    model.mkdir()
    (model / "model_index.json").write_text("{}")
    r = _run(["generate", "--model", str(model), "--output", str(tmp_path / "o.png")], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torch_tpu: error:" in r.stderr and "--debug" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "dtype: bfloat16" in r.stdout  # --model defaults to bfloat16


_COLLECTOR_PROBE = r"""
import gc, sys
from torch_tpu.cli import loading

def state():
    return gc.isenabled(), gc.get_freeze_count() > 0

out = {"start": state()}
with loading.collector_paused_while_loading(program=False):
    out["library_call"] = state()
with loading.collector_paused_while_loading(program=True):
    out["loading"] = state()
    loading.loaded()
    out["loaded"] = state()
out["after"] = state()
gc.unfreeze()
try:
    with loading.collector_paused_while_loading(program=True):
        raise RuntimeError("the model failed to load")
except RuntimeError:
    pass
out["after_failed_load"] = state()
print(out)
"""


def test_the_collector_pauses_while_the_program_loads_and_the_loaded_heap_is_frozen(tmp_path):
    """``python -m torch_tpu generate`` pauses Python's collector while the libraries import and the pipeline
    loads, then freezes what is alive (later collections skip it) and collects again; a load that fails
    leaves the collector running; ``cli.main`` called with arguments from another program leaves its heap
    alone. (In a child: freezing would keep this process's objects for good.)"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    r = hangs.run([sys.executable, "-c", _COLLECTOR_PROBE], capture_output=True, text=True, timeout=240,
                  env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = eval(r.stdout.strip().splitlines()[-1])
    assert out == {"start": (True, False), "library_call": (True, False), "loading": (False, False),
                   "loaded": (True, True), "after": (True, True), "after_failed_load": (True, False)}, out


_LONG = ("a red circle on a big wide field of grass under a blue sky with clouds and birds flying around the sun at "
         "noon on a summer day in the countryside")


def test_a_cold_run_prints_on_stderr_only_its_own_lines_and_progress(tmp_path):
    """A cold run (empty disk cache) of the demo with a long prompt it does not know: stderr holds torch_tpu's
    own lines (the compile status per stage, named after the module; the prompt cut to 16 T5 tokens), the
    libraries' progress bars and diffusers' true note that CLIP cut the prompt, nothing else. Its first lines
    were other libraries' import-time notices (transformers' "requires torchvision (not installed)" for an
    image processor FluxPipeline never uses ...), and a long prompt added two false alarms."""
    r = _run(["generate", "--steps", "2", "--prompt", _LONG, "--output", str(tmp_path / "o.png")], tmp_path,
             TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), TORCH_TPU_COMPILE_STATUS_AFTER="0.3")
    assert r.returncode == 0, r.stderr[-3000:]
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "\n", r.stderr)  # (tqdm moves between its nested bars)
    lines = [line.strip() for line in re.split(r"[\r\n]+", text) if line.strip()]
    bar = re.compile(r"^([\w .]+: *)?\d+%\|[^|]*\| *\d+/\d+ \[[^\]]*\]$")
    clip = "The following part of your input was truncated because CLIP can only handle sequences up to 77 tokens"
    foreign = [line for line in lines if not (line.startswith("torch_tpu: ") or bar.match(line) or line.startswith(clip))]
    assert not foreign, foreign
    assert re.search(r"torch_tpu: compiled \d+ programs for (CLIPTextModel|T5EncoderModel|AutoencoderKL)", r.stderr)
    assert "torch_tpu: this model reads 16 T5 tokens; a prompt of" in r.stderr
    assert "knows only the 12 prompts" in r.stdout and "knows only" not in r.stderr  # said once, before loading
