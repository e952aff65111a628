"""One self-contained HTML file: overview and charts rendered here, the task table and task pages
rendered in the browser from embedded JSON (inline CSS and JS, no URL of any kind).

Data strings never reach the page as markup: the server-side parts are escaped here, the
client-side parts are inserted with ``textContent``. ``://`` is written escaped (``&#58;//`` in
text, ``:\\/\\/`` in JSON) so the file contains no URL at all, even when a task's output quotes one.
"""

from __future__ import annotations

import html
import json
import time
from importlib import resources
from typing import Any

import msgspec

from acx.report._compare import compare_runs
from acx.report._model import ROW_FIELDS, RunData, headline_interval
from acx.report._redact import Redactor
from acx.report._svg import bar_chart, histogram

__all__ = ["render_report"]

_ENCODE = msgspec.json.Encoder(enc_hook=str).encode


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _asset(name: str) -> str:
    return resources.files("acx.report").joinpath("assets", name).read_text(encoding="utf-8")


def _json_block(obj: Any, element_id: str, redactor: Redactor) -> str:
    text = _ENCODE(obj).decode("utf-8")
    text = redactor.text(text)
    # `<` can close the script element; `://` would put a URL in the file.
    text = text.replace("<", "\\u003c").replace("://", ":\\/\\/")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _fmt(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else str(v).lower()
    if isinstance(v, int | float):
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    return str(v)


def _seconds(v: Any) -> str:
    if not isinstance(v, int | float):
        return "—"
    if v < 120:
        return f"{v:.1f} s"
    return f"{v / 60:.1f} min" if v < 7200 else f"{v / 3600:.1f} h"


def _plan_text(p: dict[str, Any]) -> str:
    if not p.get("distinct"):
        return "not recorded"
    head = f"{p['distinct']} distinct plan(s) over {p['attempts']} attempt(s); most used: "
    parts = [
        f"{p.get('environment')}" + (f" ({p['image']})" if p.get("image") else ""),
        f"evaluation {p.get('evaluation_environment_mode')}",
        f"network run {p.get('run_network')} / evaluation {p.get('evaluation_network')}",
        f"budgets run {_seconds(p.get('run_timeout_seconds'))}"
        f" / evaluation {_seconds(p.get('evaluation_timeout_seconds'))}",
    ]
    if p.get("applied_recipes"):
        parts.append("recipes " + ", ".join(map(str, p["applied_recipes"])))
    return head + "; ".join(parts)


def _usage_item(key: str, value: float) -> str:
    if key == "cost_usd":
        return f"cost ${value:,.4f}"
    if key == "unpaid_cost_usd":
        return f"cost not paid (cached calls) ${value:,.4f}"
    return f"{key.replace('_', ' ')} {value:,.0f}"


def _overview_html(i: int, run: RunData) -> str:
    o = run.overview
    usage = o.get("usage") or {}
    usage_txt = ", ".join(_usage_item(k, v) for k, v in usage.items())
    states: dict[str, int] = {}
    for r in run.rows:
        states[r[1]] = states.get(r[1], 0) + 1
    progress = run.progress or {}
    rows = [
        ("status", f"{o.get('status')}{' (in progress)' if run.live else ''}"),
        ("request", o.get("request_name")),
        ("run id", o.get("run_id")),
        ("directory", run.path),
        (
            "model",
            (o.get("model") or "—")
            + "".join(f"; {role}: {mid}" for role, mid in sorted((o.get("roles") or {}).items())),
        ),
        ("benchmark", o.get("benchmark")),
        ("harness", o.get("harness")),
        ("environment", o.get("environment")),
        ("attempts", f"k={o.get('k')}, strategy={o.get('strategy')}, max retries={o.get('max_retries')}"),
        ("started / finished", f"{o.get('started_at') or '—'} / {o.get('finished_at') or '—'}"),
        ("plans", _plan_text(o.get("plans") or {})),
        ("duration", _seconds(o.get("elapsed_seconds"))),
        (
            "tasks",
            f"{len(run.rows)} shown"
            + (f" of {progress.get('total')}" if progress.get("total") else "")
            + " — "
            + ", ".join(f"{k} {v}" for k, v in sorted(states.items())),
        ),
        ("usage", usage_txt or "not recorded"),
    ]
    if progress.get("running"):
        phases = ", ".join(f"{k} {v}" for k, v in sorted((progress.get("current_phase_counts") or {}).items()))
        active = progress.get("active_tasks") or []
        rows.append(
            (
                "running now",
                f"{progress.get('running')} task(s)"
                + (f" — phases: {phases}" if phases else "")
                + (f" — {', '.join(map(str, active[:20]))}{' …' if len(active) > 20 else ''}" if active else ""),
            )
        )
    if o.get("error"):
        rows.append(("error", o.get("error")))
    if o.get("reused_from"):
        rows.append(("reused from", json.dumps(o.get("reused_from"))))
    table = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows)
    head = run.headline
    if head:
        interval = head.get("interval")
        value = head.get("value")
        iv = (
            f'<span class="interval">95 % interval [{interval[0]:.3f}, {interval[1]:.3f}]</span>'
            f'<span class="muted"> ({_e(head.get("interval_source"))})</span>'
            if interval
            else '<span class="muted">no interval (fewer than 2 scored tasks)</span>'
        )
        ref = head.get("reference_value")
        note = (
            f'<p class="warn">the official value is withheld (a fatal task invalidates the score); '
            f"over valid tasks: {_fmt(ref)}</p>"
            if value is None and ref is not None
            else ""
        )
        headline = (
            f'<div class="headline" data-testid="headline"><span class="series">{_e(head.get("series_id"))}</span> '
            f'<span class="value">{_fmt(value)}</span> {iv}{note}</div>'
        )
    else:
        headline = '<div class="headline muted">no score yet</div>'
    series_rows = ""
    for s in (run.metrics or {}).get("series") or []:
        c = s.get("counts") or {}
        given = headline_interval(s)
        interval = f"[{given[0]:.3f}, {given[1]:.3f}]" if given else "—"
        series_rows += (
            f"<tr><td>{_e(s.get('series_id'))}{' (headline)' if s.get('role') == 'headline' else ''}</td>"
            f"<td class=num>{_fmt(s.get('value'))}</td>"
            f"<td class=num>{interval}</td>"
            f"<td class=num>{_e(c.get('evaluated', '—'))}</td><td class=num>{_e(c.get('unavailable', '—'))}</td>"
            f"<td class=num>{_e(c.get('error', '—'))}</td></tr>"
        )
    series = (
        "<table class=grid><thead><tr><th>series</th><th>value</th><th>95 % interval</th><th>evaluated</th>"
        f"<th>unavailable</th><th>errors</th></tr></thead><tbody>{series_rows}</tbody></table>"
        if series_rows
        else '<p class="muted">metrics.json not written yet</p>'
    )
    request = (
        "<details><summary>request (as recorded in run_info.json: secrets as references or ********)</summary>"
        f"<pre>{_e(json.dumps(o.get('request') or {}, indent=2, default=str))}</pre></details>"
    )
    ch = run.charts
    charts = [
        bar_chart(
            [(c, v, f"({n} scored)") for c, v, n in ch["score_by_category"]],
            title=f"{ch.get('primary') or 'score'} by category (mean per task)",
            maximum=max(1.0, max((v for _, v, _ in ch["score_by_category"]), default=1.0)),
            fmt=lambda v: f"{v:.3f}",
        ),
        bar_chart([(k, float(v), "") for k, v in ch["outcomes"]], title="attempt outcomes", fmt=lambda v: f"{v:.0f}"),
        histogram(ch["durations"], title="task duration", unit="s"),
        histogram(ch["tokens"], title="tokens per task", unit="tokens"),
        bar_chart(
            [(k, float(v), "tasks") for k, v in ch["errors"]],
            title="errors by code",
            fmt=lambda v: f"{v:.0f}",
            color="#c0504d",
        ),
    ]
    return (
        f'<section class="page" id="page-run-{i}" data-route="run/{i}" hidden>'
        f"<h2>{_e(run.name)}</h2>{headline}"
        f'<p><a href="#tasks/{i}" class="button" data-testid="open-tasks">all {len(run.rows)} tasks →</a></p>'
        f'<div class="cols"><table class="kv">{table}</table><div>{series}{request}</div></div>'
        f'<div class="charts">{"".join(charts)}</div></section>'
    )


