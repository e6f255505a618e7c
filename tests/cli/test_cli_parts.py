"""The command line's parts, each alone: the report's lines from numbers, the timed run over a stand-in
pipeline, the pipeline's placing and compiling, the demo model's loading, ``main``'s failures as one line; and
the parts kept short (no function over 80 lines)."""
import argparse
import ast
import pathlib
import types

import pytest

from torch_tpu.cli import arguments, commands, loading, report, timed_run

CLI = pathlib.Path(__file__).resolve().parents[2] / "torch_tpu" / "cli"


def test_no_function_of_the_command_line_is_over_80_lines():
    long = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, long


# --- the report ---------------------------------------------------------------------------------------
def test_the_stage_table_puts_the_steps_between_text_encoding_and_the_decode():
    stages = [("load", 1.5), ("move to device", 0.25), ("text encoding", 0.125), ("vae decode", 0.5)]
    lines = report.stage_table(stages, [0.75, 0.25], call_s=1.75, total_s=4.0, of_last_run=True)
    names = [line[:32].strip() for line in lines[1:]]
    assert lines[0] == "--- time per stage (s) of the last run ---"
    assert names == ["load", "move to device", "text encoding", "denoising step 1", "denoising step 2", "vae decode",
                     "pipeline call", "total"]
    assert lines[4].endswith("0.750  (includes latent preparation)") and lines[5].endswith("    0.250")
    assert lines[-1] == f"{'total':<32s}{4.0:9.3f}"
    assert report.stage_table([], [], 1.0, 1.0, of_last_run=False)[0] == "--- time per stage (s) ---"


def test_the_steady_state_leaves_out_each_run_s_first_step():
    runs = [(2.0, [0.9, 0.1, 0.3]), (4.0, [0.8, 0.2]), (3.0, [0.7, 0.4])]
    lines = report.steady_state([5.0], runs)
    assert lines[0] == "--- steady state: 3 timed run(s) after 1 warm-up call(s) ---"
    assert lines[1].endswith("5.000")
    assert "pipeline call median" in lines[2] and "3.000" in lines[2] and "(min 2.000, max 4.000)" in lines[2]
    assert "denoising step median" in lines[3] and f"{0.25:9.3f}" in lines[3]  # median of 0.1, 0.3, 0.2, 0.4
    assert len(report.steady_state([], [(1.0, [0.5])])) == 2  # no warm-up line, no step after the first


def test_programs_are_counted_per_stage_and_the_loop_gets_the_rest():
    built = {"move to device": 0, "text encoding": 7, "vae decode": 5}
    assert report.programs_line(20, built) == "programs: 20 distinct (text encoding 7, denoising 8, vae decode 5)"
    assert report.programs_line(0, {}) == "programs: 0 distinct"


def test_the_compile_summary_says_why_a_cold_run_was_slow():
    cold = {"compiles": 10, "compile_seconds": 3.0, "cache_loads": 0, "cache_rejects": 0}
    line = report.compile_summary(cold, 4.0, "/c", warm=True)
    assert line.startswith("compiled 10 programs (3.0 s), loaded 0 from cache (/c)")
    assert "cold run: 75% of the first (warm-up) pipeline call" in line and "now on disk" in line
    off = report.compile_summary(cold, 4.0, None)
    assert "disk cache off" in off and "set TORCH_TPU_CACHE_DIR" in off
    partly = report.compile_summary({**cold, "cache_loads": 3, "cache_rejects": 2}, 4.0, "/c")
    assert "ignored 2 bad cache entries" in partly and "not in the cache yet" in partly
    assert "\n" not in report.compile_summary({**cold, "compile_seconds": 0.5}, 4.0, "/c")  # a small share: no why


def test_the_stats_and_saved_lines():
    assert report.stats_line({"compiles": 3, "compile_seconds": 1.234, "other": 9}) == \
        "torch_tpu stats: compiles=3, compile_seconds=1.23"
    runs = [(1.0, []), (3.0, []), (2.0, [])]
    assert report.saved_line("o.png", (64, 32), runs, quiet=False) == "saved: o.png (64x32)"
    assert report.saved_line("o.png", (64, 32), runs, quiet=True) == "saved: o.png (64x32)  pipeline call 2.000 s (median)"
    assert report.mib(3 * 2**19) == "1.50 MiB" and report.median([4, 1, 3, 2]) == 2.5


# --- the timed run ------------------------------------------------------------------------------------
class _Pipe:
    """A stand-in pipeline: encodes, runs its steps calling the step callback, decodes; records its calls."""

    def __init__(self, steps_done):
        self.calls = []
        self.steps_done = steps_done
        self.vae = types.SimpleNamespace(decode=lambda latents: ("image", latents))

    def encode_prompt(self, prompt):
        return prompt.upper()

    def __call__(self, prompt, num_inference_steps, height, width, generator, callback_on_step_end, **kw):
        import torch

        self.calls.append(dict(prompt=prompt, steps=num_inference_steps, size=(height, width), draw=float(
            torch.rand((), generator=generator)), **kw))
        self.encode_prompt(prompt)
        for i in range(num_inference_steps):
            callback_on_step_end(self, i, i, {})
            self.steps_done.append(i)
        self.vae.decode(None)
        return types.SimpleNamespace(images=[f"image {len(self.calls)}"])


