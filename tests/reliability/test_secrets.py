"""Safe defaults: no remote code, no token in anything we write, no path outside build/, non-root
containers and pods, prompt length enforced before generation."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest
import yaml

from pipeline.cli import run

REPO_ROOT = Path(__file__).resolve().parents[2]
PLANTED = "hf_plantedTOKENdoNotLeak0123456789abcdef"
CODE_DIRS = ("pipeline", "model_repo_templates", "scripts")


def _from_pretrained_calls(path: Path) -> list[tuple[int, str | None]]:
    """(line, value of trust_remote_code as source text or None when absent) for each call."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "from_pretrained":
            value = next((ast.unparse(k.value) for k in node.keywords if k.arg == "trust_remote_code"), None)
            calls.append((node.lineno, value))
    return calls


def _code_files() -> list[str]:
    return sorted(str(p.relative_to(REPO_ROOT)) for d in CODE_DIRS for p in (REPO_ROOT / d).rglob("*.py")
                  if "from_pretrained" in p.read_text(encoding="utf-8", errors="replace"))


def test_code_files_are_found() -> None:
    files = _code_files()
    assert "pipeline/quantization/modelopt.py" in files and len(files) >= 3


@pytest.mark.parametrize("rel", _code_files())
def test_every_from_pretrained_refuses_remote_code(rel: str) -> None:
    """Every from_pretrained passes trust_remote_code=False, or a variable set from a CLI flag: transformers 5
    refuses remote code by default, but a call that does not say so is one upgrade (or one copy-paste of
    `trust_remote_code=True`) away from running a checkpoint's Python."""
    for line, value in _from_pretrained_calls(REPO_ROOT / rel):
        assert value is not None, f"{rel}:{line}: from_pretrained without trust_remote_code"
        assert value != "True", f"{rel}:{line}: trust_remote_code=True hard-coded"


