"""Parser cases as (format, fixture log, expected records) triples, and format auto-detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.records import comparable, fixture_lines, fixture_parser, parse_fixture, parse_lines

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(FIXTURES.glob("*/*.expected.json"))

# The format auto-detection (or, for scheduler logs, the file's role) must pick for each fixture.
DETECTED_FORMAT = {
    "core/keyvalue": "keyvalue",
    "core/mindformers_pynative": "mindformers_pynative",
    "formats/deepspeed": "deepspeed",
    "formats/errors_ascend": None,
    "formats/errors_torch": None,
    "formats/hf_trainer": "hf_trainer",
    "formats/jsonl": "jsonl",
    "formats/keyvalue": "keyvalue",
    "formats/megatron": "megatron",
    "formats/mindformers_pynative": "mindformers_pynative",
    "formats/mindformers_pynative_state_monitor": "mindformers_pynative",
    "formats/mindformers_legacy": "mindformers_static",
    "formats/mindformers_static": "mindformers_static",
    "formats/msrun_scheduler": "msrun_scheduler",
    "formats/torchrun_tee": "keyvalue",
    "formats/torchtitan": "torchtitan",
    "real/dataloader_bus_error": "keyvalue",
    "real/deepspeed_kill_console": None,
    "real/errors_ascend": None,
    "real/errors_ascend_faults": None,
    "real/errors_cann_plog_host": None,
    "real/errors_host": None,
    "real/errors_nccl": None,
    "real/errors_torchelastic": None,
    "real/fairseq_json": "jsonl",
    "real/fairseq_plain": "fairseq",
    "real/healthy_noise": None,
    "real/hf_paddlenlp_global_step": "hf_trainer",
    "real/llamafactory_trainer_log": "jsonl",
    "real/megatron_no_colon": "megatron",
    "real/megatron_tflops": "megatron",
    "real/mmcv_epoch": "mmengine",
    "real/mmcv_iter": "mmengine",
    "real/mmengine_epoch": "mmengine",
    "real/mmengine_epoch_run": "mmengine",
    "real/lightning_bar_long": "lightning",
    "real/lightning_bar_nan": "lightning",
    "real/lightning_bar_raise": "lightning",
    "real/mindformers_legacy": "mindformers_static",
    "real/mindvision_lossmonitor": "mindformers_static",
    "real/mmengine_iter": "mmengine",
    "real/mmengine_runner_iter": "mmengine",
    "real/mmengine_runner_scalars": "mmengine_scalars",
    "real/msrun_hang_worker_2": "mindformers_static",
    "real/msrun_nan_worker_1": "mindformers_static",
    "real/msrun_oom_worker_1": "mindformers_static",
    "real/nanogpt": "nanogpt",
    "real/nemo2": "nemo",
    "real/paddlenlp": "paddlenlp",
    "real/generic_unnamed_trainers": "generic",
    "real/hf_trainer_nan": "hf_trainer",
    "real/hf_trainer_no_bar": "hf_trainer",
    "real/hf_trainer_tqdm": "hf_trainer",
    "real/shell_killed_script_ts": "keyvalue",
    "real/shell_killed_tty_ts": "keyvalue",
    "real/srun_label": None,
    "real/torchrun_ddp_hang_console": None,
    "real/torchrun_ddp_hang_rank0": None,
    "real/torchrun_ddp_kill": "keyvalue",
    "real/torchrun_ddp_healthy": "keyvalue",
    "real/torchrun_ddp_nan": "keyvalue",
    "real/torchrun_ddp_oom": "keyvalue",
    "real/torchrun_ddp_raise": "keyvalue",
    "real/torchrun_ddp_raise_glued": "keyvalue",
    "real/torchrun_tee_cut_lines": "keyvalue",
    "real/torchtitan_tflops": "torchtitan",
}


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.name.split('.')[0]}"


@pytest.mark.parametrize("expected_file", CASES, ids=case_id)
def test_fixture_parses_to_expected_records(expected_file: Path) -> None:
    log_file = expected_file.with_name(expected_file.name.replace(".expected.json", ".log"))
    actual, expected = comparable(parse_fixture(log_file), json.loads(expected_file.read_text()))
    assert actual == expected


@pytest.mark.parametrize("expected_file", CASES, ids=case_id)
def test_auto_detection_picks_the_fixture_format(expected_file: Path) -> None:
    log_file = expected_file.with_name(expected_file.name.replace(".expected.json", ".log"))
    parser = fixture_parser(log_file)
    parse_lines(parser, fixture_lines(log_file))
    assert (parser.format.name if parser.format else None) == DETECTED_FORMAT[case_id(expected_file)]


def test_every_fixture_log_has_expectations_and_a_detection_case() -> None:
    logs = sorted(FIXTURES.glob("*/*.log"))
    assert logs, "no fixtures found"
    missing = [log.name for log in logs if not log.with_name(log.stem + ".expected.json").exists()]
    assert missing == []
    assert sorted(DETECTED_FORMAT) == sorted(case_id(case) for case in CASES)


def test_a_trainer_dict_takes_the_step_of_the_last_bar_before_it() -> None:
    # transformers 5.24.0 redirected to a file (tests/fixtures/SOURCES.md): each physical line holds the bars
    # drawn since the previous dict, the first of them that dict's step; the last one is this dict's.
    records = parse_fixture(FIXTURES / "real" / "hf_trainer_tqdm.log")
    assert [record["step"] for record in records if record["type"] == "step"] == list(range(5, 61, 5))
