"""The config is parsed with libyaml where PyYAML has it: the same data and the same line numbers as the pure parser.

Line numbers matter: every config error names ``file:line`` from the composed nodes' marks.
"""

from __future__ import annotations

import yaml

from gpuguard.webhook.config.compile import DEFAULT_CONFIG_PATH
from gpuguard.webhook.config.yaml_lines import SAFE_LOADER, compose_and_construct


def _marks(node: yaml.Node) -> list[tuple[str, int, int]]:
    out = [(node.tag, node.start_mark.line, node.start_mark.column)]
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out += _marks(key) + _marks(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            out += _marks(item)
    return out


def test_libyaml_is_used_where_pyyaml_has_it():
    assert SAFE_LOADER is (yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader)


def test_the_shipped_config_parses_to_the_same_data_and_marks_with_either_parser():
    text = DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")
    node, data = compose_and_construct(text, "default-config.yaml")
    pure = yaml.SafeLoader(text)
    try:
        pure_node = pure.get_single_node()
        assert data == pure.construct_document(pure_node)
    finally:
        pure.dispose()
    assert node is not None and _marks(node) == _marks(pure_node)
