"""The HTML shell shared by both reports: styles, a tiny canvas plotting library and the time cursor.

Everything is inline (no CDN, no network), so a report opens anywhere, including air-gapped robots.
Data arrives as one JSON blob; each ``<canvas data-plot=...>`` is drawn from it by ``PLOT_JS``.
"""

from __future__ import annotations

import html
import json
from typing import Any

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d232b}
header{background:#1d232b;color:#fff;padding:12px 20px}header h1{margin:0;font-size:20px}
main{padding:16px 20px}section{background:#fff;border:1px solid #dde1e6;border-radius:6px;margin:0 0 16px;padding:12px 16px}
h2{font-size:17px;margin:4px 0 10px}h3{font-size:15px;margin:10px 0 6px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #dde1e6;padding:3px 8px;text-align:right}
th{background:#eef1f4}td.l,th.l{text-align:left}.warn{color:#b3261e;font-weight:600}.ok{color:#1b7f3b}
.videos{display:flex;flex-wrap:wrap;gap:8px}.videos figure{margin:0}.videos video{width:320px;background:#000}
figcaption{font-size:12px;color:#555}.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(440px,1fr));gap:8px}
canvas{width:100%;height:170px;border:1px solid #eef1f4;cursor:crosshair}.ctl{margin:8px 0}.ctl input{width:60%}
.thumbs{display:flex;flex-wrap:wrap;gap:4px}.thumbs img{width:160px}code{background:#eef1f4;padding:0 3px}
tr.bad td{background:#fdecea}tr.bad td:first-child{color:#b3261e;font-weight:600;border-left:3px solid #b3261e}
.badge{display:inline-block;border-radius:3px;padding:0 5px;margin:1px 0;font-size:12px;white-space:nowrap}
.badge.bad{background:#fdecea;color:#b3261e;border:1px solid #f3b7b2}a:has(.badge){text-decoration:none}.note{color:#555;font-size:13px;margin:6px 0}
table.counters{margin-top:4px}table.counters td.l:last-child{color:#444}
"""

PLOT_JS = r"""
const DATA = JSON.parse(document.getElementById('report-data').textContent);
const COLORS = ['#1f77b4','#d62728','#2ca02c','#ff7f0e','#9467bd','#8c564b','#e377c2','#17becf'];
function drawPlot(cv, spec, cursor) {
  const dpr = window.devicePixelRatio || 1, w = cv.clientWidth, h = cv.clientHeight;
  if (cv.width !== w * dpr) { cv.width = w * dpr; cv.height = h * dpr; }
  const g = cv.getContext('2d'); g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.fillStyle = '#fff'; g.fillRect(0, 0, w, h);
  const L = 48, R = 8, T = 18, B = 18, t = spec.t;
  let lo = Infinity, hi = -Infinity;
  for (const s of spec.series) for (const v of s.y) { if (v < lo) lo = v; if (v > hi) hi = v; }
  if (!isFinite(lo)) { lo = 0; hi = 1; } if (hi - lo < 1e-9) { hi += 0.5; lo -= 0.5; }
  const t0 = t.length ? t[0] : 0, t1 = t.length > 1 ? t[t.length - 1] : t0 + 1;
  const X = v => L + (v - t0) / (t1 - t0 || 1) * (w - L - R), Y = v => T + (hi - v) / (hi - lo) * (h - T - B);
  g.strokeStyle = '#ccc'; g.strokeRect(L, T, w - L - R, h - T - B);
  g.fillStyle = '#333'; g.font = '11px sans-serif';
  g.fillText(spec.title + (spec.unit ? ' [' + spec.unit + ']' : ''), L, 12);
  g.fillText(hi.toPrecision(3), 2, T + 8); g.fillText(lo.toPrecision(3), 2, h - B);
  g.fillText(t0.toFixed(1) + ' s', L, h - 4); g.fillText(t1.toFixed(1) + ' s', w - R - 36, h - 4);
  spec.series.forEach((s, i) => {
    g.strokeStyle = COLORS[i % COLORS.length]; g.setLineDash(s.dash ? [5, 3] : []); g.lineWidth = 1.3; g.beginPath();
    for (let k = 0; k < s.y.length; k++) { const x = X(t[k]), y = Y(s.y[k]); k ? g.lineTo(x, y) : g.moveTo(x, y); }
    g.stroke(); g.fillStyle = COLORS[i % COLORS.length]; g.fillText(s.name, w - R - 110, T + 12 + 12 * i);
  });
  g.setLineDash([]);
  if (cursor !== null && cursor >= t0 && cursor <= t1) {
    g.strokeStyle = '#000'; g.beginPath(); g.moveTo(X(cursor), T); g.lineTo(X(cursor), h - B); g.stroke();
  }
  cv.dataset.drawn = String(spec.series.reduce((n, s) => n + s.y.length, 0));
  cv.onclick = ev => { const r = cv.getBoundingClientRect(); seek(cv.dataset.group, t0 + (ev.clientX - r.left - L) / (w - L - R) * (t1 - t0)); };
}
function groupOf(name) { return document.querySelectorAll('[data-group="' + name + '"]'); }
function redraw(group, cursor) {
  groupOf(group).forEach(el => { if (el.tagName === 'CANVAS') drawPlot(el, DATA.plots[el.dataset.plot], cursor); });
  const out = document.getElementById('cursor-' + group); if (out) out.textContent = cursor === null ? '' : cursor.toFixed(3) + ' s';
  const sl = document.getElementById('slider-' + group); if (sl && cursor !== null) sl.value = cursor;
}
function seek(group, t) {
  groupOf(group).forEach(el => { if (el.tagName === 'VIDEO') { try { el.currentTime = Math.max(0, t); } catch (e) {} } });
  redraw(group, t);
}
document.querySelectorAll('video[data-group]').forEach(v => {
  const tick = () => { redraw(v.dataset.group, v.currentTime); if (!v.paused) requestAnimationFrame(tick); };
  v.addEventListener('play', () => { groupOf(v.dataset.group).forEach(o => { if (o !== v && o.tagName === 'VIDEO' && o.paused) o.play().catch(() => {}); }); tick(); });
  v.addEventListener('pause', () => groupOf(v.dataset.group).forEach(o => { if (o !== v && o.tagName === 'VIDEO') o.pause(); }));
  v.addEventListener('seeked', () => redraw(v.dataset.group, v.currentTime));
});
document.querySelectorAll('input[type=range][data-slider]').forEach(s => s.addEventListener('input', () => seek(s.dataset.slider, parseFloat(s.value))));
function drawAll() { const gs = new Set(); document.querySelectorAll('canvas[data-group]').forEach(c => gs.add(c.dataset.group)); gs.forEach(g => redraw(g, 0)); }
window.addEventListener('resize', drawAll); drawAll();
"""


def esc(value: Any) -> str:
    """``value`` as HTML-escaped text."""
    return html.escape(str(value))


def table(headers: list[str], rows: list[list[Any]], left: int = 1) -> str:
    """An HTML table; the first ``left`` columns are left-aligned (names), the rest numbers."""

    def cell(tag: str, i: int, v: Any) -> str:
        cls = ' class="l"' if i < left else ""
        return f"<{tag}{cls}>{v}</{tag}>"

    head = "".join(cell("th", i, esc(h)) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def plot_canvas(plot_id: str, group: str) -> str:
    """The canvas a plot of ``plot_id`` draws in, linked to the time slider of ``group``."""
    return f'<canvas data-plot="{esc(plot_id)}" data-group="{esc(group)}"></canvas>'


def time_controls(group: str, duration: float) -> str:
    """The time slider and cursor readout of ``group``, over ``duration`` seconds."""
    return (
        f'<div class="ctl">time <input type="range" id="slider-{esc(group)}" data-slider="{esc(group)}" '
        f'min="0" max="{duration:.3f}" step="0.001" value="0"> <span id="cursor-{esc(group)}"></span></div>'
    )


def page(title: str, body: str, data: dict[str, Any]) -> str:
    """The whole self-contained HTML page, with ``data`` embedded as JSON for its script."""
    blob = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><header><h1>{esc(title)}</h1></header><main>{body}</main>"
        f'<script type="application/json" id="report-data">{blob}</script><script>{PLOT_JS}</script>'
        "</body></html>"
    )