def _task_link(run_index: int, row_of: dict[str, int], task_id: str) -> str:
    idx = row_of.get(task_id)
    if idx is None:
        return _e(task_id)
    return f'<a href="#task/{run_index}/{idx}">{_e(task_id)}</a>'


def _id_list(ids: list[str], run_index: int, row_of: dict[str, int], limit: int = 200) -> str:
    if not ids:
        return '<span class="muted">none</span>'
    shown = ", ".join(_task_link(run_index, row_of, t) for t in ids[:limit])
    more = f" … and {len(ids) - limit} more (acx results compare --format json)" if len(ids) > limit else ""
    return shown + more


def _compare_html(b_index: int, cmp: dict[str, Any], rows_a: dict[str, int], rows_b: dict[str, int]) -> str:
    def ci(m: dict[str, Any]) -> str:
        return f"[{m['ci95'][0]:+.3f}, {m['ci95'][1]:+.3f}]" if m.get("ci95") else "—"

    body = ""
    for m in cmp["metrics"]:
        body += (
            f'<tr data-metric="{_e(m["metric"])}"><td>{_e(m["metric"])}</td><td class=num>{m["n"]}</td>'
            f"<td class=num>{_fmt(m['mean_a'])}</td><td class=num>{_fmt(m['mean_b'])}</td>"
            f"<td class=num>{'—' if m['diff'] is None else format(m['diff'], '+.3f')}</td><td class=num>{ci(m)}</td>"
            f"<td class=num>{len(m['flipped_up'])}</td><td class=num>{len(m['flipped_down'])}</td></tr>"
        )
    flips = ""
    for m in cmp["metrics"]:
        flips += (
            f"<h4>{_e(m['metric'])}</h4><p><b>better in B</b> ({len(m['flipped_up'])}): "
            f"{_id_list(m['flipped_up'], b_index, rows_b)}</p><p><b>worse in B</b> ({len(m['flipped_down'])}): "
            f"{_id_list(m['flipped_down'], b_index, rows_b)}</p>"
        )
    a, b = cmp["a"], cmp["b"]
    return (
        f'<section class="page" id="page-compare-{b_index}" data-route="compare/{b_index}" hidden>'
        f"<h2>Comparison</h2><p>A = {_e(a['request_name'])} / {_e(a['run_id'])} ({a['tasks']} tasks), "
        f"B = {_e(b['request_name'])} / {_e(b['run_id'])} ({b['tasks']} tasks); "
        f'<span data-testid="matched">{cmp["matched"]}</span> matched tasks.</p>'
        "<p class=muted>Per metric: per-task values (mean over attempts) paired over matched tasks; "
        "difference B − A with a paired 95 % interval (mean ± t(0.975, n−1)·s/√n).</p>"
        "<table class=grid data-testid=compare-table><thead><tr><th>metric</th><th>pairs</th><th>A</th><th>B</th>"
        "<th>B − A</th><th>95 % interval</th><th>up</th><th>down</th></tr></thead>"
        f"<tbody>{body}</tbody></table><h3>Tasks that changed</h3>{flips}"
        f"<h3>Only in A ({len(cmp['only_a'])})</h3><p>{_id_list(cmp['only_a'], 0, rows_a)}</p>"
        f"<h3>Only in B ({len(cmp['only_b'])})</h3><p>{_id_list(cmp['only_b'], b_index, rows_b)}</p></section>"
    )


