"""`acx report`: a self-contained file, no URL, secrets re-checked (issue 16)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from acx.cli import main
from acx.report import Redactor, load_run, write_report
from acx.testing.results import synthetic_tasks, write_run

#: Any scheme URL or a protocol-relative reference: the report must need none.
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://|(?:src|href|action)\s*=\s*[\"']?(?!#)[^\s\"'>]")


def test_report_is_self_contained_even_when_data_quotes_urls(tmp_path: Path) -> None:
    tasks = synthetic_tasks(20, seed=2)
    tasks[0]["attempts"][0]["final_answer"] = "see https://example.invalid/x and <script>alert(1)</script>"
    d = write_run(tmp_path / "r", tasks)
    out = write_report([d], tmp_path / "report.html")
    text = out.path.read_text(encoding="utf-8")
    assert not URL.search(text), URL.search(text)
    assert "<script>alert(1)" not in text  # data never becomes markup
    assert text.count("<script") == 3  # index data, details data, the inline program


SECRET_OPENAI = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
SECRET_GH = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123456789"


def test_report_redacts_secret_patterns_and_secret_env_values(tmp_path: Path) -> None:
    tasks = synthetic_tasks(5, seed=1, error_rate=0.0)
    tasks[0]["attempts"][0]["final_answer"] = f"key={SECRET_OPENAI}"
    tasks[1]["attempts"][0]["extra"] = {
        "verifier_output_tail": f"token {SECRET_GH}\nAuthorization: Bearer abcdefghijklmnopqrstuvwx"
    }
    tasks[2]["instruction"] = "use the value hunter2-the-long-password please"
    d = write_run(tmp_path / "r", tasks)
    out = write_report([d], tmp_path / "report.html", environ={"GRADER_PASSWORD": "hunter2-the-long-password"})
    text = out.path.read_text(encoding="utf-8")
    for secret in (SECRET_OPENAI, SECRET_GH, "abcdefghijklmnopqrstuvwx", "hunter2-the-long-password"):
        assert secret not in text
        assert secret[:12] not in text  # not in part either
    assert out.redacted >= 4  # each occurrence (table row, task page) counts
    assert "look like secrets were replaced" in text


def test_redactor_leaves_ordinary_text() -> None:
    r = Redactor(environ={"PATH": "/usr/bin:/bin", "SHORT_TOKEN": "abc"})
    text = (
        "sha256:0f9bfda475ac486b9b3882faf93a1c23 task-00001 /usr/bin:/bin abc skipped-tasks "
        "details/normal/task-00000--5fe80a7e3c2b4d1a mask-abcdefghijklmnopqrstuvwxyz0123 dghp_" + "a" * 40
    )
    assert r.text(text) == text and r.count == 0


def test_headline_interval_computed_or_taken_from_metrics(tmp_path: Path) -> None:
    d = write_run(tmp_path / "r", synthetic_tasks(50, seed=4, error_rate=0.0))
    run = load_run(str(d))
    assert run.headline is not None and "computed by the report" in run.headline["interval_source"]
    lo, hi = run.headline["interval"]
    assert 0.0 <= lo < run.headline["value"] < hi <= 1.0
    metrics = {
        "schema_version": "acx.metrics.v1",
        "series": [
            {"series_id": "correct.avg@1", "metric_id": "correct", "role": "headline", "value": 0.7, "stderr": 0.05}
        ],
    }
    (d / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    run = load_run(str(d))
    assert run.headline["interval_source"] == "metrics.json"
    assert run.headline["interval"] == pytest.approx([0.7 - 0.098, 0.7 + 0.098], abs=1e-3)


def test_acx_report_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path / "a", synthetic_tasks(10, seed=1))
    b = write_run(tmp_path / "b", synthetic_tasks(10, seed=2), run_id="20260102_000000")
    assert main(["report", str(a)]) == 0
    assert (a / "report.html").is_file()
    assert main(["report", str(a), str(b), "-o", str(tmp_path / "both.html")]) == 0
    text = (tmp_path / "both.html").read_text(encoding="utf-8")
    assert 'id="page-compare-1"' in text and "acx-details-1" in text
    assert "report:" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "E0603" in capsys.readouterr().err
    assert main(["report", str(a), "-o", str(tmp_path)]) == 2  # a directory is not a file
    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 2  # the results root, not a run
    err = capsys.readouterr().err
    assert "holds 2 run(s)" in err and str(b) in err and "acx view" in err


def test_damaged_files_do_not_break_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A torn or hand-edited result.json, a damaged metrics.json and progress.json: the report says
    # what is damaged instead of failing (bad input is never a traceback).
    d = write_run(tmp_path / "r", synthetic_tasks(5, seed=1, error_rate=0.0))
    victim = next((d / "details" / "normal").glob("task-00002--*/attempt-1/result.json"))
    victim.write_text('{"task_id": "task-00002", "stat', encoding="utf-8")
    (d / "metrics.json").write_text("[1, 2", encoding="utf-8")
    (d / "progress.json").write_text("null", encoding="utf-8")
    run = load_run(str(d))
    detail = next(x for x in run.details if x["task_id"] == "task-00002")
    assert detail["attempts"][0]["damaged"] is True and detail["attempts"][0]["finished"] is False
    assert main(["report", str(d)]) == 0
    assert main(["results", "tasks", str(d), "--format", "json"]) == 0
    assert "task-00002" in capsys.readouterr().out


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-" + "api03-" + "x" * 30,
        "sk-" + "A" * 40,
        "ghp_" + "a1" * 18,
        "github_pat_" + "A_1" * 15,
        "glpat-" + "abcDEF123456789xyz_-",
        "xoxb-" + "1234567890-abcdef",
        "AKIA" + "ABCDEFGHIJKLMNOP",
        "AIza" + "B" * 35,
        "hf_" + "c" * 34,
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN RSA PRIVATE KEY-----\\nMIIEowIBAAKCAQEA\\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_each_known_secret_shape_is_replaced(secret: str) -> None:
    r = Redactor(environ={})
    out = r.text(f'{{"answer": "the key is {secret} ok"}}')
    assert secret not in out and "********" in out and r.count == 1
    assert out.startswith('{"answer": "the key is ') and out.endswith(' ok"}')  # JSON stays intact


def test_context_secrets_are_replaced_keeping_the_context() -> None:
    r = Redactor(environ={})
    assert r.text("Authorization: Bearer abcdefghijklmnop1234") == "Authorization: Bearer ********"
    assert r.text("git clone ht" + "tps://bob:hunter2pw@git.example/x") == (
        "git clone ht" + "tps://bob:********@git.example/x"
    )
    assert r.count == 2


def test_invalidated_score_is_shown_as_withheld(tmp_path: Path) -> None:
    # contract S2 / docs/results.md: a fatal task withholds the official value; the report says so
    # and shows the reference value over valid tasks instead of a number that looks official.
    tasks = synthetic_tasks(4, seed=1, error_rate=0.0)
    tasks[0]["state"] = "fatal"
    tasks[0]["attempts"][0]["issues"] = [
        {"severity": "fatal", "phase": "run", "code": "harness_failed", "message": "boom"}
    ]
    metrics = {
        "schema_version": "acx.metrics.v1",
        "evaluation_failed": True,
        "series": [
            {"series_id": "correct.avg@1", "metric_id": "correct", "role": "headline", "value": None,
             "reference_value": 0.75, "ci95": [0.2, 1.0]},
        ],
    }  # fmt: skip
    d = write_run(tmp_path / "r", tasks, metrics=metrics)
    text = write_report([d], tmp_path / "r.html").path.read_text(encoding="utf-8")
    assert "the official value is withheld" in text and "over valid tasks: 0.750" in text
    assert "harness_failed" in text and "[0.200, 1.000]" in text


def test_report_keeps_a_zero_one_interval_in_range(tmp_path: Path) -> None:
    # issue 24 item 14 (contract S1): an interval past the metric's range (metrics.json from an
    # older acx or another tool) is shown within it, in the headline and the series table.
    d = write_run(tmp_path / "r", synthetic_tasks(10, seed=4, error_rate=0.0))
    metrics = {
        "schema_version": "acx.metrics.v1",
        "series": [
            {
                "series_id": "score.avg@1",
                "metric_id": "score",
                "kind": "scalar",
                "reducer": "avg",
                "role": "headline",
                "value": 0.8,
                "ci95": [0.4984, 1.1016],
                "range": [0.0, 1.0],
            },
            {
                "series_id": "correct.avg@1",
                "metric_id": "correct",
                "kind": "binary_success",
                "value": 0.8,
                "ci95": [0.4984, 1.1016],
                "role": "auxiliary",
            },
        ],
    }
    (d / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    run = load_run(str(d))
    assert run.headline is not None and run.headline["interval"] == [0.4984, 1.0]
    assert main(["report", str(d)]) == 0
    html = (d / "report.html").read_text(encoding="utf-8")
    assert "1.102" not in html and "[0.498, 1.000]" in html
