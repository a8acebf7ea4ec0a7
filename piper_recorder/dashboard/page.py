"""The dashboard page: an HTML document, its stylesheet and its script, all served by the dashboard.

No CDN, no network. The script and the stylesheet are separate resources (``/dashboard.js``,
``/dashboard.css``) so that the Content-Security-Policy can forbid every inline script, event handler and
style attribute: a status field that smuggles markup into the page still cannot run anything. The script
builds markup only through its ``H`...``` template, which escapes every interpolated value, and shows
numbers only as numbers.

The script polls ``/api/state`` twice a second and renders each section on its own (one that cannot be
drawn leaves the others current); it fetches thumbnails only while the page is visible; the re-alignment
view blends (``alpha``) or differences the live thumbnail and frame 0 of a recorded episode. The page
carries the token of its own URL (``?token=``) into every request it makes.
"""

from __future__ import annotations

from piper_recorder.names import DIAGNOSTICS, JOINT_STATES

CSS = """
*{box-sizing:border-box}body{font:14px/1.35 system-ui,sans-serif;margin:0;background:#11151b;color:#e6e9ee}
header{display:flex;align-items:center;gap:18px;background:#1b222c;padding:10px 18px;position:sticky;top:0;z-index:2}
header h1{margin:0;font-size:18px;font-weight:600}#health{padding:3px 10px;border-radius:12px;font-weight:600}
.good{background:#1f5f35;color:#d9ffe4}.bad{background:#8a1f1f;color:#ffe1e1}.warn{background:#7a5a12;color:#fff3d1}
.muted{color:#8b96a5}#rec{display:flex;align-items:center;gap:10px;margin-left:auto;font-size:16px}
#rec-dot{width:16px;height:16px;border-radius:50%;background:#3a4452}#rec-dot.on{background:#e53935;box-shadow:0 0 10px #e53935}
#timer{font:600 28px/1 ui-monospace,monospace;min-width:6.5ch;text-align:right}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:12px;padding:12px}
section{background:#1b222c;border:1px solid #2a3441;border-radius:8px;padding:10px 12px;min-width:0}
section.wide{grid-column:1/-1}h2{font-size:15px;margin:0 0 8px;color:#b9c4d3;font-weight:600}
table{border-collapse:collapse;width:100%;font-size:13px}td,th{padding:2px 6px;border-bottom:1px solid #2a3441;text-align:right}
td.l,th.l{text-align:left}th{color:#8b96a5;font-weight:500}tr.problem td{background:#4a1b1b;color:#ffd7d7}
.chips{display:flex;flex-wrap:wrap;gap:6px}.chip{padding:2px 8px;border-radius:10px;background:#2a3441;font-size:13px}
.chip.ok{background:#1f5f35}.chip.missing{background:#8a1f1f}.chip.extra{background:#2a3441;color:#8b96a5}
.limit{padding:6px 10px;border-radius:6px;background:#2a3441;min-width:120px}.limit b{display:block;font-size:18px}
.limit.active{background:#e53935;color:#fff;box-shadow:0 0 12px #e53935}
tr.arm-head th{color:#e6e9ee;font-weight:600;padding-top:8px}
.thumbs{display:flex;flex-wrap:wrap;gap:8px}.thumbs figure{margin:0}.thumbs img{width:320px;max-width:100%;background:#000;display:block;min-height:60px}
figcaption{font-size:12px;color:#8b96a5}.bar{position:relative;height:14px;background:#2a3441;border-radius:3px}
.bar i{position:absolute;top:-2px;width:3px;height:18px;background:#4fc3f7}.bar.near i{background:#e53935}
.bar.near{outline:1px solid #e53935}.joint td{vertical-align:middle;white-space:nowrap}.joint td.b{width:50%}
.ctl{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:8px}select,input{background:#11151b;color:#e6e9ee;border:1px solid #2a3441}
#align-canvas{max-width:100%;background:#000;display:block}.kv{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;font-size:13px}
.kv span:nth-child(odd){color:#8b96a5}#teleop{margin-top:8px}.msg{font-size:12px;color:#c9d1dc;word-break:break-word}
"""

