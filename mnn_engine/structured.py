"""Structured output: a grammar that every generated token must follow.

The grammar engine is llguidance (the optional extra ``mnn-engine[structured]``):
it computes, before each token, the set of tokens that keep the output inside
the grammar; the native loop reports the token it chose and gets the next
mask in one call (``Constraint.step``) and applies the mask to the logits
before our sampler. End tokens are allowed only where the grammar may end.

Grammars come from OpenAI's ``response_format`` (``json_object``,
``json_schema``), from enforced tool calls (``tool_choice`` "required" or a
named function), or are given as they are (``grammar=``: Lark, or GBNF, or a
``{"json_schema": ...}`` / ``{"lark": ...}`` / ``{"regex": ...}`` mapping).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import MnnEngineError, invalid

if TYPE_CHECKING:
    from .llm import Llm

INSTALL_HINT = "structured output needs the grammar engine: pip install 'mnn-engine[structured]' (llguidance)"
#: JSON that any object satisfies (json_object mode)
ANY_OBJECT = {"type": "object"}
#: the tool-call format of Qwen/Hermes-style chat templates, which our parser reads back
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise MnnEngineError("structured_output_unavailable", INSTALL_HINT, param="response_format") from exc
    return llguidance


class _Vocabulary:
    """What llguidance needs to know of a model's tokenizer."""

    def __init__(self, llm: Llm) -> None:
        self.tokens, stops = llm.vocabulary()
        self.eos_token_id = stops[0] if stops else len(self.tokens) - 1
        self.stop_ids = stops
        self.bos_token_id = None
        self.special_token_ids = stops
        self._llm = llm

    def __call__(self, text: bytes | str) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._llm.tokenize(text)


_lock = threading.Lock()


def tokenizer_for(llm: Llm) -> Any:
    """llguidance's tokenizer for a loaded model, built once per load (under a
    second for a 150k vocabulary) and kept in ``llm.load_cache``."""
    ll = _llguidance()
    with _lock:
        tokenizer = llm.load_cache.get("grammar_tokenizer")
        if tokenizer is None:
            vocab = _Vocabulary(llm)
            tokenizer = ll.LLTokenizer(ll.TokenizerWrapper(vocab), n_vocab=len(vocab.tokens),
                                       eos_token=vocab.stop_ids or None)
            llm.load_cache["grammar_tokenizer"] = tokenizer
        return tokenizer


class Constraint:
    """One generation's grammar state, driven by the native loop."""

    def __init__(self, llm: Llm, grammar: str, what: str) -> None:
        ll = _llguidance()
        # compiles the grammar; an unsupported one leaves the matcher in its error state (it never raises)
        self.matcher = ll.LLMatcher(tokenizer_for(llm), grammar)
        if self.matcher.is_error():
            raise invalid(what, f"not supported: {self.matcher.get_error()}")
        self.what = what

    def step(self, token: int, address: int, nbytes: int) -> None:
        """Take the token the loop chose (none before the first, ``token`` < 0)
        and write the mask of the tokens allowed next to ``address``."""
        if token >= 0 and not self.matcher.consume_token(token):
            raise MnnEngineError("generation_failed", f"{self.what}: the grammar refused token {token}: "
                                 f"{self.matcher.get_error()}")
        self.matcher.unsafe_compute_mask_ptr(address, nbytes)
        if self.matcher.is_error():
            raise MnnEngineError("generation_failed", f"{self.what}: {self.matcher.get_error()}")


# ---------------------------------------------------------------- grammars
def _control_characters(node: Any) -> bool:
    """Whether an enum or const string of the schema holds a control character."""
    if isinstance(node, Mapping):
        values = list(node.get("enum") or []) if isinstance(node.get("enum"), list) else []
        if "const" in node:
            values.append(node["const"])
        if any(isinstance(v, str) and any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in v) for v in values):
            return True
        return any(_control_characters(v) for v in node.values())
    if isinstance(node, list):
        return any(_control_characters(v) for v in node)
    return False


def schema_grammar(schema: Mapping[str, Any], what: str = "response_format") -> str:
    ll = _llguidance()
    if not isinstance(schema, Mapping):
        raise invalid(what, "the JSON schema must be an object")
    if _control_characters(schema):
        # llguidance 1.x masks and consumes such literals inconsistently: refused rather than failing mid-answer
        raise invalid(what, "not supported: enum or const strings with control characters (U+0000-U+001F, "
                            "U+007F-U+009F)")
    try:
        return ll.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": False})
    except (ValueError, TypeError) as exc:
        raise invalid(what, f"not supported: {exc}") from exc


