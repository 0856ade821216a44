"""Speculative decoding at build time (`pipeline build --speculative METHOD`): which methods run on which path,
their limits, and what a build writes for them.

Methods and where they run (TensorRT-LLM 1.1.0; facts in ../shared/reference/speculative_decoding_and_lora.md):
- draft-target: a smaller model of the same tokenizer drafts K tokens. Engine path: the target is built with
  `--speculative_decoding_mode draft_tokens_external --max_draft_len K`, both engines with
  `--use_paged_context_fmha enable` (examples/draft_target_model/README.md, a 1.1-period copy; fact 1.4).
  PyTorch: `speculative_config: {decoding_type: DraftTarget, max_draft_len, speculative_model_dir}` (facts 2.2, 2.8).
- ngram: prompt lookup, no draft model; PyTorch only (NGramDecodingConfig.supports_backend == "pytorch", fact 2.7),
  which needs the overlap scheduler off ("ngram doesn't work with overlap_scheduler": the 1.1.0 example
  llm_speculative_decoding.py@48b7b5d8 lines 48-62). On the CPU the reference runtime does it for either layout.
- lookahead: engine path only: `--speculative_decoding_mode lookahead_decoding` with max_draft_len from (W, N, G):
  (0 if N == 1 else N - 2) + (W - 1 + G) * (N - 1) (examples/lookahead/README.md, a 1.1-period copy; fact 1.9).
- eagle3: an EAGLE-3 draft head; PyTorch only (EagleDecodingConfig, eagle3_one_model; facts 1.7, 2.4, 2.5). The
  engine path's `--speculative_decoding_mode eagle` is EAGLE-1/2 and cannot load an EAGLE-3 head: refused there.
Limits enforced for every method: no pipeline parallelism (facts 2.14, 6.8); a draft shares the target's vocabulary.

The build folder records the choice in manifest.json under "speculative" (and, for the reference runtime, in
config.json's build_config["speculative"]); a draft-target build holds the draft's own build folder at <build>/draft.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.core.errors import InvalidInputError, UnsupportedError

Method = Literal["draft-target", "ngram", "lookahead", "eagle3"]
METHODS: tuple[str, ...] = ("draft-target", "ngram", "lookahead", "eagle3")
DRAFT_SUBDIR = "draft"
DEFAULT_MAX_DRAFT_LEN = {"draft-target": 4, "ngram": 4, "eagle3": 3}  # eagle3: NVIDIA's 1.1.0 example (fact 2.5)
DEFAULT_NGRAM_SIZE = 2  # our default; NGramDecodingConfig's own default 0 is refused by its validation (fact 2.7)
DEFAULT_LOOKAHEAD = (4, 4, 4)  # our default (W, N, G); NVIDIA's README example is (7, 7, 7) -> max_draft_len 83
ENGINE_METHODS = ("draft-target", "lookahead")
PYTORCH_METHODS = ("draft-target", "ngram", "eagle3")
DECODING_TYPE = {"draft-target": "DraftTarget", "ngram": "NGram", "eagle3": "Eagle"}  # from_dict's map keys (fact 2.2)


class SpeculativeSpec(BaseModel):
    """What the user asked for (`--speculative`, `--draft`, `--max-draft-len`, `--max-matching-ngram-size`, `--lookahead`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: Method
    draft: str | None = None  # a SOURCE: a folder, a model under build/, or a Hub id (download)
    max_draft_len: int | None = None
    max_matching_ngram_size: int | None = None
    lookahead: tuple[int, int, int] | None = None


class Speculation(BaseModel):
    """The decided speculation: the manifest's "speculative" record (see the contract) plus where the draft is."""

    model_config = ConfigDict(frozen=True)

    method: Method
    max_draft_len: int = Field(ge=1)
    max_matching_ngram_size: int | None = None
    lookahead: tuple[int, int, int] | None = None
    draft_source: Path | None = None  # the draft's input folder (HF folder or TensorRT-LLM checkpoint)

    def label(self, draft_name: str | None = None, draft_path: Path | None = None) -> str:
        """The profile's `speculative` field: method, K and what else decides the build. The draft is named by its
        folder name and a hash of where it is: two drafts in folders of one name (`hf`) are different profiles."""
        extra = {"ngram": f"-n{self.max_matching_ngram_size}", "lookahead": "-" + "-".join(map(str, self.lookahead or ()))}
        where = f"-{hashlib.sha256(str(Path(draft_path).resolve()).encode()).hexdigest()[:8]}" if draft_path else ""
        return f"{self.method}-k{self.max_draft_len}{extra.get(self.method, '')}" + (f"-{draft_name}{where}" if draft_name else "")

    def record(self) -> dict[str, Any]:
        """manifest.json's "speculative" (and the reference folder's build_config["speculative"])."""
        out: dict[str, Any] = {"method": self.method, "max_draft_len": self.max_draft_len}
        if self.method == "ngram":
            out["max_matching_ngram_size"] = self.max_matching_ngram_size
        if self.method == "lookahead":
            out["lookahead"] = list(self.lookahead or ())
        if self.method == "draft-target":
            out["draft_dir"] = DRAFT_SUBDIR
        return out


def speculative_spec(method: str | None, draft: str | None = None, max_draft_len: int | None = None,
                     ngram: int | None = None, lookahead: str | None = None) -> SpeculativeSpec | None:
    """The CLI's options as a spec (None without --speculative; the others alone are refused)."""
    if method is None:
        given = [name for name, value in (("--draft", draft), ("--max-draft-len", max_draft_len),
                                          ("--max-matching-ngram-size", ngram), ("--lookahead", lookahead)) if value is not None]
        if given:
            raise InvalidInputError(f"{', '.join(given)} configure speculative decoding, which is off without --speculative.",
                                    hint=f"Add --speculative {'|'.join(METHODS)}.")
        return None
    if method not in METHODS:
        raise InvalidInputError(f"--speculative {method!r} is not a method.", hint=f"Use one of: {', '.join(METHODS)}.")
    return SpeculativeSpec(method=method, draft=draft, max_draft_len=max_draft_len, max_matching_ngram_size=ngram,
                           lookahead=parse_lookahead(lookahead))


def lookahead_draft_len(window: int, ngram: int, verification: int) -> int:
    """The engine's max_draft_len for lookahead (W, N, G): NVIDIA's formula (fact 1.9); (7, 7, 7) gives 83."""
    return (0 if ngram == 1 else ngram - 2) + (window - 1 + verification) * (ngram - 1)


def parse_lookahead(text: str | None) -> tuple[int, int, int] | None:
    """`--lookahead W,N,G` -> (W, N, G)."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise InvalidInputError(f"--lookahead {text!r} is not W,N,G (three whole numbers).",
                                hint="e.g. --lookahead 4,4,4 (window, n-gram size, verification set size).")
    w, n, g = (int(p) for p in parts)
    if w < 2 or n < 2 or g < 1:
        raise InvalidInputError(f"--lookahead {text}: (W, N, G) = ({w}, {n}, {g}) does not speculate.",
                                hint="The smallest meaningful value is 2,2,1 (NVIDIA's lookahead README); e.g. 4,4,4.")
    return w, n, g


CPU_METHODS = ("draft-target", "ngram")  # what the reference runtime speculates with (either layout)


def _refuse_path(method: str, backend: str, cpu: bool) -> None:
    engine = backend != "pytorch"
    if cpu and method not in CPU_METHODS:
        raise UnsupportedError(f"The reference runtime (--gpu cpu) speculates with {' and '.join(CPU_METHODS)}, not {method}.",
                               hint=f"Use --speculative draft-target --draft SOURCE or --speculative ngram on the CPU; "
                               f"{method} plans for a GPU (--gpu h100 --dry-run).")
    if cpu:
        return
    if method == "eagle3" and engine:
        raise UnsupportedError(
            "EAGLE-3 is a PyTorch-backend feature in TensorRT-LLM 1.1: trtllm-build's `eagle` mode is EAGLE-1/2 and "
            "cannot load an EAGLE-3 head.",
            hint="Build with --backend pytorch --speculative eagle3 --draft <EAGLE-3 head>, or keep the engine path with "
            "--speculative draft-target --draft <smaller model of the same family> (or lookahead, which needs no draft).")
    if method == "ngram" and engine:
        raise UnsupportedError("n-gram speculation is a PyTorch-backend feature (NGramDecodingConfig supports only "
                               "the pytorch backend in TensorRT-LLM 1.1).",
                               hint="Use --backend pytorch --speculative ngram, or on the engine path --speculative lookahead "
                               "(also draft-free) or draft-target.")
    if method == "lookahead" and not engine:
        raise UnsupportedError("Lookahead decoding is an engine-path feature (trtllm-build lookahead_decoding); the "
                               "PyTorch backend does not take it.",
                               hint="Use --speculative ngram (draft-free) with --backend pytorch, or build an engine.")


def decide(spec: SpeculativeSpec, *, backend: str, pp: int, cpu: bool = False) -> Speculation:
    """Check what was asked against 1.1's limits and fill the defaults (the draft is resolved separately)."""
    if pp > 1:
        raise UnsupportedError(f"Speculative decoding with pipeline parallelism (--pp {pp}) is not supported in "
                               "TensorRT-LLM 1.1.",
                               hint="Use --pp 1 and tensor parallelism (--tp N) instead.")
    _refuse_path(spec.method, backend, cpu)
    needs_draft = spec.method in ("draft-target", "eagle3")
    if needs_draft and not spec.draft:
        what = "an EAGLE-3 head (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B)" if spec.method == "eagle3" else \
            "a smaller model sharing the target's tokenizer"
        raise InvalidInputError(f"--speculative {spec.method} needs --draft: {what}.",
                                hint=f"e.g. --speculative {spec.method} --draft SOURCE; or a draft-free method "
                                f"({'ngram' if backend == 'pytorch' else 'lookahead'}).")
    if not needs_draft and spec.draft:
        raise InvalidInputError(f"--speculative {spec.method} uses no draft model; --draft {spec.draft} would be ignored.",
                                hint="Drop --draft, or use --speculative draft-target.")
    if spec.max_draft_len is not None and spec.max_draft_len < 1:
        raise InvalidInputError(f"--max-draft-len {spec.max_draft_len}: a draft of no tokens does not speculate.",
                                hint="Give --max-draft-len 1 or more (e.g. 4), or build without --speculative.")
    if spec.method != "ngram" and spec.max_matching_ngram_size is not None:
        raise InvalidInputError("--max-matching-ngram-size is the n-gram method's setting.",
                                hint="Drop it, or use --speculative ngram.")
    if spec.method != "lookahead" and spec.lookahead is not None:
        raise InvalidInputError("--lookahead W,N,G is the lookahead method's setting.",
                                hint="Drop it, or use --speculative lookahead.")
    if spec.method == "lookahead":
        wng = spec.lookahead or DEFAULT_LOOKAHEAD
        k = lookahead_draft_len(*wng)
        if spec.max_draft_len is not None and spec.max_draft_len != k:
            raise InvalidInputError(f"--max-draft-len {spec.max_draft_len} contradicts --lookahead {','.join(map(str, wng))}, "
                                    f"whose max_draft_len is {k} by NVIDIA's formula.",
                                    hint=f"Drop --max-draft-len (it is derived), or give --max-draft-len {k}.")
        return Speculation(method="lookahead", max_draft_len=k, lookahead=wng)
    ngram = None
    if spec.method == "ngram":
        ngram = DEFAULT_NGRAM_SIZE if spec.max_matching_ngram_size is None else spec.max_matching_ngram_size
        if ngram < 1:
            raise InvalidInputError(f"--max-matching-ngram-size {ngram}: n-gram lookup needs at least one token to match "
                                    "(TensorRT-LLM requires it > 0).",
                                    hint=f"Give --max-matching-ngram-size 1 or more (default {DEFAULT_NGRAM_SIZE}).")
    return Speculation(method=spec.method, max_draft_len=spec.max_draft_len or DEFAULT_MAX_DRAFT_LEN[spec.method],
                       max_matching_ngram_size=ngram)


def engine_flags(speculation: Speculation) -> list[tuple[str, str, str]]:
    """(flag, value, why) for the target's trtllm-build (names in shared/reference/trtllm_build_flags.tsv)."""
    if speculation.method == "draft-target":
        mode, why = "draft_tokens_external", "draft-target: the draft engine's tokens are verified by this engine"
    else:
        w, n, g = speculation.lookahead or DEFAULT_LOOKAHEAD
        mode, why = "lookahead_decoding", f"lookahead (W, N, G) = ({w}, {n}, {g})"
    return [("--speculative_decoding_mode", mode, why),
            ("--max_draft_len", str(speculation.max_draft_len),
             "draft tokens verified per step" if speculation.method == "draft-target"
             else "(0 if N == 1 else N - 2) + (W - 1 + G) * (N - 1), NVIDIA's lookahead formula")]


def torch_config(speculation: Speculation, draft_dir: Path | None) -> dict[str, Any]:
    """The LLM-API `speculative_config` (1.1's YAML keys: decoding_type is from_dict's map key, fact 2.2)."""
    config: dict[str, Any] = {"decoding_type": DECODING_TYPE[speculation.method], "max_draft_len": speculation.max_draft_len}
    if speculation.method == "ngram":
        config["max_matching_ngram_size"] = speculation.max_matching_ngram_size
    if draft_dir is not None:
        config["speculative_model_dir"] = str(draft_dir)
    if speculation.method == "eagle3":
        config["eagle3_one_model"] = True  # 1.1's default, stated (fact 2.4); the 1.1.0 example sets it too (fact 2.5)
    return config


def torch_extra_options(speculation: Speculation) -> tuple[dict[str, Any], dict[str, str]]:
    """Options a method needs beside speculative_config, with why."""
    if speculation.method == "ngram":
        return ({"disable_overlap_scheduler": True},
                {"disable_overlap_scheduler": "n-gram speculation does not work with the overlap scheduler (1.1.0 example)"})
    if speculation.method == "eagle3":
        return ({"disable_overlap_scheduler": True},
                {"disable_overlap_scheduler": "EAGLE-3 two-model x overlap scheduler is 'No' in 1.1.0's feature matrix; off "
                 "for either mode (fact 6.6)"})
    return {}, {}


def greedy_warning(speculation: Speculation, sampling_default: bool) -> str | None:
    """EAGLE-3 serving in 1.1 is greedy-only: temperature/top_p/top_k are no-ops (fact 2.6)."""
    if speculation.method == "eagle3" and sampling_default:
        return ("EAGLE-3 in TensorRT-LLM 1.1 serves greedy only: the sampling defaults (temperature/top_p/top_k) are "
                "ignored (no-ops), so requests that sample will get greedy text")
    return None


def vocabulary(folder: Path) -> tuple[int | None, str | None]:
    """(vocab_size from config.json, the tokenizer.json's vocabulary fingerprint) of an HF folder or checkpoint."""
    import hashlib

    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    size = config.get("vocab_size") or (config.get("pretrained_config") or {}).get("vocab_size")
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        tokenizer = folder / "tokenizer" / "tokenizer.json"
    fingerprint = None
    if tokenizer.is_file():
        vocab = (json.loads(tokenizer.read_text(encoding="utf-8")).get("model") or {}).get("vocab")
        fingerprint = hashlib.sha256(json.dumps(vocab, sort_keys=True).encode()).hexdigest()[:16] if vocab else None
    return size, fingerprint


def check_same_vocabulary(target: Path, draft: Path, method: str) -> None:
    """A draft proposes token ids the target verifies: both must share the vocabulary (EAGLE-3 heads have their
    own draft vocabulary mapped onto the target's, so only draft-target is checked)."""
    if method != "draft-target":
        return
    (t_size, t_vocab), (d_size, d_vocab) = vocabulary(target), vocabulary(draft)
    differs = (t_size and d_size and t_size != d_size) or (t_vocab and d_vocab and t_vocab != d_vocab)
    if differs:
        detail = f"vocab_size {d_size} vs the target's {t_size}" if t_size != d_size else "a different tokenizer vocabulary"
        raise InvalidInputError(f"The draft {draft} has {detail}: its token ids mean something else to the target.",
                                hint="Use a draft of the same model family and tokenizer (e.g. a smaller Llama 3 for a Llama 3 "
                                "target), or a draft-free method (ngram / lookahead).")


def recorded_speculation(folder: Path, config: dict | None = None) -> dict[str, Any] | None | bool:
    """A build folder's speculation: the manifest's "speculative" record, else config.json's build_config (the
    reference folder's "speculative"; trtllm-build's speculative_decoding_mode and max_draft_len). None when the
    folder says it was built without; False when it is no build folder this can read. `config`: its config.json,
    when the caller has read it already."""
    from pipeline.core.artifacts import read_manifest

    manifest = read_manifest(folder) or {}
    if isinstance(manifest.get("speculative"), dict):
        return dict(manifest["speculative"])
    if config is None:
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None if manifest.get("stage") == "build" else False
    build = (config.get("build_config") if isinstance(config, dict) else None) or {}
    if isinstance(build.get("speculative"), dict):
        return dict(build["speculative"])
    mode = build.get("speculative_decoding_mode")
    if mode not in (None, "", 1, "SpeculativeDecodingMode.NONE"):  # 1: the NONE flag of trtllm's IntFlag
        return {"method": str(mode), "max_draft_len": build.get("max_draft_len")}
    return None
