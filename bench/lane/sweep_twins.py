"""Run twin families (tests/harness/twin_cases.py) and print failures with whether B alone fails.
usage: python bench/lane/sweep_twins.py [family-substring] [modes,comma] [limit]"""
import collections, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))  # the repository root
import torch, torch_tpu  # noqa
from tests.harness import twins, twin_cases

pat = sys.argv[1] if len(sys.argv) > 1 else ""
modes = sys.argv[2].split(",") if len(sys.argv) > 2 else list(twins.MODES)
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
src = twin_cases.opinfo_twins(int(os.environ.get("OPS", "400")), int(os.environ.get("SEED", "0"))) if pat.startswith("op_") else twin_cases.all_twins()
cases = [t for t in src if pat in t.name][:limit]
counts = collections.Counter(); bad = collections.Counter()
t0 = time.time()
for tw in cases:
    counts[tw.family] += 1
    try:
        probs = twins.run_twin(tw, modes)
    except Exception as e:
        probs = [f"[harness] {type(e).__name__}: {e}"]
    if probs:
        # is it a key bug? B alone / A alone
        alone = twins.alone(tw.b, "strict") + twins.alone(tw.a, "strict")
        bad[tw.family] += 1
        print(f"FAIL {tw.name} ({'ALONE-FAILS' if alone else 'KEY?'}):", *probs[:4], *(["  alone: " + a for a in alone[:2]]), sep="\n   ", flush=True)
print("tried", dict(counts), "failed", dict(bad), f"{time.time()-t0:.0f}s")
