"""Compile counts of 20 steps of a compiled optimizer step (torch.compile(opt.step, backend="tpu", dynamic=False))
under an LR scheduler, and the largest parameter difference from CPU eager.

Run: PYTHONPATH=$PWD python3 scripts/compile_counts_lr_schedulers.py 2>/dev/null"""
import sys, time, torch, torch_tpu
import torch._dynamo

OPTS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}
SCHEDS = {
    "steplr": lambda o: torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.9),
    "lambdalr": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda i: 1.0 / (1 + i)),
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=40),
}

def train(d, mk_opt, mk_sched, steps=20):
    torch._dynamo.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2)).to(d)
    opt = mk_opt(m.parameters()); sch = mk_sched(opt)
    step = torch.compile(opt.step, backend="tpu", dynamic=False) if d != "cpu" else opt.step
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, generator=g).to(d); y = torch.randn(3, 2, generator=g).to(d)
    for i in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        step(); sch.step()
    return [p.detach().cpu() for p in m.parameters()]

import torch._dynamo.utils as du
tot = 0
for on, mo in OPTS.items():
    for sn, ms in SCHEDS.items():
        ref = train("cpu", mo, ms)
        torch_tpu.reset_stats(); du.counters.clear()
        t = time.time()
        got = train("tpu", mo, ms)
        st = torch_tpu.stats()
        err = max((a - b).abs().max().item() for a, b in zip(ref, got))
        print(f"{on:6s} {sn:9s} graph_compiles={st.get('graph_compiles',0):3d} xla_compiles={st.get('compiles',0):3d} "
              f"dynamo_frames={du.counters['stats']['unique_graphs']:3d} maxerr={err:.2e} {time.time()-t:.1f}s", flush=True)
