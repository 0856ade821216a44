"""Download fixtures for every suite (registered by tests/conftest.py as a pytest plugin): a real tiny
Llama checkpoint (`tiny_ckpt`), a build root (`build_root`), a Hugging Face cache laid out as
huggingface_hub lays it out (`make_hub_cache`, `hub_cache`), online mode with an empty cache (`online`),
and `FakeHub`, a local stand-in for the Hub's HTTP API."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMIT_V1 = "fedcba9876543210fedcba9876543210fedcba98"
SECRET = "hf_SeCrEtToKeNdoNotPrint0123456789"


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny) Llama checkpoint saved by transformers, with a real tokenizer, plus files the
    download must leave behind."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    vocab = {f"w{i}": i for i in range(30)} | {"<unk>": 30, "</s>": 31}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="</s>").save_pretrained(folder)
    (folder / "README.md").write_text("model card\n")
    (folder / "pytorch_model.bin").write_bytes(b"not needed")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.safetensors").write_bytes(b"not needed either")
    return folder


@pytest.fixture()
def build_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "build"
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(root))
    return root


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_hub_cache(cache: Path, repo_id: str, source: Path, refs: dict[str, str]) -> Path:
    """Lay out `source`'s files as huggingface_hub's cache does: blobs named by sha256 (LFS files)
    or git sha1, per-commit snapshot folders of relative symlinks, and refs/<branch|tag> files."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    for ref, commit in refs.items():
        (repo / "refs" / ref).write_text(commit)
        snapshot = repo / "snapshots" / commit
        snapshot.mkdir(parents=True, exist_ok=True)
        for path in sorted(p for p in source.iterdir() if p.is_file()):
            data = path.read_bytes()
            lfs = path.suffix == ".safetensors"
            blob = repo / "blobs" / (hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data))
            blob.write_bytes(data)
            link = snapshot / path.name
            if not link.exists():
                link.symlink_to(os.path.relpath(blob, snapshot))
    return repo


@pytest.fixture()
def hub_cache(tmp_path: Path, tiny_ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hf-cache"
    make_hub_cache(cache, "tiny-org/Tiny-Llama", tiny_ckpt, {"main": COMMIT, "v1": COMMIT_V1})
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


class FakeHub:
    """A stand-in Hub endpoint on a free local port, speaking the part of the Hub's HTTP API that
    snapshot_download uses (revision info, tree listing, resolve with ETag/X-Repo-Commit headers and
    Range requests). With `error` set, every request gets that (status, X-Error-Code) answer, as the
    real Hub sends for gated/missing repos and revisions. Records (method, path, Range, Authorization)."""

    def __init__(self, repo_id: str = "", files: dict[str, bytes] | None = None, *, commit: str = COMMIT,
                 error: tuple[int, str] | None = None) -> None:
        files = files or {}
        seen: list[tuple[str, str, str | None, str | None]] = []
        self.seen = seen

        def etag(name: str, data: bytes) -> str:
            return hashlib.sha256(data).hexdigest() if name.endswith(".safetensors") else _git_blob_sha1(data)

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _answer(self) -> None:
                path = unquote(urlsplit(self.path).path)
                seen.append((self.command, path, self.headers.get("Range"), self.headers.get("Authorization")))
                if error is not None:
                    return self._send(error[0], b'{"error": "x"}', {"X-Error-Code": error[1]})
                if path.startswith(f"/api/models/{repo_id}/revision/"):
                    info = {"id": repo_id, "sha": commit, "siblings": [{"rfilename": n} for n in files]}
                    return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
                if path.startswith(f"/api/models/{repo_id}/tree/"):
                    tree = []
                    for name, data in files.items():
                        entry = {"type": "file", "path": name, "size": len(data), "oid": _git_blob_sha1(data)}
                        if name.endswith(".safetensors"):
                            entry["lfs"] = {"oid": etag(name, data), "size": len(data), "pointerSize": 134}
                        tree.append(entry)
                    return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
                prefix = f"/{repo_id}/resolve/{commit}/"
                name = path[len(prefix):] if path.startswith(prefix) else ""
                if name not in files:
                    return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
                data = files[name]
                headers = {"X-Repo-Commit": commit, "ETag": f'"{etag(name, data)}"', "Accept-Ranges": "bytes"}
                if name.endswith(".safetensors"):
                    headers |= {"X-Linked-Etag": f'"{etag(name, data)}"', "X-Linked-Size": str(len(data))}
                wanted = self.headers.get("Range")
                if wanted and self.command == "GET":
                    start = int(wanted.split("=")[1].split("-")[0])
                    headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    return self._send(206, data[start:], headers)
                return self._send(200, data, headers)

            do_GET = do_HEAD = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def fetched(self) -> set[str]:
        return {path.rsplit("/", 1)[-1] for method, path, _, _ in self.seen if method == "GET" and "/resolve/" in path}

    def __enter__(self) -> "FakeHub":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture()
def online(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Online mode (whatever the outer environment says) with an empty HF cache; returns the cache."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    cache = tmp_path / "online-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache
