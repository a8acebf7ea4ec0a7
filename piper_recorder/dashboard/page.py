"""The dashboard page: one self-contained HTML document (inline CSS and JS, no CDN, no network).

The script polls ``/api/state`` twice a second and renders it; it fetches camera thumbnails (the
server encodes at most ``thumb_hz`` per camera, so polling faster costs nothing) only while the page
is visible; the re-alignment view draws the live thumbnail and frame 0 of a chosen recorded episode
into one canvas, blended (``alpha``) or as their difference. The page carries the token of its own
URL (``?token=``) into every request it makes.
"""
from __future__ import annotations

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
.thumbs{display:flex;flex-wrap:wrap;gap:8px}.thumbs figure{margin:0}.thumbs img{width:320px;max-width:100%;background:#000;display:block;min-height:60px}
figcaption{font-size:12px;color:#8b96a5}.bar{position:relative;height:14px;background:#2a3441;border-radius:3px}
.bar i{position:absolute;top:-2px;width:3px;height:18px;background:#4fc3f7}.bar.near i{background:#e53935}
.bar.near{outline:1px solid #e53935}.joint td{vertical-align:middle;white-space:nowrap}.joint td.b{width:50%}
.ctl{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin-bottom:8px}select,input{background:#11151b;color:#e6e9ee;border:1px solid #2a3441}
#align-canvas{max-width:100%;background:#000;display:block}.kv{display:grid;grid-template-columns:auto 1fr;gap:2px 12px;font-size:13px}
.kv span:nth-child(odd){color:#8b96a5}.msg{font-size:12px;color:#c9d1dc;word-break:break-word}
"""

BODY = """
<header><h1>piper dashboard</h1><span id="health" class="warn">connecting</span>
<span id="saved" class="muted"></span>
<div id="rec"><span id="rec-dot"></span><span id="rec-label" class="muted">idle</span><span id="timer">--:--.-</span></div></header>
<main>
<section id="graph"><h2>Graph</h2><div id="nodes" class="chips"></div><table id="topics"></table></section>
<section id="recorders-box"><h2>Recorders</h2><div id="recorders"></div></section>
<section class="wide"><h2>Cameras</h2><div id="thumbs" class="thumbs"></div></section>
<section id="teleop-box"><h2>Teleop safety limits</h2><div id="limits" class="chips"></div><div id="teleop" class="kv" style="margin-top:8px"></div></section>
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
const TOKEN = new URLSearchParams(location.search).get('token');
function api(path, params) {
  const q = new URLSearchParams(params || {}); if (TOKEN) q.set('token', TOKEN);
  const s = q.toString(); return path + (s ? '?' + s : '');
}
const $ = id => document.getElementById(id);
const esc = s => String(s ?? '').replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
const num = (v, d = 1) => (v === null || v === undefined) ? '–' : (typeof v === 'number' ? v.toFixed(d) : esc(v));
function clock(s) {
  if (s === null || s === undefined) return '--:--.-';
  const m = Math.floor(s / 60), r = s - 60 * m; return String(m).padStart(2, '0') + ':' + r.toFixed(1).padStart(4, '0');
}
let STATE = null, CAMS = [];
const align = {live: null, ref: null, key: ''};
window.__dashboard = {align, polls: 0, thumbs: 0};

function renderHeader(s) {
  const h = $('health'), ok = s.graph.healthy;
  h.textContent = ok ? 'graph healthy' : 'graph degraded'; h.className = ok ? 'good' : 'bad';
  h.title = ok ? '' : [...s.graph.nodes.filter(n => !n.present).map(n => 'missing node ' + n.name),
    ...s.graph.topics.filter(t => t.required && !t.ok).map(t => 'silent ' + t.topic),
    ...(s.graph.delivery || []).filter(d => !d.ok).map(d => d.consumer + ': ' + d.why)].join('\n');
  $('rec-dot').className = s.episode.recording ? 'on' : '';
  $('rec-label').textContent = s.episode.recording ? 'recording episode ' + s.episode.episode_index : 'idle';
  $('timer').textContent = s.episode.recording ? clock(s.episode.elapsed_s) : '--:--.-';
  $('timer').dataset.elapsed = s.episode.elapsed_s ?? ''; $('timer').dataset.at = s.t;
  $('saved').textContent = 'saved this session: ' + s.episode.saved_this_session;
}
function renderGraph(g) {
  $('nodes').innerHTML = g.nodes.map(n => `<span class="chip ${n.extra ? 'extra' : (n.present ? 'ok' : 'missing')}" data-node="${esc(n.name)}" data-present="${n.present}">${esc(n.name)}</span>`).join('');
  $('topics').innerHTML = '<tr><th class="l">topic</th><th>Hz</th><th>last (s)</th></tr>' + g.topics.map(t =>
    `<tr data-topic="${esc(t.topic)}" class="${t.required && !t.ok ? 'problem' : ''}"><td class="l">${esc(t.topic)}${t.required ? '' : ' <span class="muted">(when driven)</span>'}</td><td>${num(t.rate_hz)}</td><td>${num(t.age_s, 2)}</td></tr>`).join('');
}
function renderRecorders(rs) {
  $('recorders').innerHTML = rs.map(r => {
    const rows = r.counters.map(c => `<tr data-counter="${esc(c.key)}" data-total="${c.total}" class="${c.problem && c.total ? 'problem' : ''}"><td class="l">${esc(c.label)}</td><td>${num(c.total, c.key === 'frame_offset_max_ms' ? 1 : 0)}</td><td class="l msg">${c.detail ? esc(Object.entries(c.detail).map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(' · ')) : ''}</td></tr>`).join('');
    return `<div class="rec" id="rec-${esc(r.name)}" data-state="${esc(r.state)}" data-rows="${r.rows ?? ''}"><h2>${esc(r.name)} <span class="chip ${r.state === 'recording' ? 'bad' : (r.stale ? 'missing' : 'ok')}">${esc(r.stale ? r.state + ' (stale)' : r.state)}</span></h2>
      <div class="kv"><span>episode</span><span>${num(r.episode_index, 0)}${r.task ? ' · ' + esc(r.task) : ''}</span><span>elapsed</span><span>${clock(r.elapsed_s)}</span>
      <span>rows</span><span class="rows">${num(r.rows, 0)}</span><span>saved this session</span><span>${r.saved_this_session}</span>
      <span>writer backlog</span><span>${num(r.writer_backlog, 0)}</span>${r.waiting_for.length ? `<span>waiting for</span><span>${esc(r.waiting_for.join(', '))}</span>` : ''}
      <span>message</span><span class="msg">${esc(r.message)}</span></div>
      <table class="counters">${rows}</table></div>`;
  }).join('');
}
function renderCameras(cams) {
  const names = cams.map(c => c.name);
  if (names.join() !== CAMS.join()) {
    CAMS = names;
    $('thumbs').innerHTML = cams.map(c => `<figure><img class="thumb" data-camera="${esc(c.name)}" alt="${esc(c.name)}"><figcaption id="cap-${esc(c.name)}"></figcaption></figure>`).join('');
    const sel = $('align-camera'), cur = sel.value;
    sel.innerHTML = names.map(n => `<option>${esc(n)}</option>`).join(''); if (names.includes(cur)) sel.value = cur;
  }
  for (const c of cams) { const cap = $('cap-' + c.name); if (cap) cap.textContent = `${c.name} · ${num(c.rate_hz)} Hz`; }
}
function renderTeleop(t) {
  $('limits').innerHTML = t.limits.map(l => `<div class="limit ${l.active ? 'active' : ''}" id="limit-${esc(l.name)}" data-active="${l.active}" data-hits="${l.hits}">${esc(l.name.replace('_', ' '))}<b>${l.hits}</b><span class="muted">hits this session</span></div>`).join('');
  if (!t.present) { $('teleop').innerHTML = '<span>teleop</span><span>no status</span>'; return; }
  const c = t.counters || {}, a = t.last_alarm;
  $('teleop').innerHTML = `<span>clutch</span><span id="clutch">${t.engaged ? 'engaged' : 'idle'}${t.stale ? ' (stale)' : ''}</span>` +
    Object.entries(c).map(([k, v]) => `<span>${esc(k.replace(/_/g, ' '))}</span><span>${esc(v)}</span>`).join('') +
    (t.last_release ? `<span>last release</span><span class="msg" id="last-release">${esc(t.last_release)}</span>` : '') +
    (a ? `<span>last alarm</span><span class="msg">${esc(a.recorder + ' ' + a.action + ': ' + a.outcome + ' ' + (a.message || ''))}</span>` : '');
}
function renderJoints(j) {
  const row = (name, p, lo, hi, near, d) => `<tr class="joint" data-joint="${esc(name)}" data-near="${near}"><td class="l">${esc(name)}</td><td>${num(p, d)}</td><td class="b"><div class="bar ${near ? 'near' : ''}"><i style="left:calc(${Math.max(0, Math.min(1, (p - lo) / (hi - lo))) * 100}% - 1px)"></i></div></td><td class="muted">${num(lo, 2)} … ${num(hi, 2)}</td></tr>`;
  let html = j.joints.map(x => row(x.name, x.position, x.min, x.max, x.near_limit, 3)).join('');
  if (j.gripper) html += row('gripper (m)', j.gripper.position, j.gripper.min, j.gripper.max, false, 4);
  $('joints').innerHTML = html || '<tr><td class="l muted">no /arm/joint_states</td></tr>';
}
function renderHeadset(h) {
  if (!h.present) { $('headset').innerHTML = '<span>link</span><span>no /diagnostics from quest_bridge</span>'; return; }
  const rej = Object.entries(h.rejected).map(([k, v]) => `${k} ${v}`).join(' · ');
  $('headset').innerHTML = `<span>state</span><span id="headset-state" class="${h.level === 0 && !h.stale ? '' : 'bad'}">${esc(h.state)} · ${esc(h.message)}${h.stale ? ' (stale)' : ''}</span>` +
    `<span>input rate</span><span id="headset-rate">${num(h.rate_hz)} Hz</span><span>clock offset</span><span>${num(h.clock_offset_ms === null ? null : h.clock_offset_ms / 1000, 3)} s (drift since connect ${num(h.clock_drift_ms, 3)} ms)</span>` +
    `<span>arrival delay</span><span>${num(h.arrival_delay_ms, 3)} ms</span><span>rejected lines</span><span id="headset-rejected">${h.rejected_total}${rej ? ' (' + esc(rej) + ')' : ''}</span>` +
    (h.last_rejection ? `<span>last rejection</span><span class="msg">${esc(h.last_rejection)}</span>` : '') + `<span>connects</span><span>${esc(h.connects)}</span>`;
}
function renderEvents(es) {
  $('events').innerHTML = '<tr><th class="l">recorder</th><th class="l">event</th><th>episode</th><th>rows</th><th class="l">reason</th><th>age (s)</th></tr>' +
    es.map(e => `<tr><td class="l">${esc(e.recorder)}</td><td class="l">${esc(e.event)}</td><td>${num(e.episode_index, 0)}</td><td>${num(e.rows, 0)}</td><td class="l msg">${esc(e.reason || '')}</td><td>${num(e.age_s)}</td></tr>`).join('');
}
async function pollState() {
  try {
    const r = await fetch(api('/api/state'), {cache: 'no-store'});
    if (!r.ok) throw new Error('state: HTTP ' + r.status);
    const s = await r.json(); STATE = s; window.__dashboard.polls++;
    renderHeader(s); renderGraph(s.graph); renderRecorders(s.recorders); renderCameras(s.cameras);
    renderTeleop(s.teleop); renderJoints(s.joints); renderHeadset(s.headset); renderEvents(s.events);
  } catch (e) { const h = $('health'); h.textContent = 'dashboard unreachable'; h.className = 'bad'; }
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
    const r = await fetch(api('/api/roots'), {cache: 'no-store'}); ROOTS = (await r.json()).roots;
  } catch (e) { ROOTS = []; }
  const sel = $('align-root'), cur = sel.value;
  sel.innerHTML = ROOTS.map(x => `<option value="${x.index}">${esc(x.root)}</option>`).join('');
  if (cur && ROOTS.some(x => String(x.index) === cur)) sel.value = cur;
  fillEpisodes();
}
function fillEpisodes() {
  const root = ROOTS.find(x => String(x.index) === $('align-root').value), sel = $('align-episode'), cur = sel.value;
  const eps = root ? root.episodes : [];
  sel.innerHTML = eps.map(e => `<option value="${e.episode_index}">${e.episode_index} (${e.length ?? '?'} rows)</option>`).join('');
  if (eps.some(e => String(e.episode_index) === cur)) sel.value = cur;
  $('align-note').textContent = !ROOTS.length ? 'no roots configured (parameter roots)' : (root && root.error ? root.error : (eps.length ? '' : 'no saved episode in this root yet'));
}
async function loadReference() {
  const root = $('align-root').value, ep = $('align-episode').value, cam = $('align-camera').value;
  const entry = ROOTS.find(x => String(x.index) === root);
  if (root === '' || ep === '' || !cam || !entry || !entry.cameras.includes(cam)) { align.ref = null; align.key = ''; drawAlign(); return; }
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
"""


def render_page() -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>piper dashboard</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><link rel="icon" href="data:,"><style>{CSS}</style></head>'
            f'<body>{BODY}<script>{JS}</script></body></html>')
