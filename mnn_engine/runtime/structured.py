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

import ctypes
import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..checks import invalid
from ..errors import MnnEngineError
from .grammar import compile_matcher, llguidance_module, make_tokenizer
from .grammar_sandbox import CancelFlag, GrammarSandbox


class GrammarModel(Protocol):
    """What structured output needs of a loaded model (``Llm`` has it)."""

    load_cache: dict[str, Any]

    def vocabulary(self) -> tuple[list[bytes], list[int]]: ...

    def tokenize(self, text: str) -> list[int]: ...

#: JSON that any object satisfies (json_object mode)
ANY_OBJECT = {"type": "object"}
#: the tool-call format of Qwen/Hermes-style chat templates, which our parser reads back
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"
#: What a JSON schema may hold. OpenAI's published structured-output limits
#: where it has them (5,000 object properties); the others measured with
#: tools/bench/grammar_limits.py on this machine: at these sizes a compile
#: takes at most ~5 s, beyond them llguidance takes minutes or refuses.
SCHEMA_LIMITS = {
    "bytes": 512 * 1024,  # the schema as JSON
    "depth": 32,  # levels of JSON nesting
    "properties": 5_000,  # object properties, all objects together
    "required": 5_000,  # names in required lists, together
    "enum": 10_000,  # enum items and const values, together
    "alternatives": 1_000,  # members of anyOf/oneOf/allOf lists, together
}
#: the largest grammar text (Lark, GBNF, regex) taken as it is
MAX_GRAMMAR_BYTES = 512 * 1024


_lock = threading.Lock()
_sandbox = GrammarSandbox()


@dataclass(frozen=True)
class ModelGrammarTokenizer:
    """llguidance's tokenizer of one loaded model, and the vocabulary it was built from."""

    tokenizer: Any
    tokens: list[bytes]
    stops: list[int]
    key: str  # a hash of the vocabulary: names it to the sandbox's child


def tokenizer_for(llm: GrammarModel) -> ModelGrammarTokenizer:
    """llguidance's tokenizer for a loaded model, built once per load (under a
    second for a 150k vocabulary) and kept in ``llm.load_cache``."""
    ll = llguidance_module()
    with _lock:
        built = llm.load_cache.get("grammar_tokenizer")
        if built is None:
            def tokenize(text: bytes | str) -> list[int]:
                return llm.tokenize(text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text)

            tokens, stops = llm.vocabulary()
            digest = hashlib.sha256(repr(stops).encode())
            for token in tokens:
                digest.update(len(token).to_bytes(4, "little") + token)
            built = ModelGrammarTokenizer(make_tokenizer(ll, tokens, stops, tokenize), tokens, stops,
                                          digest.hexdigest())
            llm.load_cache["grammar_tokenizer"] = built
        return built


def _sandboxed(model: ModelGrammarTokenizer, grammar: str, what: str, cancelled: CancelFlag | None = None) -> None:
    refused = _sandbox.check(grammar, model.key, lambda: (model.tokens, model.stops), cancelled)
    if refused is not None:
        raise invalid(what, refused if refused.startswith("not supported") else f"not supported: {refused}")


def pending_check(llm: GrammarModel, options: Mapping[str, Any]) -> Callable[[CancelFlag], None] | None:
    """The sandbox check that a generation with these options (``response_format``,
    ``grammar``, ``tools``, ``tool_choice``) still needs, or None: no grammar, or
    its verdict is known. A caller that holds a turn others wait for (the server's
    generation queue) runs it outside that turn: a schema that takes the compiler
    a minute then costs its own request a minute, not everyone's. The check
    raises the refusal, or ``generation_cancelled`` once its event is set."""
    chosen = grammar_for(options.get("response_format"), options.get("grammar"), options.get("tools"),
                         options.get("tool_choice"))
    if chosen is None:
        return None
    model = tokenizer_for(llm)
    if _sandbox.known(chosen[0], model.key):
        return None
    return lambda cancelled: _sandboxed(model, chosen[0], chosen[1], cancelled)


