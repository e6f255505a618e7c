"""The timed run of ``generate``: the pipeline called ``--warmup`` times untimed, then ``--runs`` times, with
the device synchronised at every stage's boundary (text encoding, each denoising step, the VAE's decode) so
that asynchronous work is counted in the stage where it ran."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


class StageTimer:
    """Stage times with a device sync at every boundary, so asynchronous work is counted where it ran."""

    def __init__(self, sync, programs=lambda: 0):
        self.sync = sync
        self.stages: list[tuple[str, float]] = []
        self.programs = programs  # distinct programs built or loaded so far (torch_tpu.stats())
        self.built: dict[str, int] = {}  # stage -> programs it built or loaded, over every call
        self.mark = time.perf_counter()  # the end of the last stage or step

    def wrap(self, name, fn):
        def timed(*a, **kw):
            self.sync()
            t0, p0 = time.perf_counter(), self.programs()
            out = fn(*a, **kw)
            self.sync()
            self.stages.append((name, time.perf_counter() - t0))
            self.built[name] = self.built.get(name, 0) + self.programs() - p0
            self.mark = time.perf_counter()
            return out
        return timed


@dataclass
class Runs:
    """What the timed calls measured: the warm-up calls' seconds, each timed call's seconds with its
    denoising steps' seconds, and the last call's image."""
    warm_s: list[float] = field(default_factory=list)
    runs: list[tuple[float, list[float]]] = field(default_factory=list)
    image: object = None

    @property
    def last_steps(self) -> list[float]:
        return self.runs[-1][1] if self.runs else []


def call_arguments(args, height, width, on_step_end) -> dict:
    """The pipeline call ``args`` ask for (a fresh CPU generator of ``--seed`` each call: every run draws the
    same image)."""
    import torch

    call = dict(prompt=args.prompt, num_inference_steps=args.steps, height=height, width=width,
                generator=torch.Generator("cpu").manual_seed(args.seed), callback_on_step_end=on_step_end)
    if args.guidance is not None:
        call["guidance_scale"] = args.guidance
    if "max_sequence_length" in args.demo_call:
        call["max_sequence_length"] = args.demo_call["max_sequence_length"]
    return call


def timed_calls(pipe, args, height, width, timer: StageTimer, on_tpu: bool) -> Runs:
    """Calls the pipeline ``args.warmup`` times, then ``args.runs`` times, timing each call and its stages
    (``timer.stages`` ends holding the setup stages and the last call's)."""
    pipe.encode_prompt = timer.wrap("text encoding", pipe.encode_prompt)
    pipe.vae.decode = timer.wrap("vae decode", pipe.vae.decode)
    step_times: list[float] = []

    def on_step_end(p, i, t, kwargs):
        timer.sync()
        now = time.perf_counter()
        step_times.append(now - timer.mark)
        timer.mark = now
        return kwargs

    def call_once():
        call = call_arguments(args, height, width, on_step_end)
        timer.mark = t_call = time.perf_counter()
        image = pipe(**call).images[0]
        timer.sync()
        if on_tpu:  # the totals of the stages whose compilation was announced, before the stage table
            from ..runtime import compile_status

            compile_status.close_stages()
        return image, time.perf_counter() - t_call

    setup_stages = len(timer.stages)  # load, device start, move: kept; each call records its own stages
    result = Runs()
    for timed in [False] * args.warmup + [True] * args.runs:
        step_times.clear()
        del timer.stages[setup_stages:]
        image, call_s = call_once()
        if timed:
            result.runs.append((call_s, list(step_times)))
            result.image = image
        else:
            result.warm_s.append(call_s)
    return result
