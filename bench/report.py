"""Copy the tables of the last runs (``bench/results/*.json``) into ``bench/README.md``.

Why: the README promises "the table of the last run"; pasting by hand drifts.  Each results
file's ``tables`` text replaces the block between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->`` (NAME = the results file's stem), together with the run's date,
commit and machine.  ``python bench/report.py``; ``--check`` writes nothing and fails when a
block has no recorded run with its commit and tables to be regenerated from (``bench/smoke.py``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import orjson
from _common import HERE, machine_line
from _paths import check_paths, wanted

README = HERE / "README.md"


RECORDED = HERE / "results"  # the recorded runs, whatever GPUGUARD_BENCH_RESULTS says
NEEDS = (README, RECORDED)  # what --check-paths checks (bench/_paths.py)


def block(name: str) -> str | None:
    """The README block for one results file, or None when that benchmark has not run yet."""
    path = RECORDED / f"{name}.json"
    if not path.exists():
        return None
    doc = orjson.loads(path.read_bytes())
    code = doc.get("code", {})
    dirty = " (with uncommitted engine changes)" if code.get("engine_dirty") else ""
    meta = (f"_Last run {doc['when']} at commit `{code.get('commit', 'unknown')}`{dirty} on "
            f"{machine_line(doc['machine'])}; raw numbers: `bench/results/{name}.json`._")
    return f"{meta}\n\n```text\n{doc['tables'].strip()}\n```"


def check(names: list[str]) -> list[str]:
    """What keeps a README block from being regenerated: no results file, or one without commit or tables."""
    problems = []
    for name in names:
        path: Path = RECORDED / f"{name}.json"
        if not path.exists():
            problems.append(f"{name}: no bench/results/{name}.json")
            continue
        doc = orjson.loads(path.read_bytes())
        if not doc.get("code", {}).get("commit") or not doc.get("tables") or "when" not in doc:
            problems.append(f"{name}: bench/results/{name}.json lacks its commit, date or tables")
    return problems


def main() -> int:
    """Rewrite every results block of the README in place (``--check``: only check that it can be)."""
    if wanted():
        return check_paths()
    text = README.read_text()
    names = re.findall(r"<!-- results:([\w-]+) -->", text)
    if "--check" in sys.argv[1:]:
        problems = check(names)
        for problem in problems:
            print(problem, file=sys.stderr)
        print(f"{len(names)} README block(s), {len(problems)} without a recorded run to regenerate from")
        return 1 if problems else 0
    for name in names:
        body = block(name)
        if body is None:
            print(f"no bench/results/{name}.json; left as it was", file=sys.stderr)
            continue
        pattern = re.compile(rf"(<!-- results:{re.escape(name)} -->).*?(<!-- /results:{re.escape(name)} -->)",
                             re.DOTALL)
        text = pattern.sub(lambda m, b=body: f"{m.group(1)}\n{b}\n{m.group(2)}", text)
    README.write_text(text)
    print(f"updated {len(names)} block(s) in {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
