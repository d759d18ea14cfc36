"""Translate with the exported encoder/decoder on ONNX Runtime: greedy or beam search.

Each decoder step feeds only the newest token and the key/value cache; rows that have
finished leave the batch, so a batch costs what its live sentences need. Inputs longer than
the model's `max_len` tokens are truncated to it (`Translator.truncated` counts them).
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.translator.tokenizer import BOS, EOS, PAD, load_tokenizer
from quantize.cache import cache_dir
from quantize.runtime import runtime_session

LENGTH_PENALTY = 0.6  # GNMT's alpha: beam scores are log p / ((5 + len) / 6) ** alpha


def default_folder() -> Path:
    """Where `python -m models.translator build` puts the reference translator."""
    return cache_dir("translator", "small")


@dataclass(frozen=True)
class TranslatorFiles:
    encoder: Path  # or an in-memory onnx.ModelProto (or, for OpenVINO, an openvino.Model)
    decoder: Path
    tokenizer: Path

    @classmethod
    def in_folder(cls, folder: Path, suffix: str = "") -> "TranslatorFiles":
        return cls(
            folder / f"encoder{suffix}.onnx", folder / f"decoder{suffix}.onnx", folder / "spm.model"
        )


class Translator:
    def __init__(
        self,
        files: TranslatorFiles,
        threads: int = 0,
        beam: int = 1,
        exact_kernels: bool | None = None,
        runtime: str = "onnxruntime",
    ):
        """`exact_kernels`: as quantize.runtime.session takes it (None: what the model's target
        needs on this CPU); `runtime`: one of quantize.runtime.RUNTIMES."""
        self.encoder, self.decoder = (
            runtime_session(files.encoder, threads, runtime, exact_kernels),
            runtime_session(files.decoder, threads, runtime, exact_kernels),
        )
        self.tokenizer = load_tokenizer(files.tokenizer)
        self.beam = beam
        self.past_names = [i.name for i in self.decoder.get_inputs() if i.name.startswith("past_")]
        self.context_names = [
            o.name for o in self.encoder.get_outputs()
        ]  # cross keys/values, source bias
        _, self.heads, _, self.depth = {i.name: i.shape for i in self.decoder.get_inputs()}[
            "past_key_0"
        ]
        self.max_len = int(self.decoder.get_modelmeta().custom_metadata_map["max_len"])
        self.observe = lambda graph, feed: None  # sees every feed (used to record calibration data)

    def token_lengths(self, texts: list[str]) -> list[int]:
        return [min(len(ids) + 1, self.max_len) for ids in self.tokenizer.encode(texts)]

    def truncated(self, texts: list[str]) -> int:
        """How many of `texts` are longer than the model takes and will be cut to `max_len` tokens."""
        return sum(len(ids) >= self.max_len for ids in self.tokenizer.encode(texts))

    def __call__(self, texts: list[str]) -> list[str]:
        """Translate a batch; empty strings translate to empty strings."""
        out = [""] * len(texts)
        live = [i for i, t in enumerate(texts) if t.strip()]
        if not live:
            return out
        ids = self.tokenizer.encode([texts[i] for i in live])
        source = _padded([x[: self.max_len - 1] + [EOS] for x in ids])
        context = dict(zip(self.context_names, self._run("encoder", {"source": source})))
        limits = np.minimum((source != PAD).sum(1) * 3 // 2 + 10, self.max_len - 1)
        search = self._greedy if self.beam == 1 else self._beam
        for i, tokens in zip(live, search(context, limits)):
            out[i] = self.tokenizer.decode(tokens)
        return out

    def _run(self, graph: str, feed: dict) -> list[np.ndarray]:
        self.observe(graph, feed)
        return getattr(self, graph).run(None, feed)

    def _step(self, tokens, position, past: dict, context: dict) -> tuple[np.ndarray, dict]:
        """Next-token logits and the grown caches (named as the next step's inputs)."""
        feed = {
            "token": tokens[:, None].astype(np.int32),
            "position": np.full((len(tokens), 1), position, np.int32),
            **past,
            **context,
        }
        logits, *present = self._run("decoder", feed)
        return logits, dict(zip(self.past_names, present))

    def _empty_cache(self, rows: int) -> dict[str, np.ndarray]:
        return {
            name: np.zeros((rows, self.heads, 0, self.depth), np.float32)
            for name in self.past_names
        }

    def _greedy(self, context: dict, limits) -> list[list[int]]:
        """Finished rows are dropped from the batch once they are a quarter of it (dropping
        copies every cache, so not at every step)."""
        rows = np.arange(len(limits))  # original row of each batch row
        alive = np.ones(len(rows), bool)
        outputs: list[list[int]] = [[] for _ in rows]
        tokens, past = np.full(len(rows), BOS), self._empty_cache(len(rows))
        for position in range(int(limits.max())):
            logits, past = self._step(tokens, position, past, context)
            tokens = logits.argmax(-1)
            for r in np.flatnonzero(alive & (tokens != EOS)):
                outputs[rows[r]].append(int(tokens[r]))
            alive &= (tokens != EOS) & (limits[rows] > position + 1)
            if not alive.any():
                break
            if (~alive).sum() * 4 >= len(alive):
                rows, tokens, past, context = (
                    rows[alive],
                    tokens[alive],
                    _take(past, alive),
                    _take(context, alive),
                )
                alive = alive[alive]
        return outputs

    def _beam(self, context: dict, limits) -> list[list[int]]:
        """Beam search, one beam of `self.beam` hypotheses per sentence, run as one batch."""
        k, n = self.beam, len(limits)
        context = {name: np.repeat(v, k, 0) for name, v in context.items()}
        scores = np.tile(np.r_[0.0, np.full(k - 1, -np.inf)], n)  # only one live start per sentence
        hypotheses = [[] for _ in range(n * k)]
        best: list[tuple[float, list[int]]] = [(-np.inf, [])] * n
        tokens, past = np.full(n * k, BOS), self._empty_cache(n * k)
        for position in range(int(limits.max())):
            logits, past = self._step(tokens, position, past, context)
            logp = logits - logits.max(-1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
            total = (scores[:, None] + logp).reshape(n, -1)  # (sentence, beam x vocab)
            top = np.argpartition(-total, 2 * k, axis=1)[:, : 2 * k]
            new_rows, new_scores, new_tokens = [], [], []
            for s in range(n):
                order = top[s][np.argsort(-total[s, top[s]])]
                kept = 0
                for flat in order:
                    beam, token = divmod(int(flat), logp.shape[1])
                    row, score = s * k + beam, total[s, flat]
                    if not np.isfinite(score):
                        break
                    if token == EOS or position + 1 >= limits[s]:
                        finished = hypotheses[row] + ([] if token == EOS else [token])
                        normalised = score / ((5 + len(finished) + 1) / 6) ** LENGTH_PENALTY
                        if normalised > best[s][0]:
                            best[s] = (normalised, finished)
                        continue
                    new_rows.append(row)
                    new_scores.append(score)
                    new_tokens.append(token)
                    kept += 1
                    if kept == k:
                        break
                for _ in range(k - kept):  # pad with dead hypotheses to keep k rows per sentence
                    new_rows.append(s * k)
                    new_scores.append(-np.inf)
                    new_tokens.append(PAD)
            if all(np.isinf(new_scores)):
                break
            rows = np.array(new_rows)
            hypotheses = [hypotheses[r] + [t] for r, t in zip(rows, new_tokens)]
            scores, tokens, past = np.array(new_scores), np.array(new_tokens), _take(past, rows)
        return [tokens for _, tokens in best]


def _take(arrays: dict[str, np.ndarray], rows) -> dict[str, np.ndarray]:
    return {name: a[rows] for name, a in arrays.items()}


def _padded(rows: list[list[int]]) -> np.ndarray:
    out = np.full((len(rows), max(len(r) for r in rows)), PAD, np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
