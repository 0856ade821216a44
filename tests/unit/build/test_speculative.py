"""`pipeline build --speculative`: the trtllm-build flags (against the pinned release's flag table), the PyTorch
backend's speculative_config (against 1.1.0's LlmArgs table), the build folders the contract names, the draft's
memory, and the bad-input refusals (exit 2, with what would work)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from build_cases import build_root, tiny_hf  # noqa: F401  (fixture)
from pipeline.build.llm_args import option_problems
from pipeline.build.speculative import lookahead_draft_len

LLAMA = Path(__file__).resolve().parents[2] / "fixtures" / "llama-3.1-8b"


def _run(argv, capsys):
    from pipeline.cli import run

    code = run(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _small_llama(folder: Path, **changes) -> Path:
    """A config-only HF folder of a smaller Llama 3 (the planner reads its shape; a dry run needs no weights)."""
    config = json.loads((LLAMA / "config.json").read_text())
    config.update({"num_hidden_layers": 16, "hidden_size": 2048, "intermediate_size": 8192, "head_dim": 64, **changes})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _assert_flags_in_table(argv: list[str], table: dict[str, dict[str, str]]) -> None:
    i, seen = 1, set()
    while i < len(argv):
        name = argv[i]
        assert name in table and name not in seen, name
        seen.add(name)
        row = table[name]
        if row["takes_value"] == "yes":
            choices = [c for c in row["choices"].split("|") if c]
            assert not choices or argv[i + 1] in choices, (name, argv[i + 1], choices)
            i += 2
        else:
            i += 1


@pytest.fixture(scope="module")
def flag_table(reference_tsv) -> dict[str, dict[str, str]]:
    return {row["flag"]: row for row in reference_tsv("trtllm_build_flags.tsv")}


def test_lookahead_draft_len_is_nvidias_formula():
    assert lookahead_draft_len(7, 7, 7) == 83  # the README's example
    assert lookahead_draft_len(2, 2, 1) == 2
    assert lookahead_draft_len(4, 1, 4) == 0 + 7 * 0


def test_speculative_config_keys_are_checked_against_llm_args():
    eagle = {"decoding_type": "Eagle", "max_draft_len": 3, "speculative_model_dir": "/m/draft", "eagle3_one_model": True}
    assert option_problems({"speculative_config": eagle}) == []
    assert option_problems({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4,
                                                   "max_matching_ngram_size": 2}}) == []
    # the class string is not a from_dict key
    [problem] = option_problems({"speculative_config": {"decoding_type": "Draft_Target", "max_draft_len": 4}})
    assert "Draft_Target" in problem and "DraftTarget" in problem
    # a key of another decoding class
    [problem] = option_problems({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4, "eagle3_one_model": True}})
    assert "eagle3_one_model" in problem and "NGramDecodingConfig" in problem


def test_engine_draft_target_flags_and_draft_engine(build_root, tmp_path, flag_table, capsys):
    draft = _small_llama(tmp_path / "draft")
    code, out, err = _run(["build", "--checkpoint", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run", "--json",
                           "--speculative", "draft-target", "--draft", str(draft), "--max-draft-len", "5"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    command = plan["command"]
    _assert_flags_in_table(command, flag_table)
    at = command.index("--speculative_decoding_mode")
    assert command[at + 1] == "draft_tokens_external"
    assert command[command.index("--max_draft_len") + 1] == "5"
    assert command[command.index("--use_paged_context_fmha") + 1] == "enable"
    draft_cmd = plan["draft_command"]
    _assert_flags_in_table(draft_cmd, flag_table)
    assert draft_cmd[draft_cmd.index("--checkpoint_dir") + 1] == str(draft)
    assert draft_cmd[draft_cmd.index("--output_dir") + 1] == str(Path(plan["engine_dir"]) / "draft")
    assert draft_cmd[draft_cmd.index("--use_paged_context_fmha") + 1] == "enable"
    assert "--speculative_decoding_mode" not in draft_cmd
    assert plan["speculative"] == {"method": "draft-target", "max_draft_len": 5, "draft_dir": "draft"}
    # the memory pre-check counts the draft: more weights, less KV room than the target alone
    code, out, _ = _run(["build", "--checkpoint", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run", "--json"], capsys)
    alone = json.loads(out)
    assert plan["memory"]["weights_gib"] > alone["memory"]["weights_gib"]
    assert plan["memory"]["kv_capacity_tokens"] < alone["memory"]["kv_capacity_tokens"]
    assert plan["engine_dir"] != alone["engine_dir"], "a speculative engine is its own profile"


def test_engine_lookahead_flags(build_root, flag_table, capsys):
    code, out, err = _run(["build", "--checkpoint", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run", "--json",
                           "--speculative", "lookahead", "--lookahead", "7,7,7"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    _assert_flags_in_table(plan["command"], flag_table)
    assert plan["command"][plan["command"].index("--speculative_decoding_mode") + 1] == "lookahead_decoding"
    assert plan["command"][plan["command"].index("--max_draft_len") + 1] == "83"
    assert plan["speculative"] == {"method": "lookahead", "max_draft_len": 83, "lookahead": [7, 7, 7]}
    assert plan["draft_command"] == []


@pytest.mark.parametrize("extra,needle", [
    (["--speculative", "lookahead", "--pp", "2"], "pipeline parallelism"),
    (["--speculative", "eagle3", "--draft", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"], "--backend pytorch"),
    (["--speculative", "draft-target", "--draft", "DRAFT", "--max-draft-len", "0"], "--max-draft-len 1 or more"),
    (["--speculative", "lookahead", "--max-draft-len", "9"], "contradicts"),
    (["--speculative", "ngram"], "--backend pytorch --speculative ngram"),
    (["--speculative", "draft-target"], "needs --draft"),
    (["--speculative", "medusa"], "draft-target, ngram, lookahead, eagle3"),
])
def test_engine_bad_input_exits_2_with_what_works(build_root, tmp_path, capsys, extra, needle):
    extra = [str(_small_llama(tmp_path / "d")) if part == "DRAFT" else part for part in extra]
    code, _, err = _run(["build", "--checkpoint", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run", *extra], capsys)
    assert code == 2
    assert needle in err


def test_draft_with_another_vocabulary_is_refused(build_root, tmp_path, capsys):
    draft = _small_llama(tmp_path / "other", vocab_size=32000)
    code, _, err = _run(["build", "--checkpoint", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run",
                         "--speculative", "draft-target", "--draft", str(draft)], capsys)
    assert code == 2 and "vocab_size 32000" in err and "same model family" in err


def _cpu_target(build_root: Path) -> Path:
    tiny_hf(build_root / "tiny" / "hf")
    draft = tiny_hf(build_root.parent / "tiny-draft")
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    return draft


def test_cpu_reference_build_writes_the_contract_folders(build_root, capsys):
    draft = _cpu_target(build_root)
    code, out, err = _run(["build", "--model", "tiny", "--gpu", "cpu", "--json", "--speculative", "draft-target",
                           "--draft", str(draft), "--max-draft-len", "3"], capsys)
    assert code == 0, err
    engine = Path(json.loads(out)["engine_dir"])
    record = {"method": "draft-target", "max_draft_len": 3, "draft_dir": "draft"}
    assert json.loads((engine / "manifest.json").read_text())["speculative"] == record
    assert json.loads((engine / "config.json").read_text())["build_config"]["speculative"] == record
    draft_dir = engine / "draft"
    assert (draft_dir / "config.json").is_file() and (draft_dir / "model" / "config.json").is_file()
    assert json.loads((draft_dir / "model" / "config.json").read_text())["num_hidden_layers"] == 1
    assert "speculative" not in json.loads((draft_dir / "config.json").read_text())["build_config"]


def test_cpu_ngram_and_refused_methods(build_root, capsys):
    tiny_hf(build_root / "tiny" / "hf")
    code, out, err = _run(["build", "--model", "tiny", "--gpu", "cpu", "--json", "--speculative", "ngram",
                           "--max-matching-ngram-size", "3"], capsys)
    assert code == 0, err
    engine = Path(json.loads(out)["engine_dir"])
    assert json.loads((engine / "manifest.json").read_text())["speculative"] == {
        "method": "ngram", "max_draft_len": 4, "max_matching_ngram_size": 3}
    code, _, err = _run(["build", "--model", "tiny", "--gpu", "cpu", "--speculative", "ngram",
                         "--max-matching-ngram-size", "0"], capsys)
    assert code == 2 and "--max-matching-ngram-size 1 or more" in err
    code, _, err = _run(["build", "--model", "tiny", "--gpu", "cpu", "--speculative", "lookahead"], capsys)
    assert code == 2 and "reference runtime" in err


def test_pytorch_deployable_speculative_config(build_root, tmp_path, capsys):
    draft = _cpu_target(build_root)
    code, out, err = _run(["build", "--backend", "pytorch", "--model", "tiny", "--gpu", "cpu", "--json",
                           "--speculative", "draft-target", "--draft", str(draft)], capsys)
    assert code == 0, err
    deploy = Path(json.loads(out)["output_dir"])
    options = yaml.safe_load((deploy / "llm_api_options.yaml").read_text())
    assert options["speculative_config"] == {"decoding_type": "DraftTarget", "max_draft_len": 4,
                                             "speculative_model_dir": str(deploy.resolve() / "draft")}
    assert (deploy / "draft" / "config.json").is_file() and (deploy / "draft" / "model.safetensors").is_file()
    assert json.loads((deploy / "manifest.json").read_text())["speculative"]["method"] == "draft-target"
    # rendered for the bundle's root, and the bundle carries draft/
    code, _, err = _run(["render", "--engine", str(deploy), "--out", str(tmp_path / "repo"), "--model-root", "/models"], capsys)
    assert code == 0, err
    model_yaml = yaml.safe_load((tmp_path / "repo" / "tensorrt_llm" / "1" / "model.yaml").read_text())
    assert model_yaml["speculative_config"]["speculative_model_dir"] == "/models/tensorrt_llm/1/draft"
    assert (tmp_path / "repo" / "tensorrt_llm" / "1" / "draft" / "config.json").is_file()


def test_pytorch_ngram_turns_the_overlap_scheduler_off(build_root, capsys):
    tiny_hf(build_root / "tiny" / "hf")
    code, out, err = _run(["build", "--backend", "pytorch", "--model", "tiny", "--gpu", "cpu", "--json", "--dry-run",
                           "--speculative", "ngram"], capsys)
    assert code == 0, err
    options = json.loads(out)["options"]
    assert options["disable_overlap_scheduler"] is True
    assert options["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2}


def test_pytorch_eagle3_plan_on_a_gpu(build_root, tmp_path, capsys):
    head = tmp_path / "eagle3-head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000}))
    code, out, err = _run(["build", "--backend", "pytorch", "--checkpoint", str(LLAMA), "--gpu", "h100", "--dry-run",
                           "--json", "--speculative", "eagle3", "--draft", str(head)], capsys)
    assert code == 0, err
    plan = json.loads(out)
    config = plan["options"]["speculative_config"]
    assert config["decoding_type"] == "Eagle" and config["eagle3_one_model"] is True and config["max_draft_len"] == 3
    assert config["speculative_model_dir"].endswith("/draft")
    assert any("greedy" in note for note in plan["notes"])
    code, _, err = _run(["build", "--backend", "pytorch", "--checkpoint", str(LLAMA), "--gpu", "h100", "--dry-run",
                         "--speculative", "eagle3", "--draft", str(head), "--pp", "2"], capsys)
    assert code == 2 and "--pp" in err


@pytest.mark.skipif(__import__("importlib").util.find_spec("tensorrt_llm") is None,
                    reason="tensorrt_llm is not installed here (the pinned GPU image has 1.1.0)")
def test_tensorrt_llm_builds_our_speculative_configs():  # pragma: no cover - GPU image only
    from tensorrt_llm.llmapi.llm_args import DecodingBaseConfig

    from pipeline.build.speculative import Speculation, torch_config

    for speculation, draft in [(Speculation(method="draft-target", max_draft_len=4), Path("/d")),
                               (Speculation(method="ngram", max_draft_len=4, max_matching_ngram_size=2), None),
                               (Speculation(method="eagle3", max_draft_len=3), Path("/d"))]:
        DecodingBaseConfig.from_dict(dict(torch_config(speculation, draft)))


def test_engine_job_dry_run_carries_the_speculation(build_root, capsys):
    code, out, err = _run(["engine", str(LLAMA), "--gpu", "h100", "--quant", "fp16", "--dry-run", "--json",
                           "--speculative", "lookahead"], capsys)
    assert code == 0, err
    build_step = [s for s in json.loads(out)["steps"] if s["name"] == "build (dry run)"][0]
    assert "--speculative_decoding_mode lookahead_decoding --max_draft_len 23" in build_step["detail"]


def test_two_drafts_in_folders_of_one_name_are_two_profiles(tmp_path):
    """A draft is named by its folder (often `hf`) and where it is: two `hf` drafts must not share an engine folder."""
    from pipeline.build.speculative import Speculation

    speculation = Speculation(method="draft-target", max_draft_len=4)
    first, second = (speculation.label("hf", tmp_path / side / "hf") for side in ("a", "b"))
    assert first != second and first.startswith("draft-target-k4-hf-")
    assert speculation.label("hf", tmp_path / "a" / "hf") == first  # stable for one draft
