"""``--check-paths``: every file, folder and module a benchmark driver names exists, checked without running it.

Why: the drivers that need a control plane, Go or a Kyverno build are run by hand and rarely, so
a rename elsewhere in the tree broke them unseen (issue 38: a package rename turned Kyverno's CRD
folder ``policies.kyverno.io`` into ``gpuguard.policies.kyverno.io`` and ``bench/apiserver.py
--peers`` failed).  So each bench module declares what it needs in one place, and
``python bench/X.py --check-paths`` -- which ``bench/smoke.py`` runs for every driver, so
``scripts/test.sh`` does -- parses the driver's arguments, loads its imports and then checks every
bench module it loaded (nothing is built, started or written):

* ``NEEDS``: the paths in the checkout it reads or runs -- each must exist;
* ``MADE``: the paths in the checkout it creates (build outputs, results) -- need not exist;
* every module-level ``Path`` inside the checkout (or tuple or list of them) must be in the NEEDS
  or MADE of a loaded bench module, so that a new path constant cannot skip the check;
* every import in its source, those inside functions included: the bench modules it imports
  are loaded and checked as well (``from bodies import ...`` in a function, ``--peers``' modules),
  the project's packages (``gpuguard``, ``tests``) must be found, and so must ``NEEDS_MODULES``:
  the modules it names otherwise (``python -m gpuguard.webhook``, code in a string);
* ``EXTERNAL_NAMES``: names owned by another project (Kyverno's CRD folders and annotation keys):
  none may name gpuguard, since no rename of gpuguard's own packages may reach them;
* ``path_problems()``: what else the module checks itself (the Kyverno CRD folders in its
  downloaded module, when the Go module cache has it).

The standard library only, so that a broken tree gives a report rather than an import error.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
FLAG = "--check-paths"
OWN_PACKAGES = ("gpuguard", "tests")  # imports of these are found, not loaded; others may be optional extras
HELP = ("check the files, folders and modules this driver names and its arguments, then exit "
        "without building or running anything (bench/smoke.py)")


def add_option(parser: argparse.ArgumentParser) -> None:
    """The ``--check-paths`` option, the same in every driver."""
    parser.add_argument(FLAG, action="store_true", help=HELP)


def _norm(path: Path) -> Path:
    return Path(os.path.abspath(path))  # not resolve(): a symlinked folder stays where the tree names it


def rel(path: Path | str) -> str:
    """``path`` relative to the checkout when inside it (messages name ``bench/peers/kyverno``, not /work/...)."""
    p = _norm(Path(path))
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)


def bench_modules() -> list[ModuleType]:
    """The loaded modules whose file is under ``bench/`` (one per file; ``__main__`` is the driver itself)."""
    seen: dict[Path, ModuleType] = {}
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if not file or not file.endswith(".py") or file.endswith("__init__.py"):
            continue
        path = _norm(Path(file))
        if path.is_relative_to(BENCH):
            seen.setdefault(path, mod)
    return [seen[p] for p in sorted(seen)]


def _paths_in(value: Any) -> list[Path]:
    if isinstance(value, Path):
        return [value]
    if isinstance(value, tuple | list) and value and all(isinstance(v, Path) for v in value):
        return list(value)
    return []


def _found(name: str) -> str | None:
    """None when module ``name`` can be imported, else why not (its parents are imported to look)."""
    try:
        return None if importlib.util.find_spec(name) is not None else "not found"
    except (ImportError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _imported(mod: ModuleType) -> set[str]:
    """Every absolute module name ``mod``'s source imports, in functions too (those imports run late)."""
    tree = ast.parse(Path(mod.__file__ or "").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names  # from peers import corpus: a module
                      if (BENCH / node.module.replace(".", "/") / f"{a.name}.py").is_file()}
    return names


def own_imports(mod: ModuleType) -> list[str]:
    """The project's packages (``gpuguard``, ``tests``) that ``mod`` imports: checked to be there, not loaded."""
    return sorted(n for n in _imported(mod) if n.split(".")[0] in OWN_PACKAGES)


