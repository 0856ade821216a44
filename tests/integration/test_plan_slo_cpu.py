"""The SLO planner end to end on the CPU reference runtime, for real.

One deployment (batch 8) is benched at two ISL/OSL. Calibrated on the first, the planner's prediction for the
second must be better than uncalibrated. Calibrated on the second (the user's own traffic), `pipeline build
--slo` chooses the build for it; served, the bench at the concurrency the planner says meets the SLO passes the
gate, and at 1.5x it fails, as the planner predicts.

The machine is shared and noisy (its load changes twofold within minutes), so the SLO is placed by the test
from the calibrated planner's own predictions where the pass/fail margin is widest: the TTFT p99 of clients that
arrive together grows with the prompts prefilled ahead of them (compute-bound at ISL 256 on a CPU), so the bound
sits halfway (geometrically) between the p99 predicted for one client and for two. The TPOT bound is loose.

A p99 of six requests is their slowest, and a shared machine only ever slows a request down: one stall (CI saw a
single request at 1.47x the median) moves the pass side over the bound, while it can only push the fail side
further out. So the pass side alone is benched once more when the first try misses the gate, and both tries are
printed; the planner's choice must hold in one of them, and the 1.5x level must fail on its first.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.cli import run

from build_cases import in_build_root

pytestmark = [pytest.mark.slow, pytest.mark.server]

CAL_ISL, CAL_OSL = 64, 16  # the other ISL/OSL: calibrated on it, predicting ISL/OSL
ISL, OSL = 256, 8  # the SLO's traffic: a different ISL/OSL


@pytest.fixture(scope="module")
def env(demo_hf_dir: Path, session_build_root: Path):
    with in_build_root(session_build_root):
        yield {"hf": demo_hf_dir, "root": session_build_root}


def _serve(engine: Path, log: Path):
    from pipeline.render import RenderSpec, render
    from pipeline.serve import ServerSpec, start_server

    repo = render(RenderSpec(engine=engine, runtime="reference")).repo
    return start_server(ServerSpec(repo=repo, log_file=log, ready_timeout_s=600, warmup=True, exit_timeout_s=5))


def _bench(server, out: Path, isl: int, osl: int, concurrency: str, *extra: str) -> tuple[int, dict]:
    code = run(["bench", "--url", server.grpc_url, "--isl", str(isl), "--osl", str(osl), "--concurrency", concurrency,
                "--requests", "6", "--warmup", "1", "--out", str(out), *extra])
    (folder,) = [p for p in out.iterdir() if p.name.startswith("bench-")]
    return code, json.loads((folder / "bench.json").read_text())


def _built(capsys, *args: str) -> dict:
    capsys.readouterr()
    assert run(["build", "--gpu", "cpu", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_slo_choice_passes_at_its_concurrency_fails_at_1_5x_and_calibration_helps(env, tmp_path, capsys) -> None:
    from pipeline.planner import Scenario
    from pipeline.planner.calibrate import fit_calibration, prediction_error
    from pipeline.planner.shapes import model_spec_from_config
    from pipeline.planner.slo import latency

    hf = env["hf"]
    model = model_spec_from_config(hf)
    # 1. a deployment to calibrate on: batch 8, benched at CAL_ISL/CAL_OSL and at ISL/OSL
    first = _built(capsys, "--checkpoint", str(hf), "--max-batch-size", "8", "--max-input-len", "256", "--max-seq-len", "512")
    with _serve(Path(first["engine_dir"]), tmp_path / "cal.log") as server:
        code, cal_report = _bench(server, tmp_path / "cal", CAL_ISL, CAL_OSL, "1,2")
        assert code == 0
        code, own_report = _bench(server, tmp_path / "own", ISL, OSL, "1,2")
        assert code == 0
    assert cal_report["deployment"]["gpu"] == "cpu" and cal_report["deployment"]["max_batch_size"] == 8
    cal_file = next((tmp_path / "cal").glob("bench-*/bench.json"))
    own_file = next((tmp_path / "own").glob("bench-*/bench.json"))
    other = fit_calibration([cal_file], model, hf, ("cpu",))
    before, after = prediction_error([own_file], model, None), prediction_error([own_file], model, other)
    calibration = fit_calibration([own_file], model, hf, ("cpu",))

    # 2. the SLO, placed from the calibrated planner at ISL/OSL (see the module docstring)
    scenario = Scenario(model, calibration.target, "fp16", None, 1, ISL, OSL)
    build = {"max_batch_size": 8, "max_num_tokens": 2048, "kv_cache_free_gpu_mem_fraction": 0.95}
    at = {c: calibration.apply(latency(scenario, c, build)) for c in (1, 2)}
    ttft_bound = round(math.sqrt(at[1].ttft_p99_ms * at[2].ttft_p99_ms))
    tpot_bound = round(3 * at[2].tpot_p99_ms)
    slo = f"ttft_p99_ms={ttft_bound},tpot_p99_ms={tpot_bound}"

    # 3. build for the SLO (calibrated): the manifest records the SLO and the prediction
    chosen = _built(capsys, "--checkpoint", str(hf), "--slo", slo, "--isl", str(ISL), "--osl", str(OSL),
                    "--calibrate", str(own_file), "--max-input-len", "256", "--max-seq-len", "512")
    engine = Path(chosen["engine_dir"])
    plan = json.loads((engine / "manifest.json").read_text())["slo_plan"]
    assert plan["slo"] == {"ttft_p99_ms": ttft_bound, "tpot_p99_ms": tpot_bound}
    assert plan["max_batch_size"] == chosen["plan"]["limits"]["max_batch_size"]
    concurrency = plan["concurrency"]
    over = math.ceil(1.5 * concurrency)
    assert plan["prediction"]["ttft_p99_ms"] <= ttft_bound
    # the planner itself says 1.5x fails
    over_predicted = calibration.apply(latency(scenario, over, {k: plan[k] for k in build}))
    assert over_predicted.ttft_p99_ms > ttft_bound or over_predicted.tpot_p99_ms > tpot_bound

    # 4. serve it; bench at the predicted concurrency (gate passes) and at 1.5x (gate fails), with the SLO as gates
    gates = [a for k, v in plan["slo"].items() for a in ("--slo", f"{k}={v:g}")]
    with _serve(engine, tmp_path / "slo.log") as server:
        ok, passed = _bench(server, tmp_path / "pass", ISL, OSL, str(concurrency), *gates)
        tries = [passed]
        if ok != 0:  # a stall on the shared machine (module docstring): measure the pass side once more
            ok, passed = _bench(server, tmp_path / "pass-again", ISL, OSL, str(concurrency), *gates)
            tries.append(passed)
        failed_code, failed = _bench(server, tmp_path / "fail", ISL, OSL, str(over), *gates)
    for report in (cal_report, own_report, *tries, failed):
        print("\nmeasured", [(lv["load"], lv["isl"]["mean"], lv["osl"]["mean"], lv["ttft_ms"]["p50"], lv["ttft_ms"]["p99"],
                             lv["tpot_ms"]["p50"], lv["tpot_ms"]["p99"]) for lv in report["levels"]], report.get("planned"))
    print(f"\ncalibrated at ISL {CAL_ISL}/OSL {CAL_OSL} (factors {other.factors}, offsets {other.offsets_ms} ms; in-sample "
          f"error {other.error_before} -> {other.error_after}): error at ISL {ISL}/OSL {OSL} {before} -> {after}. "
          f"SLO {slo} (calibrated at ISL {ISL}/OSL {OSL}: {calibration.error_before} -> {calibration.error_after}), "
          f"chosen batch {plan['max_batch_size']} at concurrency {concurrency}")
    assert ok == 0, passed["slo"]
    assert passed["planned"][0]["slo_predicted_pass"] and passed["planned"][0]["slo_measured_pass"]
    assert failed_code == 4, failed["slo"]
    assert not failed["planned"][0]["slo_predicted_pass"] and not failed["planned"][0]["slo_measured_pass"]

    # 5. calibrated at CAL_ISL/CAL_OSL, the prediction at ISL/OSL is better than uncalibrated
    assert after["median_pct"] < before["median_pct"]
