"""Catalogue a run of the differential tests from pytest's JUnit XML files.

    python3 -m pytest -q tests/ops/test_scalar_arguments.py --tb=no --junitxml=/tmp/h_scalars.xml   # etc.
    python3 scripts/hostile_catalogue.py /tmp/h_*.xml > catalogue.md

Each failure message of tests/harness/differential.py starts with a tag ([wrong value], [silent], [crash]...);
this script counts cases per file and per tag and lists the failing test ids grouped by test
function and tag, each with one example message.
"""
from __future__ import annotations

import collections
import re
import sys
import xml.etree.ElementTree as ET

TAG = re.compile(r"\[(wrong value|wrong dtype|wrong shape|wrong structure|wrong type|wrong requires_grad|"
                 r"wrong stride|lost value|silent|tpu raised|unclear error|late error|device broken|recompiles|growth|"
                 r"crash|hang|setup)\]")
# the worst first: a case counts under its worst tag
ORDER = ["crash", "hang", "silent", "lost value", "wrong dtype", "wrong value", "wrong shape", "wrong structure", "wrong type",
         "wrong stride", "wrong requires_grad", "mutation mismatch", "device broken", "late error",
         "unclear error", "tpu raised", "recompiles", "growth", "setup", "other"]


def classify(msg: str) -> list[str]:
    tags = []
    for line in msg.splitlines() or [msg]:
        for m in TAG.finditer(line):
            t = m.group(1)
            if t == "wrong value" and re.search(r"input \d+ after the (call|sequence)", line):
                t = "mutation mismatch"
            tags.append(t)
    return tags or ["other"]


def worst(tags):
    return min(tags, key=lambda t: ORDER.index(t) if t in ORDER else len(ORDER))


def main(paths):
    per_file = collections.OrderedDict()
    groups = collections.defaultdict(list)  # (file, function, tag) -> [(id, msg)]
    for p in paths:
        root = ET.parse(p).getroot()
        for c in root.iter("testcase"):
            f = c.get("classname", "").split(".")[-1] or p
            name = c.get("name")
            stats = per_file.setdefault(f, collections.Counter())
            if c.find("skipped") is not None:
                stats["skipped"] += 1
                continue
            stats["cases"] += 1
            fail = c.find("failure")
            if fail is None:
                fail = c.find("error")
            if fail is None:
                stats["passed"] += 1
                continue
            msg = (fail.get("message") or "") + "\n" + (fail.text or "")[-3000:]
            tags = classify(fail.get("message") or msg)
            w = worst(tags)
            stats["failed"] += 1
            stats[w] += 1
            func = name.split("[")[0]
            groups[(f, func, w)].append((name, (fail.get("message") or "").strip()))
    out = []
    total = collections.Counter()
    out.append("| file | cases | passed | failed | " + " | ".join(ORDER) + " |")
    out.append("|---|---|---|---|" + "---|" * len(ORDER))
    for f, s in per_file.items():
        total.update(s)
        out.append(f"| {f} | {s['cases']} | {s['passed']} | {s['failed']} | " + " | ".join(str(s[t] or "") for t in ORDER) + " |")
    out.append(f"| **all** | {total['cases']} | {total['passed']} | {total['failed']} | "
               + " | ".join(str(total[t] or "") for t in ORDER) + " |")
    out.append("")
    for (f, func, tag), items in sorted(groups.items()):
        out.append(f"### {f}::{func} -- {tag} ({len(items)})")
        params = [i[0][len(func):].strip("[]") for i in items]
        out.append("ids: " + ", ".join(params))
        ex = items[0][1].replace("\n", " | ")
        out.append(f"example ({items[0][0]}): {ex[:700]}")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
