"""The dashboard's stylesheet (class names are part of the DOM contract tests read).

Text colours come from ``--distrain-*`` properties set for the light theme and, under
JupyterLab's dark theme (``body[data-jp-theme-light="false"]``), for the dark one: each
reads at least 4.5:1 against the backgrounds it is shown on.
"""

from __future__ import annotations

__all__ = ["CSS", "style_tag"]

CSS = """
:root { --distrain-ok: #137333; --distrain-error: #b3261e; --distrain-warn: #9a4d00;
  --distrain-info: #1967d2; --distrain-muted: #5f6368; --distrain-track: #e8eaed;
  --distrain-bar: #8ab4f8; }
body[data-jp-theme-light="false"] { --distrain-ok: #81c995; --distrain-error: #ffb4a9;
  --distrain-warn: #fdd663; --distrain-info: #8ab4f8; --distrain-muted: #bdc1c6;
  --distrain-track: #3c4043; --distrain-bar: #1967d2; }
.distrain-dashboard { font-size: 12px; gap: 6px; }
.distrain-header { display: flex; flex-wrap: wrap; gap: 4px 14px; align-items: baseline; }
.distrain-job-name { font-weight: 600; font-size: 13px; }
.distrain-badge { padding: 1px 7px; border-radius: 9px; color: #fff; font-weight: 600;
  background: #5f6368; }
.distrain-badge.distrain-state-running { background: #1a73e8; }
.distrain-badge.distrain-state-restarting { background: #9a4d00; }
.distrain-badge.distrain-state-hung { background: #b06000; }
.distrain-badge.distrain-state-paused { background: #7c3aed; }
[data-field="rate"][data-stalled] { color: var(--distrain-warn); font-weight: 600; }
.distrain-badge.distrain-state-succeeded { background: #188038; }
.distrain-badge.distrain-state-failed { background: #c5221f; }
.distrain-badge.distrain-state-raised { background: #a0306e; }
.distrain-badge.distrain-state-stopped, .distrain-badge.distrain-state-exited {
  background: #5f6368; }
.distrain-dashboard .widget-html-content { line-height: 1.4; }
.distrain-note { color: var(--distrain-muted); }
.distrain-phases { color: var(--distrain-muted); }
.distrain-phase[data-state="current"] { color: var(--distrain-info); font-weight: 600; }
.distrain-phase[data-state="pending"] { font-style: italic; }
.distrain-phase[data-state="unfinished"] { color: var(--distrain-error); }
.distrain-waiting { color: var(--distrain-warn); }
.distrain-reason { color: var(--distrain-error); }
.distrain-dashboard .jupyter-widget-Collapse-header { color: var(--jp-ui-font-color1); }
.distrain-reason, .distrain-diagnosis, .distrain-note, .distrain-warning {
  overflow-wrap: anywhere; }
.distrain-actions { gap: 4px; }
/* a disabled action (Stop once clicked) looks it: faded, no pointer (as in the jobs panel) */
.distrain-actions button.jupyter-button:disabled { cursor: not-allowed; opacity: 0.45; }
.distrain-cause-traceback pre { margin: 2px 0 4px 0; max-height: 220px; overflow: auto;
  font-size: 11.5px; }
table.distrain-ranks { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.distrain-ranks th { text-align: left; font-weight: 600; border-bottom: 1px solid #ccc; }
table.distrain-ranks th, table.distrain-ranks td { padding: 2px 10px 2px 4px; }
/* a reason is one long path or message: it wraps inside the cell, never past the output */
table.distrain-ranks td[data-col="exit"] { overflow-wrap: anywhere; min-width: 12em; }
tr.distrain-failed { background: rgba(197, 34, 31, 0.12); }
tr.distrain-first-failure td[data-col="rank"]::before { content: "\\25B6  "; color: #c5221f; }
tr.distrain-straggler, tr.distrain-outlier { background: rgba(227, 116, 0, 0.15); }
.distrain-progress { position: relative; height: 16px; margin: 3px 0; max-width: 520px;
  background: var(--distrain-track); border-radius: 3px; overflow: hidden; }
.distrain-progress-bar { position: absolute; inset: 0 auto 0 0; background: var(--distrain-bar); }
.distrain-progress-text { position: relative; padding-left: 6px; line-height: 16px;
  font-variant-numeric: tabular-nums; }
.distrain-more { color: var(--distrain-muted); }
.distrain-logs { font-family: var(--jp-code-font-family, monospace); font-size: 11.5px;
  max-height: 260px; overflow: auto; display: flex; flex-direction: column-reverse;
  white-space: pre-wrap; word-break: break-all; border: 1px solid #e0e0e0; padding: 2px 4px; }
.distrain-logs[data-view="divergence"] { flex-direction: column; }
.distrain-log-rank { color: var(--distrain-info); }
.distrain-log-line[data-ranks="job"] .distrain-log-rank { color: var(--distrain-muted); }
.distrain-log-diverge { background: rgba(197, 34, 31, 0.15); }
.distrain-comms table { border-collapse: collapse; }
.distrain-comms td { padding: 1px 10px 1px 0; vertical-align: top; }
.distrain-diagnosis { font-weight: 600; margin: 2px 0 4px 0; }
.distrain-raw { font-family: var(--jp-code-font-family, monospace); font-size: 11px;
  max-height: 240px; overflow: auto; white-space: pre; }
"""


def style_tag() -> str:
    """The stylesheet as a ``<style>`` element."""
    return f"<style>{CSS}</style>"