BODY = """
<header><h1>piper dashboard</h1><span id="health" class="warn">connecting</span>
<span id="saved" class="muted"></span>
<div id="rec"><span id="rec-dot"></span><span id="rec-label" class="muted">idle</span><span id="timer">--:--.-</span></div></header>
<main>
<section id="graph"><h2>Graph</h2><div id="nodes" class="chips"></div><table id="topics"></table></section>
<section id="recorders-box"><h2>Recorders</h2><div id="recorders"></div></section>
<section class="wide"><h2>Cameras</h2><div id="thumbs" class="thumbs"></div></section>
<section id="teleop-box"><h2>Teleop safety limits</h2><div id="limits" class="chips"></div><div id="teleop" class="kv"></div></section>
<section id="arm-box"><h2>Arm joints</h2><table id="joints"></table></section>
<section id="headset-box"><h2>Headset link</h2><div id="headset" class="kv"></div></section>
<section class="wide" id="align-box"><h2>Camera re-alignment</h2>
<div class="ctl"><label>root <select id="align-root"></select></label><label>episode <select id="align-episode"></select></label>
<label>camera <select id="align-camera"></select></label><label>mode <select id="align-mode"><option value="blend">blend</option>
<option value="difference">difference</option></select></label><label>reference <input id="align-alpha" type="range" min="0" max="1" step="0.05" value="0.5"></label>
<span id="align-note" class="muted"></span></div><canvas id="align-canvas" width="320" height="240"></canvas></section>
<section class="wide"><h2>Episode events</h2><table id="events"></table></section>
</main>
"""