def bench_imports(mod: ModuleType) -> list[str]:
    """The bench modules ``mod`` imports (``peers.kyverno_proc``, ``bodies``): loaded, so their paths are checked.

    Not a name like the module's own: ``import cel`` in bench/cel.py is the CEL library.
    """
    stem = Path(mod.__file__ or "").stem
    return sorted(n for n in _imported(mod) if (top := n.split(".")[0]) != stem
                  and ((BENCH / f"{top}.py").is_file() or (BENCH / top / "__init__.py").is_file()))


def load_bench_imports() -> list[str]:
    """Import every bench module a loaded one imports, late imports included, until none is new; the failures."""
    failed: dict[str, str] = {}
    while True:
        todo = {name: mod for mod in bench_modules() for name in bench_imports(mod)
                if name not in sys.modules and name not in failed}
        if not todo:
            return list(failed.values())
        for name, mod in todo.items():
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - reported: a driver that cannot load its own module is broken
                failed[name] = f"{rel(mod.__file__ or '?')}: imports {name}: {type(exc).__name__}: {exc}"


def problems(modules: Iterable[ModuleType] | None = None) -> tuple[list[str], list[str]]:
    """``(problems, checked)``: what is wrong, one line each naming module and path; the files checked."""
    mods = bench_modules() if modules is None else list(modules)
    declared: dict[Path, str] = {}
    for mod in mods:
        for what in ("NEEDS", "MADE"):
            for path in getattr(mod, what, ()):
                declared.setdefault(_norm(path), what)
    out: list[str] = []
    for mod in mods:
        out += [f"{rel(mod.__file__ or '?')}: {line}" for line in _module_problems(mod, declared)]
    return out, [rel(m.__file__ or "?") for m in mods]


def _module_problems(mod: ModuleType, declared: dict[Path, str]) -> list[str]:
    """One module's problems; ``declared`` (every loaded module's NEEDS and MADE) marks what it reported."""
    out = [f"NEEDS {rel(path)}: no such file or folder" for path in getattr(mod, "NEEDS", ())
           if not _norm(path).exists()]
    for var, value in vars(mod).items():
        for path in _paths_in(value):
            p = _norm(path)
            if p in (ROOT, BENCH) or not p.is_relative_to(ROOT) or p in declared:
                continue
            declared[p] = "reported"  # once, where first seen (an imported constant is in several modules)
            out.append(f"{var} = {rel(p)} is in neither NEEDS nor MADE of a bench module: declare it "
                       "(NEEDS: read or run, must exist; MADE: created by the benchmark)")
    for what, modules in (("imports", own_imports(mod)), ("NEEDS_MODULES", getattr(mod, "NEEDS_MODULES", ()))):
        out += [f"{what} {m}: {why}" for m in modules if (why := _found(m)) is not None]
    out += [f"EXTERNAL_NAMES {ext!r} names gpuguard, but it belongs to another project (did a rename of "
            "gpuguard's packages reach it?)" for ext in getattr(mod, "EXTERNAL_NAMES", ()) if "gpuguard" in ext.lower()]
    hook = getattr(mod, "path_problems", None)
    return out + (list(hook()) if callable(hook) else [])


def check_paths() -> int:
    """Report on every loaded bench module: 0 when all is there, 1 (each problem on stderr) when not."""
    failed = load_bench_imports()
    found, checked = problems()
    found = failed + found
    for line in found:
        print(f"check-paths: {line}", file=sys.stderr)
    for name in checked:
        print(f"check-paths: checked {name}")
    print(f"check-paths: {'FAILED' if found else 'ok'}: {len(checked)} bench module(s), {len(found)} problem(s)")
    return 1 if found else 0


def wanted(argv: list[str] | None = None) -> bool:
    """For the drivers without argparse: was ``--check-paths`` given?"""
    return FLAG in (sys.argv[1:] if argv is None else argv)
