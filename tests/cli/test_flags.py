"""The CLI's flags come from the settings classes (mnn_engine.options, mnn_engine.cli.flags):
every field of ServerSettings, PoolSettings and LoadOptions is a flag of ``serve``, every
``serve`` flag is a field or one of the few that choose how to serve, and parsing nothing
gives the classes' own defaults."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnn_engine.cli.flags import flag_name
from mnn_engine.cli.main import build_parser
from mnn_engine.engine.settings import LoadOptions, PoolSettings
from mnn_engine.errors import MnnEngineError
from mnn_engine.options import settings
from mnn_engine.server.settings import ServerSettings

#: serve's flags that are no setting: which model and how (the serving mode, where a key or a model comes from)
SERVE_ONLY = {"--help", "--no-switch", "--all-interfaces", "--api-key-file", "--yes", "--source"}
#: older spellings, kept as aliases
OLD = {"--kv-quant": "quant_qkv", "--mmap": "use_mmap", "--cors-origin": "cors_origins",
       "--allow-pull-url": "allow_pull_urls", "--max-body-mb": "max_body_bytes"}
CLASSES = (ServerSettings, PoolSettings, LoadOptions)


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every option string of the parser, hidden ones included, and the field it sets."""
    return {option: action.dest for action in parser._actions for option in action.option_strings
            if not option.startswith("--no-") or option == "--no-switch"}


def test_every_settings_field_is_a_serve_flag_and_every_serve_flag_a_field():
    flags = _flags(_subparser("serve"))
    fields = {s.name for cls in CLASSES for s in settings(cls)}
    assert fields == {f.name for cls in CLASSES for f in dataclasses.fields(cls)}  # every field is declared
    for name in fields:
        assert flags.get(flag_name(name)) == name, name
    for flag, dest in flags.items():
        if flag in SERVE_ONLY or flag == "-h":
            continue
        assert dest in fields, flag
        assert flag == flag_name(dest) or OLD.get(flag) == dest, (flag, dest)


@pytest.mark.parametrize("command", ["generate", "chat", "bench"])
def test_the_load_commands_take_every_load_option(command):
    flags = _flags(_subparser(command))
    for setting in settings(LoadOptions):
        assert flags.get(flag_name(setting.name)) == setting.name, (command, setting.name)


def test_serve_with_no_flag_has_the_settings_defaults():
    from mnn_engine.cli.flags import given as given_flags

    args = build_parser().parse_args(["serve"])
    assert ServerSettings(**given_flags(ServerSettings, args)) == ServerSettings()
    assert {s.name: getattr(args, s.name) for s in settings(PoolSettings)} == dataclasses.asdict(PoolSettings())
    assert given_flags(LoadOptions, args) == {}  # load options not typed come from the model's preset


def test_the_old_spellings_still_work():
    args = build_parser().parse_args(["serve", "--kv-quant", "1", "--no-mmap", "--cors-origin", "http://a",
                                      "--cors-origin", "http://b", "--allow-pull-url", "http://x/*",
                                      "--max-body-mb", "0.5"])
    assert (args.quant_qkv, args.use_mmap, args.max_body_bytes) == (1, False, 2**19)
    assert (args.cors_origins, args.allow_pull_urls) == (["http://a", "http://b"], ["http://x/*"])


@given(st.integers(-3, 12))
def test_a_flag_out_of_range_is_refused_as_the_api_refuses_it(threads):
    args = build_parser().parse_args(["generate", "m", "hi", "--threads", str(threads)])
    from mnn_engine.cli.common import load_overrides

    try:
        LoadOptions().updated(load_overrides(args))
    except MnnEngineError as exc:
        assert not 1 <= threads <= 8
        assert exc.param == "threads" and exc.message == f"threads: must be an integer from 1 to 8 (got {threads})"
    else:
        assert 1 <= threads <= 8


def test_help_states_each_default_once_from_the_field():
    text = " ".join(_subparser("serve").format_help().split())
    for cls in CLASSES:  # one "(default: ...)" per flag, none written by hand besides
        for setting in settings(cls):
            assert text.count(f"{setting.spec.help} (default: {setting.default_text}") == 1, setting.name
    assert "before it gets 429 (default: 60)" in text  # --queue-timeout, from DEFAULT_QUEUE_TIMEOUT
    assert "(default: 5m, as Ollama's)" in text  # --keep-alive
    assert "(default: low, or the model's tuned preset)" in text  # --precision: LoadOptions' default
