"""The release pipeline (``.github/workflows``): linted by actionlint, and holding what a release promises.

Why both: actionlint (built from the Go module proxy by ``tests/support/actionlint/build.sh``,
with shellcheck on every ``run:`` script) finds what GitHub would reject or run wrongly: bad
expressions, unknown action inputs, shell mistakes.  It cannot know what the release is *for*:
the checks below pin that down (tests before anything is published, trusted publishing with no
stored token, both architectures, SBOM, provenance and a signature, the chart as an OCI
artifact at the version the tag names), so that a later edit cannot quietly drop one.
"""

from __future__ import annotations

import json
import re
import tomllib

import yaml

from tests.support.actionlint import actionlint
from tests.support.helm import helm_version
from tests.support.paths import REPO

WORKFLOWS = REPO / ".github" / "workflows"
#: The chart the release publishes (its own tests live with it).
CHART = "deploy/chart/gpuguard"


def workflow(name: str) -> dict:
    # PyYAML reads the `on:` key as True (YAML 1.1); put it back.
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))
    return data


def steps_text(job: dict) -> str:
    return json.dumps(job["steps"])


def uses(job: dict) -> list[str]:
    return [step["uses"].split("@")[0] for step in job["steps"] if "uses" in step]


def test_actionlint_finds_nothing_in_the_workflows():
    proc = actionlint()
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def test_actionlint_is_not_vacuous():
    """The same linter refuses an unknown context and a shell mistake (so the test above can fail)."""
    broken = ("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
              "      - run: echo ${{ github.nope }}\n      - run: cd $UNQUOTED_DIR_VARIABLE\n")
    proc = actionlint("-stdin-filename", "broken.yml", "-", stdin=broken)
    assert proc.returncode == 1
    assert "github.nope" in proc.stdout or "property \"nope\"" in proc.stdout, proc.stdout
    assert "shellcheck" in proc.stdout, proc.stdout


def test_the_test_workflow_runs_the_readmes_test_command():
    readme = (REPO / "README.md").read_text()
    assert "bash scripts/test.sh" in readme
    flow = workflow("test.yml")
    assert {"push", "pull_request", "workflow_call"} <= set(flow["on"])
    runs = [step.get("run", "") for step in flow["jobs"]["test"]["steps"]]
    assert "bash scripts/test.sh" in runs
    assert flow["permissions"] == {"contents": "read"}


def test_a_release_is_a_version_tag_whose_tests_pass_first():
    flow = workflow("release.yml")
    assert flow["on"] == {"push": {"tags": ["v*"]}}
    jobs = flow["jobs"]
    assert jobs["test"]["uses"] == "./.github/workflows/test.yml"
    for publishing in ("dist", "image"):
        assert {"test", "version"} <= set(jobs[publishing]["needs"])
    assert "pyproject.toml" in steps_text(jobs["version"])  # the tag must be pyproject's version
    assert flow["permissions"] == {"contents": "read"}  # each job asks for more only where it needs it


def test_wheel_and_sdist_go_to_pypi_by_trusted_publishing():
    jobs = workflow("release.yml")["jobs"]
    assert "--sdist --wheel" in steps_text(jobs["dist"])
    assert 'BUILD_COMMIT = \\\\\\"${GITHUB_SHA}\\\\\\"' in steps_text(jobs["dist"])  # the commit is stamped
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    assert "pypa/gh-action-pypi-publish" in uses(pypi)
    publish = next(s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish"))
    assert "password" not in publish.get("with", {}), "trusted publishing: no stored token"


def test_the_image_is_multi_arch_with_sbom_provenance_and_a_signature():
    image = workflow("release.yml")["jobs"]["image"]
    assert image["permissions"]["id-token"] == "write" and image["permissions"]["packages"] == "write"
    build = next(s for s in image["steps"] if s.get("uses", "").startswith("docker/build-push-action"))
    assert build["with"]["platforms"] == "linux/amd64,linux/arm64"
    assert build["with"]["push"] is True and build["with"]["sbom"] is True
    assert build["with"]["provenance"] == "mode=max"
    assert "docker/setup-qemu-action" in uses(image) and "sigstore/cosign-installer" in uses(image)
    assert "cosign sign --yes" in steps_text(image) and "steps.build.outputs.digest" in steps_text(image)
    assert "GIT_COMMIT=${{ github.sha }}" in build["with"]["build-args"]


def test_the_chart_is_pushed_as_an_oci_artifact_at_the_release_version():
    chart = workflow("release.yml")["jobs"]["chart"]
    text = steps_text(chart)
    assert f"helm lint {CHART}" in text
    assert f"helm package {CHART} --version \\\"$VERSION\\\" --app-version \\\"$VERSION\\\"" in text
    assert "helm push" in text and "oci://ghcr.io/" in text and "cosign sign --yes" in text
    setup = next(s for s in chart["steps"] if s.get("uses", "").startswith("azure/setup-helm"))
    assert re.fullmatch(r"v3\.\d+\.\d+", setup["with"]["version"])  # a pinned Helm, not "latest"
    assert setup["with"]["version"] == helm_version()  # the Helm the chart tests lint and template with
    assert (REPO / CHART / "Chart.yaml").is_file()
    assert "image" in chart["needs"]


def test_the_release_version_has_one_source():
    """pyproject's version is what the tag must equal, what ``gpuguard --version`` shows, and the chart's."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    from gpuguard.webhook import __version__

    assert __version__ == version