JS = r"""
// piper dashboard: polls /api/state twice a second and renders it (see piper_recorder/dashboard/page.py).
// Served as a file under a Content-Security-Policy without 'unsafe-inline': markup is built only with the
// H`...` template below, which escapes every interpolated value (a status field is data, never markup).
'use strict';
const TOKEN = new URLSearchParams(location.search).get('token');
function api(path, params) {
  const q = new URLSearchParams(params || {}); if (TOKEN) q.set('token', TOKEN);
  const s = q.toString(); return path + (s ? '?' + s : '');
}
const $ = id => document.getElementById(id);
const esc = s => String(s ?? '').replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
// Markup made by H itself; anything else interpolated into H is text and is escaped.
class Raw { constructor(s) { this.s = s; } }
const frag = v => v instanceof Raw ? v.s : (Array.isArray(v) ? v.map(frag).join('') : esc(v));
function H(strings, ...vals) {
  let out = strings[0];
  vals.forEach((v, i) => { out += frag(v) + strings[i + 1]; });
  return new Raw(out);
}
const setHTML = (id, markup) => { $(id).innerHTML = markup.s; };
const isNum = v => typeof v === 'number' && Number.isFinite(v);
const num = (v, d = 1) => isNum(v) ? v.toFixed(d) : '–';
const list = v => Array.isArray(v) ? v : [];
function clock(s) {
  if (!isNum(s)) return '--:--.-';
  const m = Math.floor(s / 60), r = s - 60 * m; return String(m).padStart(2, '0') + ':' + r.toFixed(1).padStart(4, '0');
}
let STATE = null, CAMS = [];
const align = {live: null, ref: null, key: ''};
window.__dashboard = {align, polls: 0, thumbs: 0, renderErrors: 0};

function renderHeader(s) {
  const h = $('health'), ok = s.graph.healthy === true;
  h.textContent = ok ? 'graph healthy' : 'graph degraded'; h.className = ok ? 'good' : 'bad';
  h.title = ok ? '' : [...list(s.graph.nodes).filter(n => !n.present).map(n => 'missing node ' + n.name),
    ...list(s.graph.topics).filter(t => t.required && !t.ok).map(t => 'silent ' + t.topic),
    ...list(s.graph.delivery).filter(d => !d.ok).map(d => d.consumer + ': ' + d.why)].join('\n');
  $('rec-dot').className = s.episode.recording ? 'on' : '';
  $('rec-label').textContent = s.episode.recording ? 'recording episode ' + num(s.episode.episode_index, 0) : 'idle';
  $('timer').textContent = s.episode.recording ? clock(s.episode.elapsed_s) : '--:--.-';
  $('timer').dataset.elapsed = isNum(s.episode.elapsed_s) ? String(s.episode.elapsed_s) : ''; $('timer').dataset.at = String(s.t);
  $('saved').textContent = 'saved this session: ' + num(s.episode.saved_this_session, 0);
}
function renderGraph(g) {
  setHTML('nodes', H`${list(g.nodes).map(n => H`<span class="chip ${n.extra ? 'extra' : (n.present ? 'ok' : 'missing')}" data-node="${n.name}" data-present="${n.present === true}">${n.name}</span>`)}`);
  setHTML('topics', H`<tr><th class="l">topic</th><th>Hz</th><th>last (s)</th></tr>${list(g.topics).map(t =>
    H`<tr data-topic="${t.topic}" class="${t.required && !t.ok ? 'problem' : ''}"><td class="l">${t.topic}${t.required ? '' : H` <span class="muted">(when driven)</span>`}</td><td>${num(t.rate_hz)}</td><td>${num(t.age_s, 2)}</td></tr>`)}`);
}
function detailText(d) {
  return Object.entries(d).map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(' · ');
}
function recorderHTML(r) {
  const rows = list(r.counters).map(c => H`<tr data-counter="${c.key}" data-total="${isNum(c.total) ? c.total : ''}" class="${c.problem && c.total ? 'problem' : ''}"><td class="l">${c.label}</td><td>${num(c.total, c.key === 'frame_offset_max_ms' ? 1 : 0)}</td><td class="l msg">${c.detail && typeof c.detail === 'object' ? detailText(c.detail) : ''}</td></tr>`);
  const waiting = list(r.waiting_for);
  return H`<div class="rec" id="rec-${r.name}" data-state="${r.state}" data-rows="${isNum(r.rows) ? r.rows : ''}"><h2>${r.name} <span class="chip ${r.state === 'recording' ? 'bad' : (r.stale ? 'missing' : 'ok')}">${r.stale ? r.state + ' (stale)' : r.state}</span></h2>
      <div class="kv"><span>episode</span><span>${num(r.episode_index, 0)}${r.task ? ' · ' + r.task : ''}</span><span>elapsed</span><span>${clock(r.elapsed_s)}</span>
      <span>rows</span><span class="rows">${num(r.rows, 0)}</span><span>saved this session</span><span>${num(r.saved_this_session, 0)}</span>
      <span>writer backlog</span><span>${num(r.writer_backlog, 0)}</span>${r.falling_behind ? H`<span>falling behind</span><span class="msg bad">writer ${num(r.writer_lag_s, 1)} s behind real time</span>` : ''}${waiting.length ? H`<span>waiting for</span><span>${waiting.join(', ')}</span>` : ''}
      <span>message</span><span class="msg">${r.message}</span></div>
      <table class="counters">${rows}</table></div>`;
}
function renderRecorders(rs) {
  // one recorder that cannot be drawn is shown as such; the others still are
  setHTML('recorders', H`${list(rs).map(r => {
    try { return recorderHTML(r); } catch (e) {
      window.__dashboard.renderErrors++;
      return H`<div class="rec" data-state="unrenderable"><h2>${r && r.name}</h2><span class="msg">cannot show this status</span></div>`;
    }
  })}`);
}
function renderCameras(cams) {
  cams = list(cams);
  const names = cams.map(c => String(c.name));
  if (names.join() !== CAMS.join()) {
    CAMS = names;
    setHTML('thumbs', H`${names.map(n => H`<figure><img class="thumb" data-camera="${n}" alt="${n}"><figcaption id="cap-${n}"></figcaption></figure>`)}`);
    const sel = $('align-camera'), cur = sel.value;
    sel.innerHTML = H`${names.map(n => H`<option>${n}</option>`)}`.s; if (names.includes(cur)) sel.value = cur;
  }
  for (const c of cams) { const cap = $('cap-' + c.name); if (cap) cap.textContent = `${c.name} · ${num(c.rate_hz)} Hz`; }
}
function renderTeleop(t) {
  setHTML('limits', H`${list(t.limits).map(l => H`<div class="limit ${l.active ? 'active' : ''}" id="limit-${l.name}" data-active="${l.active === true}" data-hits="${num(l.hits, 0)}">${String(l.name).replace('_', ' ')}<b>${num(l.hits, 0)}</b><span class="muted">hits this session</span></div>`)}`);
  if (!t.present) { setHTML('teleop', H`<span>teleop</span><span>no status</span>`); return; }
  const c = t.counters || {}, a = t.last_alarm;
  setHTML('teleop', H`<span>clutch</span><span id="clutch">${t.engaged ? 'engaged' : 'idle'}${t.stale ? ' (stale)' : ''}</span>${
    Object.entries(c).map(([k, v]) => H`<span>${k.replace(/_/g, ' ')}</span><span>${num(v, 0)}</span>`)}${
    t.last_release ? H`<span>last release</span><span class="msg" id="last-release">${t.last_release}</span>` : ''}${
    a ? H`<span>last alarm</span><span class="msg">${a.recorder + ' ' + a.action + ': ' + a.outcome + ' ' + (a.message || '')}</span>` : ''}`);
}
function jointRows(j) {
  const row = (name, p, lo, hi, near, d) => H`<tr class="joint" data-joint="${name}" data-near="${near === true}"><td class="l">${name}</td><td>${num(p, d)}</td><td class="b"><div class="bar ${near ? 'near' : ''}"><i data-frac="${Math.max(0, Math.min(1, (p - lo) / (hi - lo)))}"></i></div></td><td class="muted">${num(lo, 2)} … ${num(hi, 2)}</td></tr>`;
  const rows = list(j.joints).map(x => row(x.name, x.position, x.min, x.max, x.near_limit, 3));
  if (j.gripper) rows.push(row('gripper (m)', j.gripper.position, j.gripper.min, j.gripper.max, false, 4));
  return rows;
}
function placeBars() {
  // positions through the CSSOM: the policy allows no style attribute in markup
  for (const i of $('joints').querySelectorAll('.bar i')) {
    const f = parseFloat(i.dataset.frac); i.style.left = `calc(${(Number.isFinite(f) ? f : 0) * 100}% - 1px)`;
  }
}
function renderJoints(j) {
  const rows = jointRows(j);
  setHTML('joints', rows.length ? H`${rows}` : H`<tr><td class="l muted">no @JOINT_STATES@</td></tr>`);
  placeBars();
}
function renderArms(arms) {
  // two arms: each arm's head row (feedback age and rate, commands, clutch), then its joints
  setHTML('joints', H`${list(arms).map(a => {
    const rows = jointRows(a), c = a.commanded || {}, k = a.clutch;
    const clutch = k ? (k.engaged === true ? 'engaged' : k.engaged === false ? 'idle' : '–') + (k.stale ? ' (stale)' : '') : 'no status';
    return H`<tr class="arm-head" data-arm="${a.name}"><th class="l" colspan="4">${a.name} <span class="muted">· feedback ${isNum(a.age_s) ? num(a.age_s, 2) + ' s ago' : 'none'} (${num(a.feedback_rate_hz)} Hz) · commanded pose ${isNum(c.age_s) ? num(c.rate_hz) + ' Hz, ' + num(c.age_s, 2) + ' s ago' : 'none'} · clutch <span class="clutch">${clutch}</span>${
      k && k.last_release ? H` · last release <span class="msg last-release">${k.last_release}</span>` : ''}</span></th></tr>${
      rows.length ? rows : H`<tr><td class="l muted">no ${a.feedback_topic}</td></tr>`}`;
  })}`);
  placeBars();
}
function renderHeadset(h) {
  if (!h.present) { setHTML('headset', H`<span>link</span><span>no @DIAGNOSTICS@ from quest_bridge</span>`); return; }
  const rej = Object.entries(h.rejected || {}).map(([k, v]) => `${k} ${num(v, 0)}`).join(' · ');
  setHTML('headset', H`<span>state</span><span id="headset-state" class="${h.level === 0 && !h.stale ? '' : 'bad'}">${h.state} · ${h.message}${h.stale ? ' (stale)' : ''}</span>${''
    }<span>input rate</span><span id="headset-rate">${num(h.rate_hz)} Hz</span><span>clock offset</span><span>${num(isNum(h.clock_offset_ms) ? h.clock_offset_ms / 1000 : null, 3)} s (drift since connect ${num(h.clock_drift_ms, 3)} ms)</span>${''
    }<span>arrival delay</span><span>${num(h.arrival_delay_ms, 3)} ms</span><span>rejected lines</span><span id="headset-rejected">${num(h.rejected_total, 0)}${rej ? ' (' + rej + ')' : ''}</span>${
    h.last_rejection ? H`<span>last rejection</span><span class="msg">${h.last_rejection}</span>` : ''}<span>connects</span><span>${h.connects}</span>`);
}
function renderEvents(es) {
  setHTML('events', H`<tr><th class="l">recorder</th><th class="l">event</th><th>episode</th><th>rows</th><th class="l">outcome</th><th class="l">verdict</th><th class="l">reason</th><th>age (s)</th></tr>${
    list(es).map(e => H`<tr><td class="l">${e.recorder}</td><td class="l">${e.event}</td><td>${num(e.episode_index, 0)}</td><td>${num(e.rows, 0)}</td><td class="l">${e.outcome || ''}</td><td class="l ${e.verdict === 'bad' ? 'bad' : e.verdict === 'warn' ? 'warn' : ''}" title="${list(e.verdict_reasons).join('\n')}">${e.verdict || ''}</td><td class="l msg">${[e.reason || '', ...list(e.verdict_reasons)].filter(x => x).join('; ')}</td><td>${num(e.age_s)}</td></tr>`)}`);
}
const SECTIONS = [[s => renderHeader(s)], [s => renderGraph(s.graph)], [s => renderRecorders(s.recorders)],
  [s => renderCameras(s.cameras)], [s => renderTeleop(s.teleop)],
  [s => Array.isArray(s.arms) ? renderArms(s.arms) : renderJoints(s.joints)],
  [s => renderHeadset(s.headset)], [s => renderEvents(s.events)]];
async function pollState() {
  let s;
  try {
    const r = await fetch(api('/api/state'), {cache: 'no-store'});
    if (!r.ok) throw new Error('state: HTTP ' + r.status);
    s = await r.json(); STATE = s; window.__dashboard.polls++;
  } catch (e) { const h = $('health'); h.textContent = 'dashboard unreachable'; h.className = 'bad'; return; }
  // each section on its own: one that cannot be drawn leaves the others current
  for (const [render] of SECTIONS) {
    try { render(s); } catch (e) { window.__dashboard.renderErrors++; }
  }
}
async function loadImage(url) {
  const r = await fetch(url, {cache: 'no-store'});
  if (r.status !== 200) return null;
  const blob = await r.blob(), img = new Image();
  img.src = URL.createObjectURL(blob); await img.decode();
  img.dataset.stamp = r.headers.get('X-Frame-Stamp') || '';
  return img;
}
async function pollThumbs() {
  if (document.hidden) return;
  for (const img of document.querySelectorAll('img.thumb')) {
    const cam = img.dataset.camera;
    try {
      const got = await loadImage(api('/api/thumb', {camera: cam}));
      if (!got || got.dataset.stamp === img.dataset.stamp) { if (got) URL.revokeObjectURL(got.src); continue; }
      const old = img.src; img.src = got.src; img.dataset.stamp = got.dataset.stamp; window.__dashboard.thumbs++;
      if (old.startsWith('blob:') && (!align.live || align.live.src !== old)) URL.revokeObjectURL(old);
      if (cam === $('align-camera').value) { const prev = align.live; align.live = got; drawAlign();
        if (prev && prev.src !== img.src) URL.revokeObjectURL(prev.src); }
    } catch (e) { /* the next poll retries */ }
  }
}
function drawAlign() {
  const cv = $('align-canvas'), g = cv.getContext('2d'), a = parseFloat($('align-alpha').value);
  const base = align.ref || align.live; if (!base) return;
  cv.width = base.naturalWidth; cv.height = base.naturalHeight;
  g.globalCompositeOperation = 'source-over'; g.globalAlpha = 1; g.fillStyle = '#000'; g.fillRect(0, 0, cv.width, cv.height);
  if (align.live) g.drawImage(align.live, 0, 0, cv.width, cv.height);
  if (align.ref) {
    if ($('align-mode').value === 'difference') { g.globalCompositeOperation = 'difference'; g.globalAlpha = 1; }
    else g.globalAlpha = align.live ? a : 1;
    g.drawImage(align.ref, 0, 0, cv.width, cv.height);
  }
  g.globalCompositeOperation = 'source-over'; g.globalAlpha = 1;
  cv.dataset.drawn = String((parseInt(cv.dataset.drawn || '0')) + 1);
  cv.dataset.live = align.live ? align.live.dataset.stamp : ''; cv.dataset.ref = align.key;
}
let ROOTS = [];
async function loadRoots() {
  try {
    const r = await fetch(api('/api/roots'), {cache: 'no-store'}); ROOTS = list((await r.json()).roots);
  } catch (e) { ROOTS = []; }
  const sel = $('align-root'), cur = sel.value;
  sel.innerHTML = H`${ROOTS.map(x => H`<option value="${x.index}">${x.root}</option>`)}`.s;
  if (cur && ROOTS.some(x => String(x.index) === cur)) sel.value = cur;
  fillEpisodes();
}
function fillEpisodes() {
  const root = ROOTS.find(x => String(x.index) === $('align-root').value), sel = $('align-episode'), cur = sel.value;
  const eps = root ? list(root.episodes) : [];
  sel.innerHTML = H`${eps.map(e => H`<option value="${e.episode_index}">${e.episode_index} (${e.length ?? '?'} rows)</option>`)}`.s;
  if (eps.some(e => String(e.episode_index) === cur)) sel.value = cur;
  $('align-note').textContent = !ROOTS.length ? 'no roots configured (parameter roots)' : (root && root.error ? root.error : (eps.length ? '' : 'no saved episode in this root yet'));
}
async function loadReference() {
  const root = $('align-root').value, ep = $('align-episode').value, cam = $('align-camera').value;
  const entry = ROOTS.find(x => String(x.index) === root);
  if (root === '' || ep === '' || !cam || !entry || !list(entry.cameras).includes(cam)) { align.ref = null; align.key = ''; drawAlign(); return; }
  const key = `${root}/${ep}/${cam}`; if (key === align.key && align.ref) { drawAlign(); return; }
  const img = await loadImage(api('/api/reference', {root, episode: ep, camera: cam}));
  if (align.ref) URL.revokeObjectURL(align.ref.src);
  align.ref = img; align.key = img ? key : ''; $('align-note').textContent = img ? '' : 'no video for this episode and camera';
  drawAlign();
}
$('align-root').addEventListener('change', () => { fillEpisodes(); loadReference(); });
$('align-episode').addEventListener('change', loadReference);
$('align-camera').addEventListener('change', () => { align.live = null; loadReference(); });
$('align-alpha').addEventListener('input', drawAlign); $('align-mode').addEventListener('change', drawAlign);
$('align-root').addEventListener('focus', loadRoots);
pollState().then(() => { loadRoots(); pollThumbs(); });
setInterval(pollState, 500); setInterval(pollThumbs, 500); setInterval(loadRoots, 10000);
""".replace("@JOINT_STATES@", JOINT_STATES).replace("@DIAGNOSTICS@", DIAGNOSTICS)  # the topics' names.py names


SCRIPT_PATH = "/dashboard.js"
STYLE_PATH = "/dashboard.css"


def render_page() -> str:
    """The document: markup only, the script and stylesheet by URL (no inline code for the CSP to allow)."""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>piper dashboard</title>'
        f'<meta name="viewport" content="width=device-width,initial-scale=1"><link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{STYLE_PATH}"></head>'
        f'<body>{BODY}<script src="{SCRIPT_PATH}"></script></body></html>'
    )


def static_file(path: str) -> tuple[bytes, str] | None:
    """(body, content type) of the page's script or stylesheet at ``path``; None for any other path."""
    if path == SCRIPT_PATH:
        return JS.encode(), "text/javascript; charset=utf-8"
    if path == STYLE_PATH:
        return CSS.encode(), "text/css; charset=utf-8"
    return None
