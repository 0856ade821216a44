"""Calibration text for quantization: the set shipped with the package, or the user's own.

Accepted sources:
- nothing: `pipeline/data/calibration/mixed-v1.jsonl`, a few hundred short texts we wrote (chat,
  instructions, code, maths, prose, several languages), stored interleaved so any prefix is varied;
- a `.txt` file: one sample per non-empty line;
- a `.jsonl` file: one JSON object per line with a `text` field;
- a folder (a local Hugging Face dataset snapshot): its `.jsonl` / `.txt` / `.json` data files,
  the `train` split's files when the names say so. Arrow (`save_to_disk`) and Parquet folders are
  refused with a hint: reading them needs pyarrow/datasets, which the pipeline does not install.

The first `size` samples are used, in file order. The checkpoint manifest records their sha256
(`CalibrationSet.sha256`), so a different calibration set makes a different checkpoint.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from pipeline.core.artifacts import sha256_json
from pipeline.core.errors import InvalidInputError

SHIPPED_NAME = "mixed-v1.jsonl"
DEFAULT_CALIB_SIZE = 64
_TEXT_SUFFIXES = (".jsonl", ".txt", ".json")
_REFUSED_SUFFIXES = (".arrow", ".parquet")


class CalibrationSet(BaseModel):
    """The texts calibration will run over, and where they came from."""

    model_config = ConfigDict(frozen=True)

    source: str  # "shipped:mixed-v1.jsonl" or the resolved user path
    texts: tuple[str, ...]
    available: int  # samples in the source before taking `size`
    sha256: str  # of the selected texts, in order

    @property
    def size(self) -> int:
        return len(self.texts)

    def summary(self) -> dict[str, object]:
        """What a manifest records (everything but the texts)."""
        return {"source": self.source, "size": self.size, "available": self.available, "sha256": self.sha256}


def shipped_path() -> Path:
    return Path(str(resources.files("pipeline.data").joinpath("calibration", SHIPPED_NAME)))


def load_calibration(path: Path | str | None = None, size: int = DEFAULT_CALIB_SIZE) -> CalibrationSet:
    """The first `size` samples of the shipped set (path None) or of the user's file or folder."""
    if size < 1:
        raise InvalidInputError(f"--calib-size must be at least 1, got {size}.", hint="Try --calib-size 64.")
    if path is None:
        texts = _read_jsonl(shipped_path())
        source = f"shipped:{SHIPPED_NAME}"
    else:
        location = Path(path).expanduser()
        if not location.exists():
            raise InvalidInputError(
                f"Calibration data {location} does not exist.",
                hint="Give a .txt (one sample per line) or .jsonl (a `text` field per line) file, or a dataset folder of them.",
            )
        location = location.resolve()
        texts = _read_folder(location) if location.is_dir() else _read_file(location)
        source = str(location)
        if not texts:
            raise InvalidInputError(
                f"Calibration data {location} holds no text samples.",
                hint="Put one sample per line (.txt) or a non-empty `text` field per line (.jsonl); "
                "or leave --calib-data out to use the shipped calibration set.",
            )
    chosen = tuple(texts[:size])
    return CalibrationSet(source=source, texts=chosen, available=len(texts), sha256=sha256_json(list(chosen)))


def _read_file(path: Path) -> list[str]:
    suffix = path.suffix.lower()
    if suffix == ".txt":
        return _read_txt(path)
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".json":
        return _read_json(path)
    raise InvalidInputError(
        f"Calibration file {path.name} has an unsupported type {suffix or '(none)'}.",
        hint="Use a .txt file (one sample per line) or a .jsonl file (one {\"text\": ...} object per line).",
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInputError(f"Calibration file {path} is not UTF-8 text ({error}).",
                                hint="Save it as UTF-8.") from None
    except OSError as error:
        raise InvalidInputError(f"Cannot read calibration file {path}: {error.strerror or error}.",
                                hint="Check the path and its permissions.") from None


def _read_txt(path: Path) -> list[str]:
    return [line.strip() for line in _read_text(path).splitlines() if line.strip()]


def _read_jsonl(path: Path) -> list[str]:
    texts = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"{path}:{number} is not valid JSON ({error.msg}).",
                                    hint="Each line of a .jsonl file must be one JSON object such as {\"text\": \"...\"}.") from None
        texts.append(_text_field(record, f"{path}:{number}"))
    return [t for t in texts if t.strip()]


def _read_json(path: Path) -> list[str]:
    """A JSON list of records/strings, or {"text": [...]} (column layout) or {"data"/"rows": [...]}."""
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"{path} is not valid JSON ({error.msg}).", hint="Use .jsonl with one object per line.") from None
    if isinstance(data, dict):
        if isinstance(data.get("text"), list):
            data = data["text"]
        else:
            data = data.get("data") or data.get("rows") or []
    if not isinstance(data, list):
        raise InvalidInputError(f"{path} holds no list of samples.", hint="Use .jsonl with one {\"text\": ...} object per line.")
    texts = [item if isinstance(item, str) else _text_field(item, str(path)) for item in data]
    return [t for t in texts if t.strip()]


def _text_field(record: object, where: str) -> str:
    if not isinstance(record, dict) or not isinstance(record.get("text"), str):
        raise InvalidInputError(f"{where}: a sample has no string `text` field.",
                                hint="Each record needs a `text` field, e.g. {\"text\": \"Hello world\"}.")
    return record["text"]


def _read_folder(folder: Path) -> list[str]:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    data = [p for p in files if p.suffix.lower() in _TEXT_SUFFIXES and not _is_metadata(p)]
    train = [p for p in data if "train" in p.relative_to(folder).as_posix().lower()]
    if train:
        data = train
    if not data:
        binary = [p.name for p in files if p.suffix.lower() in _REFUSED_SUFFIXES]
        if binary:
            raise InvalidInputError(
                f"Calibration folder {folder} holds {binary[0]} ({'Arrow' if binary[0].endswith('.arrow') else 'Parquet'} "
                "data), which the pipeline cannot read without the `datasets`/`pyarrow` packages.",
                hint="Export it as JSON lines first, e.g. `datasets.load_from_disk(DIR)['train'].to_json('calib.jsonl')`, "
                "and pass --calib-data calib.jsonl.",
            )
        raise InvalidInputError(
            f"Calibration folder {folder} has no .jsonl, .txt or .json data files.",
            hint="Give a folder of .jsonl files with a `text` field (a train split is preferred), or a single file.",
        )
    texts: list[str] = []
    for path in data:
        texts.extend(_read_file(path))
    return texts


def _is_metadata(path: Path) -> bool:
    return path.name in {"dataset_info.json", "state.json", "dataset_dict.json", "config.json"} or path.name.startswith("README")
