"""The container image's recipe (``Dockerfile``, ``.dockerignore``), reviewed as text.

Why text: the image cannot be built where the suite runs (no Docker engine, and no registry but
the package indexes to pull a base image from), so these tests hold the Dockerfile to the
properties a cluster relies on: a base pinned by digest (checked at release), one recipe for linux/amd64
and linux/arm64 with every dependency from wheels (``test_platforms.py`` proves the wheels
exist), a numeric non-root user matching ``deploy/``, nothing written outside ``/tmp`` (the
pods run with ``readOnlyRootFilesystem``), an exec-form entry point that needs no shell and
accepts the deployment's ``args``, and a build context of only what is installed.  What can run
here does: the entry point's module is started with the deployment's first argument.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib

import yaml

from tests.support.paths import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
RELEASE = REPO / ".github" / "workflows" / "release.yml"


def instructions(text: str = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1].strip()}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def deployment_container() -> tuple[dict, dict]:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "base" / "deployment.yaml").read_text()))
    (deployment,) = [d for d in docs if d and d.get("kind") == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "gpuguard"]
    return pod, container


def test_every_stage_builds_from_the_one_base_argument_pinned_by_digest():
    steps = instructions()
    args = dict(re.match(r"(\w+)=?(.*)", rest).groups() for word, rest in steps if word == "ARG")
    base = args["PYTHON_IMAGE"]
    # Python 3.11 as pyproject targets, pinned to a full sha256 digest (never the moving tag alone).
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base
    assert steps[0] == ("ARG", f"PYTHON_IMAGE={base}")
    froms = [rest for word, rest in steps if word == "FROM"]
    assert len(froms) == 2 and all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)
    # The release checks the pin serves both platforms, then builds both from it (not from another base).
    release = yaml.safe_load(RELEASE.read_text())
    steps_text = json.dumps(release["jobs"]["image"]["steps"])
    assert "imagetools inspect" in steps_text and "linux/arm64" in steps_text
    assert "linux/amd64,linux/arm64" in steps_text and "PYTHON_IMAGE=" not in steps_text.replace(
        "ARG PYTHON_IMAGE=", "")


def test_dependencies_install_from_wheels_only_into_a_venv_the_final_stage_copies():
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert "pip install --only-binary=:all:" in runs
    assert ("COPY", "--from=build /opt/gpuguard /opt/gpuguard") in final_stage()


def test_the_final_stage_runs_as_the_deployments_numeric_non_root_user():
    pod, _ = deployment_container()
    users = [rest for word, rest in final_stage() if word == "USER"]
    assert users, "the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    assert (int(uid), int(gid)) == (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"])


def test_nothing_is_written_outside_tmp_so_a_read_only_root_filesystem_works():
    stage = final_stage()
    env = " ".join(rest for word, rest in stage if word == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env  # bytecode was compiled in the build stage
    assert "HOME=/tmp" in env and ("WORKDIR", "/tmp") in stage
    assert "compileall" in " ".join(rest for word, rest in instructions() if word == "RUN")
    _, container = deployment_container()
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "tmp"] == ["/tmp"]


def test_no_shell_is_needed_at_run_time():
    stage = final_stage()
    assert not [rest for word, rest in stage if word == "RUN"], "the final stage runs nothing at build time either"
    entrypoints = [rest for word, rest in stage if word == "ENTRYPOINT"]
    cmds = [rest for word, rest in stage if word == "CMD"]
    assert len(entrypoints) == 1 and len(cmds) == 1
    for form in entrypoints + cmds:
        assert isinstance(json.loads(form), list), f"shell form would need /bin/sh: {form}"


def test_the_entry_point_accepts_the_deployments_args():
    """``ENTRYPOINT`` + the deployment's ``args`` is a gpuguard command (run here with this Python)."""
    (entrypoint,) = [json.loads(rest) for word, rest in final_stage() if word == "ENTRYPOINT"]
    assert entrypoint[0] == "/opt/gpuguard/bin/python" and entrypoint[1:] == ["-m", "gpuguard.webhook"]
    _, container = deployment_container()
    assert "command" not in container and container["args"][0] == "serve"
    proc = subprocess.run([sys.executable, *entrypoint[1:], container["args"][0], "--help"], capture_output=True,
                          text=True, timeout=60, cwd="/tmp")
    assert proc.returncode == 0 and "--tls-cert" in proc.stdout, proc.stderr


def test_the_build_context_is_exactly_what_the_image_copies():
    shipped = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"].values()
    copies = [rest.split() for word, rest in instructions() if word == "COPY" and not rest.startswith("--from")]
    sources = {src for *srcs, _dest in copies for src in srcs}
    assert {f"{folder}/" for folder in shipped} <= sources, "the image would be built without a package"
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", "an allow-list: everything else (tests, .git, bench/) stays out"
    allowed = {p[1:] for p in patterns if p.startswith("!")}
    assert allowed == sources


def test_the_commit_stamp_matches_the_line_it_rewrites():
    """The Dockerfile's ``sed`` finds ``BUILD_COMMIT = None`` in ``webhook/__init__.py`` (exactly once)."""
    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    assert 's/^BUILD_COMMIT = None$/BUILD_COMMIT = \\"$GIT_COMMIT\\"/' in runs
    assert "*[!0-9a-f]*" in runs  # only a hex commit id reaches the Python source
    init = (REPO / "webhook" / "__init__.py").read_text()
    assert re.findall(r"^BUILD_COMMIT = None$", init, re.M) == ["BUILD_COMMIT = None"]