class Constraint:
    """One generation's grammar state, driven by the native loop."""

    def __init__(self, llm: GrammarModel, grammar: str, what: str) -> None:
        model = tokenizer_for(llm)
        # first in the sandbox's child: a grammar that crashes llguidance takes only the child down (the
        # server has it checked before the generation's turn, ``pending_check``: then the verdict is known)
        _sandboxed(model, grammar, what)
        self.matcher, self._first_mask = compile_matcher(model.tokenizer, grammar, what)
        self.what = what

    def step(self, token: int, address: int, nbytes: int) -> None:
        """Take the token the loop chose (none before the first, ``token`` < 0)
        and write the mask of the tokens allowed next to ``address``."""
        if token < 0 and len(self._first_mask) == nbytes:
            ctypes.memmove(address, self._first_mask, nbytes)  # computed when the grammar was compiled
            return
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


def check_schema_limits(schema: Any, what: str) -> str:
    """Refuse a schema beyond ``SCHEMA_LIMITS`` (before llguidance sees it);
    returns it as JSON text."""
    counts = dict.fromkeys(("properties", "required", "enum", "alternatives"), 0)
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:  # iterative: a deep schema given through the Python API must not raise RecursionError
        node, depth = stack.pop()
        if depth > SCHEMA_LIMITS["depth"]:
            raise invalid(what, f"the schema is nested more than {SCHEMA_LIMITS['depth']} levels deep")
        if isinstance(node, Mapping):
            if isinstance(node.get("properties"), Mapping):
                counts["properties"] += len(node["properties"])
            if isinstance(node.get("required"), list):
                counts["required"] += len(node["required"])
            if isinstance(node.get("enum"), list):
                counts["enum"] += len(node["enum"])
            counts["enum"] += "const" in node
            for key in ("anyOf", "oneOf", "allOf"):
                if isinstance(node.get(key), list):
                    counts["alternatives"] += len(node[key])
            stack.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            stack.extend((value, depth + 1) for value in node)
    for name, count in counts.items():
        if count > SCHEMA_LIMITS[name]:
            label = {"enum": "enum items and consts", "alternatives": "anyOf/oneOf/allOf members"}.get(name, name)
            raise invalid(what, f"the schema has {count} {label}; at most {SCHEMA_LIMITS[name]} are supported")
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise invalid(what, f"the schema is not JSON: {exc}") from exc
    if len(text) > SCHEMA_LIMITS["bytes"]:
        raise invalid(what, f"the schema is {len(text)} bytes as JSON; at most {SCHEMA_LIMITS['bytes']} are supported")
    return text


def _check_grammar_text(text: str, what: str) -> str:
    if len(text) > MAX_GRAMMAR_BYTES:
        raise invalid(what, f"the grammar is {len(text)} characters; at most {MAX_GRAMMAR_BYTES} are supported")
    return text


def schema_grammar(schema: Mapping[str, Any], what: str = "response_format") -> str:
    ll = llguidance_module()
    if not isinstance(schema, Mapping):
        raise invalid(what, "the JSON schema must be an object")
    text = check_schema_limits(schema, what)
    if _control_characters(schema):
        # llguidance 1.x masks and consumes such literals inconsistently: refused rather than failing mid-answer
        raise invalid(what, "not supported: enum or const strings with control characters (U+0000-U+001F, "
                            "U+007F-U+009F)")
    try:
        return ll.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": False})
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
    ll = llguidance_module()
    if isinstance(grammar, str):
        grammar = _check_grammar_text(grammar, "grammar")
        return ll.LLMatcher.grammar_from_lark(_gbnf(grammar) if "::=" in grammar else grammar)
    if isinstance(grammar, Mapping) and len(grammar) == 1:
        (kind, value), = grammar.items()
        if kind == "json_schema":
            return schema_grammar(value, "grammar")
        if kind == "lark" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_lark(_check_grammar_text(value, "grammar"))
        if kind == "gbnf" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_lark(_gbnf(_check_grammar_text(value, "grammar")))
        if kind == "regex" and isinstance(value, str):
            return ll.LLMatcher.grammar_from_regex(_check_grammar_text(value, "grammar"))
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
    ll = llguidance_module()
    call = tool_call_schema(tools, name)
    check_schema_limits(call, "tools")
    # no free whitespace: a model with nothing to say would fill max_tokens with it
    schema = json.dumps({**call, "x-guidance": {"whitespace_flexible": False}})
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
        chosen.append((tool_call_grammar(tools, name), "tools"))
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
