"""tools/models/export_settings.py: the export's quantisation defaults apply only when the caller names none."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "models"))

import export_settings  # noqa: E402

OTHER_ARGS = st.lists(st.sampled_from(["--path", "/m/hf", "--export", "mnn", "--dst_path", "/out", "--hqq"]))


@given(OTHER_ARGS)
def test_no_quantisation_flag_gets_block_32_and_an_8_bit_head(argv):
    out = export_settings.with_quant_defaults(argv)
    assert out[: len(argv)] == argv
    assert out[len(argv):] == ["--quant_bit", "4", "--quant_block", "32", "--lm_quant_bit", "8"]


@given(OTHER_ARGS, st.sampled_from(export_settings.QUANT_FLAGS), st.booleans(), st.data())
def test_any_named_quantisation_flag_leaves_the_arguments_as_given(argv, flag, inline, data):
    value = "64"
    named = [f"{flag}={value}"] if inline else [flag, value]
    at = data.draw(st.integers(0, len(argv)))
    given_argv = [*argv[:at], *named, *argv[at:]]
    assert export_settings.with_quant_defaults(given_argv) == given_argv


def test_the_test_models_and_the_quality_variants_name_their_settings():
    # both are cached by name, not by arguments: a default moving under them would change a rebuilt model
    build = (REPO / "tools" / "models" / "build_test_models.py").read_text()
    assert 'INT4 = ["--quant_bit", "4", "--quant_block", "64"]' in build
    sys.path.insert(0, str(REPO / "tools" / "bench"))
    import quality

    for args in quality.VARIANTS.values():
        assert export_settings.with_quant_defaults(args) == args