def _args(**kw):
    base = dict(prompt="a red circle", steps=3, seed=7, guidance=None, demo_call={}, warmup=1, runs=2)
    return argparse.Namespace(**{**base, **kw})


def test_the_timed_run_times_each_call_and_its_stages():
    syncs = []
    pipe = _Pipe([])
    timer = timed_run.StageTimer(lambda: syncs.append(1), programs=lambda: len(syncs))
    timer.stages.append(("load", 1.0))
    result = timed_run.timed_calls(pipe, _args(guidance=2.5, demo_call={"max_sequence_length": 16}), 32, 48, timer,
                                   on_tpu=False)
    assert len(result.warm_s) == 1 and len(result.runs) == 2 and result.image == "image 3"
    assert all(len(steps) == 3 for _, steps in result.runs) and result.last_steps == result.runs[-1][1]
    # the setup stage kept, then the last call's own stages only
    assert [name for name, _ in timer.stages] == ["load", "text encoding", "vae decode"]
    assert {c["size"] for c in pipe.calls} == {(32, 48)} and {c["steps"] for c in pipe.calls} == {3}
    assert all(c["guidance_scale"] == 2.5 and c["max_sequence_length"] == 16 for c in pipe.calls)
    assert len({c["draw"] for c in pipe.calls}) == 1  # a fresh generator of the same seed every call
    assert syncs  # the stages and steps synchronised the device


def test_no_warm_up_and_one_run():
    result = timed_run.timed_calls(_Pipe([]), _args(warmup=0, runs=1, steps=1), 16, 16,
                                   timed_run.StageTimer(lambda: None), on_tpu=False)
    assert result.warm_s == [] and len(result.runs) == 1 and len(result.last_steps) == 1


# --- placing and compiling ----------------------------------------------------------------------------
class _Placed:
    def __init__(self):
        self.done = []
        self.transformer = types.SimpleNamespace(
            compile=lambda **kw: self.done.append(("compile", kw)),
            compile_repeated_blocks=lambda **kw: self.done.append(("compile_repeated_blocks", kw)))

    def to(self, device):
        self.done.append(("to", device))

    def enable_model_cpu_offload(self):
        self.done.append(("offload",))


@pytest.mark.parametrize("offload,on_tpu,mode,expected,stage", [
    (False, True, "eager", [("to", "tpu")], "move to device"),
    (True, True, "eager", [("offload",)], "move to device (offload hooks)"),
    (False, False, "eager", [], "move to device"),
    (False, True, "compile", [("to", "tpu"), "compile"], "move to device"),
    (True, True, "compile", [("offload",), "compile_repeated_blocks"], "move to device (offload hooks)"),
])
def test_the_pipeline_is_placed_and_compiled_as_asked(offload, on_tpu, mode, expected, stage):
    pipe = _Placed()
    args = argparse.Namespace(offload=offload, mode=mode)
    assert loading.place_pipeline(pipe, args, on_tpu) == stage
    loading.compile_for_mode(pipe, args, on_tpu)
    done = [d if d[0] in ("to", "offload") else d[0] for d in pipe.done]
    assert done == expected
    for d in pipe.done:
        if d[0].startswith("compile"):
            assert d[1] == dict(backend="tpu", fullgraph=True, dynamic=False)


def test_the_shipped_demo_model_loads_at_its_training_size(tmp_path):
    import torch

    args = arguments.parser().parse_args(["generate", "--output", str(tmp_path / "o.png"), "--quiet"])
    arguments.validate_generate(args)
    said = []
    pipe, height, width = loading.load_pipeline(args, torch.float32, said.append)
    assert type(pipe).__name__ == "FluxPipeline" and (height, width) == (64, 64)
    assert said[0].startswith("model: the shipped demo model") and said[-1] == "pipeline: FluxPipeline"
    assert next(pipe.transformer.parameters()).device.type == "cpu"  # loaded on the host; placing is apart


# --- main -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raised,code,message", [
    (arguments.UsageError("--steps 0: must be at least 1"), 2, "torch_tpu: error: --steps 0: must be at least 1"),
    (KeyboardInterrupt(), 130, "torch_tpu: error: interrupted"),
    (RuntimeError("the device fell over\nand more"), 1,
     "torch_tpu: error: RuntimeError: the device fell over (run with --debug for the traceback)"),
])
def test_a_failing_command_is_one_line_with_its_exit_status(raised, code, message, monkeypatch, capsys):
    def command(args):
        raise raised

    monkeypatch.setitem(commands.COMMANDS, "info", command)
    assert commands.main(["info"]) == code
    assert capsys.readouterr().err.strip() == message


def test_main_runs_the_command_it_names(monkeypatch):
    ran = []
    monkeypatch.setitem(commands.COMMANDS, "bench", lambda args: ran.append(args.command) or 0)
    assert commands.main(["bench"]) == 0 and ran == ["bench"]