@pytest.mark.slow  # download, ModelOpt convert and build of the tiny checkpoint: ~8 s
def test_checkpoint_code_is_never_run(tiny_ckpt: Path, tmp_path: Path, monkeypatch) -> None:
    """A checkpoint that ships Python (auto_map) is downloaded without its .py files and converted
    with the built-in architecture: the planted code never runs."""
    import shutil

    marker = tmp_path / "REMOTE_CODE_RAN"
    source = tmp_path / "ckpt-with-code"
    shutil.copytree(tiny_ckpt, source)
    code = f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import LlamaConfig as EvilConfig\n"
    (source / "configuration_evil.py").write_text(code)
    (source / "modeling_evil.py").write_text(code)
    config = json.loads((source / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (source / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    assert run(["download", f"local:{source}"]) == 0
    hf = tmp_path / "build" / "ckpt-with-code" / "hf"
    assert not list(hf.glob("*.py"))
    assert run(["convert", "--model", str(hf), "--quant", "fp16"]) == 0
    assert run(["build", "--gpu", "cpu", "--model", "ckpt-with-code", "--max-input-len", "16", "--max-seq-len", "32"]) == 0
    assert not marker.exists()


# ------------------------------------------------------------------------------------------------
# a planted HF token never lands in a file or on the console


def _grep_tree(root: Path, needle: bytes) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return hits


@pytest.mark.slow
def test_planted_token_never_written(tiny_ckpt: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    from download_fixtures import COMMIT, make_hub_cache

    build = tmp_path / "build"
    cache = tmp_path / "hf-cache"
    make_hub_cache(cache, "tiny-org/Tiny-Llama", tiny_ckpt, {"main": COMMIT})
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(build))
    monkeypatch.setenv("HF_TOKEN", PLANTED)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", PLANTED)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    steps = [
        ["download", f"local:{tiny_ckpt}"],
        ["download", "hf:tiny-org/Tiny-Llama"],
        ["convert", "--model", str(build / "tiny-llama" / "hf"), "--quant", "fp16"],
        ["build", "--gpu", "cpu", "--model", "tiny-llama", "--max-input-len", "16", "--max-seq-len", "32"],
    ]
    printed = []
    for argv in steps:
        for json_flag in ([], ["--json"]):
            assert run([*argv, *json_flag]) == 0, argv
            captured = capsys.readouterr()
            printed.append(captured.out + captured.err)
    engine = next((build / "tiny-llama" / "engines").iterdir())
    for argv in (["render", "--engine", str(engine), "--runtime", "reference"],
                 ["k8s", "render", "--engine", str(engine)],
                 ["--debug", "download", "hf:tiny-org/Not-Cached"]):  # an error path, with the traceback
        run(argv)
        captured = capsys.readouterr()
        printed.append(captured.out + captured.err)
    written = sorted(p.relative_to(build).parts[1] for p in build.rglob("manifest.json"))
    assert {"hf", "checkpoints", "engines", "triton", "k8s"} <= set(written), written
    assert _grep_tree(build, PLANTED.encode()) == []
    assert _grep_tree(build, PLANTED[3:20].encode()) == []  # not even a piece of it
    assert all(PLANTED not in text for text in printed)


# ------------------------------------------------------------------------------------------------
# nothing escapes build/


@pytest.mark.parametrize("argv, fragment", [
    (["download", "hf:org/../../etc"], "Invalid Hugging Face repo id"),
    (["download", "hf:../x"], "Invalid Hugging Face repo id"),
    (["build", "--gpu", "cpu", "--model", "../../etc"], "Invalid model name"),
    (["build", "--gpu", "cpu", "--model", "a/b"], "Invalid model name"),
    (["build", "--gpu", "cpu", "--model", ".."], "Invalid model name"),
    (["convert", "--model", "hf:org/..%2F..%2Fetc"], "Invalid Hugging Face repo id"),
])
def test_model_names_cannot_escape_build(argv: list[str], fragment: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PIPELINE_BUILD_DIR", str(tmp_path / "build"))
    assert run(argv) == 2
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "build").exists() and not (tmp_path / "etc").exists()


def test_path_helpers_refuse_traversal(tmp_path: Path) -> None:
    from pipeline.core.errors import InvalidInputError
    from pipeline.core.paths import model_dir, model_slug, stage_dir

    for bad in ("..", "../x", "x/../../y", "/etc", "a/b", "", ".hidden", "x\0y"):
        with pytest.raises(InvalidInputError):
            model_dir(bad, tmp_path)
    with pytest.raises(InvalidInputError):
        stage_dir("ok", "engines", "../../evil", tmp_path)
    for weird in ("../../etc/passwd", "..", "a/../../b", "C:\\Windows"):
        try:
            slug = model_slug(weird)
        except InvalidInputError:
            continue  # refused: fine
        assert (tmp_path / slug).resolve().parent == tmp_path.resolve()


# ------------------------------------------------------------------------------------------------
# containers and pods run as non-root


def test_dockerfile_runs_as_non_root() -> None:
    lines = [l.strip() for l in (REPO_ROOT / "Dockerfile").read_text().splitlines()]
    users = [l.split(None, 1)[1].strip() for l in lines if l.upper().startswith("USER ")]
    assert users, "the Dockerfile never sets USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"the image runs as {users[-1]}"


@pytest.mark.parametrize("world", [1, 16])
def test_k8s_pods_run_as_non_root(world: int, tmp_path: Path) -> None:
    """Every pod template (Deployment, or LeaderWorkerSet leader and workers) says runAsNonRoot and
    no container asks for privileges."""
    from pipeline.k8s import K8sSpec, render_manifests
    from pipeline.build.profiles import BuildProfile

    profile = BuildProfile(model="m", model_revision="r", runtime="tensorrtllm", gpu="h100-sxm", compute_capability="9.0",
                           tp=world)
    files = render_manifests(profile, K8sSpec(engine_dir=tmp_path))
    pods = []

    def walk(node):
        if isinstance(node, dict):
            if "containers" in node and isinstance(node["containers"], list):
                pods.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for docs in files.values():
        walk(docs)
    assert pods, "no pod template rendered"
    for pod in pods:
        assert pod.get("securityContext", {}).get("runAsNonRoot") is True, yaml.safe_dump(pod)[:500]
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container.get("securityContext", {})
            assert context.get("privileged") is not True and context.get("allowPrivilegeEscalation") is not True
            assert context.get("runAsUser", 1) != 0


# ------------------------------------------------------------------------------------------------
# input length enforced before generation


@pytest.mark.triton
@pytest.mark.slow
def test_overlong_prompt_refused_before_generation(demo_server, demo_repo: Path) -> None:
    """20,000 words against max_input_len 256: refused by preprocessing (the limit is rendered into its
    config from the engine), so no token reaches tensorrt_llm; the server then answers a normal request."""
    from pipeline.clients.triton import generate
    from pipeline.render.model_repo import parse_model_config

    config = parse_model_config(demo_repo / "preprocessing" / "config.pbtxt")
    assert config.parameters["max_input_len"].string_value == "256"
    started = time.monotonic()
    answer = generate(demo_server.grpc_url, "ensemble", "word " * 20_000, max_tokens=4, timeout_s=60)
    elapsed = time.monotonic() - started
    assert answer.error is not None and "max_input_len 256" in answer.error, answer.error
    assert "preprocessing: Prompt has" in answer.error, answer.error  # refused there, not by tensorrt_llm
    assert answer.output_tokens in (None, 0) and not answer.text
    # generous: the claim (refused by preprocessing, before any token reached tensorrt_llm) is the error text
    # above; this only catches a prefill of 20,000 tokens on 2 cores, which takes minutes
    assert elapsed < 30, f"the refusal took {elapsed:.1f} s"
    ok = generate(demo_server.grpc_url, "ensemble", "Hello", max_tokens=2, timeout_s=60)
    assert ok.ok, ok.error
