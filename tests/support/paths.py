"""Where the repository is, for tests that read its files (docs, fixtures, examples) or load its scripts."""
import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module (scripts are not a package: tests call their functions directly)."""
    spec = importlib.util.spec_from_file_location(f"gpuguard_script_{name}", REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