def render_report(
    runs: list[RunData],
    *,
    live: dict[str, Any] | None = None,
    redactor: Redactor | None = None,
) -> tuple[str, int]:
    """The report document and the number of secret-looking strings it replaced."""
    red = redactor or Redactor()
    row_maps = [{r[0]: idx for idx, r in enumerate(run.rows)} for run in runs]
    nav = "".join(
        f'<a href="#run/{i}" data-run="{i}">{_e(run.name)}</a> <a href="#tasks/{i}" class="sub">tasks</a>'
        for i, run in enumerate(runs)
    )
    nav += "".join(
        f'<a href="#compare/{j}" class="cmp">compare A ↔ {_e(runs[j].name)}</a>' for j in range(1, len(runs))
    )
    pages = [_overview_html(i, run) for i, run in enumerate(runs)]
    for j in range(1, len(runs)):
        pages.append(_compare_html(j, compare_runs(runs[0], runs[j]), row_maps[0], row_maps[j]))
    pages.append('<section class="page" id="page-tasks" data-route="tasks" hidden></section>')
    pages.append('<section class="page" id="page-task" data-route="task" hidden></section>')
    index = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fields": list(ROW_FIELDS),
        "live": live,
        "runs": [
            {
                "name": run.name,
                "run_id": run.run_id,
                "status": run.info.get("status"),
                "primary": run.primary,
                "live": run.live,
                "rows": run.rows,
                "plans": run.plans,
                "provenance": run.provenance,
            }
            for run in runs
        ],
    }
    body_html = red.text("".join(pages)).replace("://", "&#58;//")
    nav_html = red.text(nav).replace("://", "&#58;//")
    data = _json_block(index, "acx-index", red) + "".join(
        _json_block(run.details, f"acx-details-{i}", red) for i, run in enumerate(runs)
    )
    title = "acx report — " + ", ".join(run.name for run in runs)
    notice = (
        f'<p class="warn" data-testid="redacted">{red.count} string(s) that look like secrets were replaced '
        "by ******** in this report</p>"
        if red.count
        else ""
    )
    doc = (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(red.text(title)).replace('://', '&#58;//')}</title><style>{_asset('report.css')}</style></head>"
        f'<body><header><h1>acx report</h1><nav id="nav">{nav_html}</nav>'
        f'<div id="live-banner" hidden></div></header>{notice}<main>{body_html}</main>{data}'
        f"<script>{_asset('report.js')}</script></body></html>"
    )
    return doc, red.count
