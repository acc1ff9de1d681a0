"""Error and note lines name the command as it was typed: ``kubectl gpuguard: error: …`` when kubectl runs the
plugin (as docs/cli.md shows it), ``gpuguard: error: …`` otherwise."""

from __future__ import annotations

import pytest

from gpuguard.webhook.cli.common import set_program
from gpuguard.webhook.main import PLUGIN_PROG, PROG, main


@pytest.fixture(autouse=True)
def _plain_name_after():
    yield
    set_program(PROG)


@pytest.mark.parametrize("prog", [PROG, PLUGIN_PROG])
def test_an_error_line_names_the_command_as_typed(prog, tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    code = main(["evaluate", str(missing)], prog=prog)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"{prog}: error: "), err
    assert str(missing) in err


def test_a_config_error_of_another_verb_names_the_plugin_too(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
                      "webhookFilters:\n  matchConditions: false\n")
    main(["webhook-config", "--service", "gpuguard/gpuguard", "--config", str(config)], prog=PLUGIN_PROG)
    err = capsys.readouterr().err
    assert err and all(line.startswith("kubectl gpuguard: ") for line in err.splitlines()), err
    assert "webhookFilters: unknown key" in err


def test_the_plain_command_is_named_again_after_the_plugin(tmp_path, capsys):
    main(["evaluate", str(tmp_path / "a.yaml")], prog=PLUGIN_PROG)
    main(["evaluate", str(tmp_path / "b.yaml")], prog=PROG)
    assert capsys.readouterr().err.splitlines()[-1].startswith("gpuguard: error: ")