def response_format_grammar(response_format: Any) -> str | None:
    """The grammar for OpenAI's ``response_format`` (None for text)."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping) or not isinstance(response_format.get("type"), str):
        raise invalid("response_format", "must be an object with a type")
    kind = response_format["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return schema_grammar(ANY_OBJECT)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema", {}), Mapping):
            raise invalid("response_format", "json_schema must be an object with a schema")
        return schema_grammar(spec.get("schema") or ANY_OBJECT)
    raise invalid("response_format", f"type must be text, json_object or json_schema (got {kind!r})")


def _gbnf(text: str) -> str:
    from llguidance.gbnf_to_lark import gbnf_to_lark

    return gbnf_to_lark(text)


def grammar_from(grammar: Any) -> str:
    """``grammar=``: Lark text (or GBNF, recognised by its ``::=``), or a
    mapping with one of ``json_schema``, ``lark``, ``gbnf``, ``regex``."""
    ll = _llguidance()
    if isinstance(grammar, str):
        return ll.LLMatcher.grammar_from_lark(_gbnf(grammar) if "::=" in grammar else grammar)
    if isinstance(grammar, Mapping) and len(grammar) == 1:
        (kind, value), = grammar.items()
        if kind == "json_schema":
            return schema_grammar(value, "grammar")
        if kind == "lark" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_lark(value)
        if kind == "gbnf" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_lark(_gbnf(value))
        if kind == "regex" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_regex(value)
    raise invalid("grammar", "must be Lark or GBNF text, or {json_schema|lark|gbnf|regex: ...}")


def tool_call_schema(tools: Sequence[Mapping[str, Any]], name: str | None) -> dict[str, Any]:
    """The JSON of one call of an offered tool (of ``name`` when given)."""
    options = []
    for tool in tools:
        function = tool.get("function", {}) if isinstance(tool, Mapping) else {}
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object"}
        options.append({"type": "object", "properties": {"name": {"const": function.get("name")},
                                                         "arguments": parameters},
                        "required": ["name", "arguments"], "additionalProperties": False})
    if not options:
        raise invalid("tool_choice", f"no offered tool is called {name!r}" if name else "no tools are offered")
    return options[0] if len(options) == 1 else {"anyOf": options}


def tool_call_grammar(tools: Sequence[Mapping[str, Any]], name: str | None) -> str:
    """Exactly one tool call in the chat template's format."""
    ll = _llguidance()
    # no free whitespace: a model with nothing to say would fill max_tokens with it
    schema = json.dumps({**tool_call_schema(tools, name), "x-guidance": {"whitespace_flexible": False}})
    lark = (f"start: {json.dumps(TOOL_CALL_OPEN)} call {json.dumps(TOOL_CALL_CLOSE)}\n"
            f"call: %json {schema}\n")
    try:
        return ll.LLMatcher.grammar_from_lark(lark)
    except (ValueError, TypeError) as exc:
        raise invalid("tools", f"not supported: {exc}") from exc


def grammar_for(response_format: Any, grammar: Any, tools: Any, tool_choice: Any) -> tuple[str, str] | None:
    """The one grammar a generation follows, and the option it came from (None: free text)."""
    chosen: list[tuple[str, str]] = []
    if grammar is not None:
        chosen.append((grammar_from(grammar), "grammar"))
    text = response_format_grammar(response_format)
    if text is not None:
        chosen.append((text, "response_format"))
    name = tool_choice_name(tool_choice)
    if name is not False:
        if not tools:
            raise invalid("tool_choice", "needs tools")
        chosen.append((tool_call_grammar(tools, name), "tool_choice"))
    if len(chosen) > 1:
        raise invalid(chosen[1][1], f"cannot be combined with {chosen[0][1]}")
    return chosen[0] if chosen else None


def tool_choice_name(tool_choice: Any) -> str | bool | None:
    """False: not enforced ("auto", "none", None); None: any offered tool
    ("required"); else the function's name."""
    if tool_choice is None or tool_choice in ("auto", "none"):
        return False
    if tool_choice == "required":
        return None
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    raise invalid("tool_choice", 'must be "auto", "none", "required" or {"type": "function", "function": '
                                 '{"name": ...}}')
