// The headset page: WebXR in the Quest Browser -> the native app's JSON protocol over a WebSocket.
//
// Each XR frame sends one protocol frame line (the same JSON the native app sends: head and both
// controllers' grip-space poses in the local-floor space, xr-standard buttons and axes), stamped
// with the frame's predictedDisplayTime (the host maps that clock like the app's). Commands from the
// host arrive as text messages (haptic -> hapticActuators[0].pulse, colour -> the view tint, panel
// placement, "rejected": why the host refused lines of this page, shown under the status); camera
// panels and the HUD arrive as binary messages (panel byte + JPEG) and are drawn as textured quads
// with plain WebGL. A hidden or blurred page sends no frames (heartbeats only), so the host's
// staleness rule releases the clutch. The status says "ready" only once WebXR has offered an
// immersive session, else why not. No framework, nothing loaded from anywhere else.
'use strict';
(function () {
  const PROTOCOL = 1;
  const HUD = 3;
  const stats = {
    wsOpen: false, hellos: 0, framesSent: 0, framesSuppressed: 0, framesBackedUp: 0, heartbeats: 0, commands: 0,
    panelsReceived: [0, 0, 0, 0], panels: [0, 0, 0, 0], panelsSuperseded: 0, panelDecodeErrors: 0, haptics: [], tint: [0, 0, 0, 0],
    session: '', visibility: 'none', sending: false, lastError: '', xr: 'checking', rejected: null, closed: null,
  };
  const statusEl = document.getElementById('status');
  const linkEl = document.getElementById('link');
  const noticeEl = document.getElementById('notice');
  const canvas = document.getElementById('xr-canvas');

  let ws = null;
  let session = null;
  let sessionMode = '';
  let refSpace = null;
  let spaceName = 'local_floor';
  let frameNo = 0;
  let beat = 0;
  const inputs = { left: null, right: null };

  // ---- the link to the host ------------------------------------------------------------------
  function connect() {
    ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
    ws.binaryType = 'arraybuffer';
    ws.onopen = function () { stats.wsOpen = true; linkEl.textContent = 'host: connected'; sendHello(); };
    ws.onclose = function (ev) {
      stats.wsOpen = false;
      stats.closed = { code: ev.code, reason: ev.reason };
      linkEl.textContent = 'host: disconnected' + (ev.reason ? ' (' + ev.code + ' ' + ev.reason + ')' : '') +
        ', retrying';
      setTimeout(connect, 1000);
    };
    ws.onmessage = function (ev) {
      if (typeof ev.data === 'string') onCommand(ev.data); else onPanel(ev.data);
    };
  }

  function send(obj) {
    if (!ws || ws.readyState !== WebSocket.OPEN) return false;
    ws.send(JSON.stringify(obj));
    return true;
  }

  function profiles() {
    const out = {};
    for (const h of ['left', 'right']) if (inputs[h]) out[h] = inputs[h].profiles.slice(0, 4);
    return out;
  }

  function sendHello() {
    if (send({ hello: { app: 'piper-quest-web', client: 'web', protocol: PROTOCOL, mode: sessionMode || 'none',
      device: navigator.userAgent.slice(0, 200), controllers: profiles(), time: 'predictedDisplayTime' } })) {
      stats.hellos++;
    }
  }

  function pageState() {
    if (document.hidden) return 'HIDDEN';
    if (!session) return 'NO_SESSION';
    const v = session.visibilityState || 'visible';
    return v === 'visible' ? 'FOCUSED' : v.toUpperCase().replace('-', '_');
  }

  function canSend() { return pageState() === 'FOCUSED'; }

  setInterval(function () {
    if (send({ heartbeat: ++beat, state: pageState() })) stats.heartbeats++;
  }, 1000);

  document.addEventListener('visibilitychange', function () {
    stats.visibility = document.hidden ? 'hidden' : (session ? session.visibilityState || 'visible' : 'none');
    if (!canSend()) send({ heartbeat: ++beat, state: pageState() });
  });

  // ---- host -> page: commands ------------------------------------------------------------------
  function unit(v) { return Number.isFinite(v) ? Math.min(Math.max(v, 0), 1) : 0; }

  function onCommand(text) {
    let c;
    try { c = JSON.parse(text); } catch (e) { return; }
    if (!c || typeof c !== 'object') return;
    stats.commands++;
    if (c.cmd === 'haptic') haptic(c.hand, unit(c.amp), Math.min(Math.max(Number(c.ms) || 0, 0), 10000));
    else if (c.cmd === 'color') stats.tint = [unit(c.r), unit(c.g), unit(c.b), unit(c.a)];
    else if (c.cmd === 'panel' && c.cam >= 0 && c.cam <= HUD) {
      placements[c.cam] = { x: +c.x || 0, y: +c.y || 0, z: +c.z || 0, width: Math.min(Math.max(+c.width || 0.5, 0.1), 3),
        yaw: (+c.yaw || 0) * Math.PI / 180 };
    } else if (c.cmd === 'panels_front') placeFront();
    else if (c.cmd === 'rejected') rejected(c);
  }

  // the host refused lines of this page (rate-limited by the host): say which and why
  function rejected(c) {
    const n = Number(c.lines) || 0;
    stats.rejected = { by: String(c.by || 'host'), lines: n, total: Number(c.total) || n,
      reason: String(c.reason || ''), detail: String(c.detail || '').slice(0, 200), t: performance.now() };
    const r = stats.rejected;
    noticeEl.textContent = r.by + ' refused ' + n + (n === 1 ? ' line' : ' lines') + ' (' + r.total + ' in all): ' +
      r.reason + (r.detail ? ' (' + r.detail + ')' : '');
  }

  function haptic(hand, amp, ms) {
    const src = inputs[hand];
    const act = src && src.gamepad && src.gamepad.hapticActuators && src.gamepad.hapticActuators[0];
    stats.haptics.push({ hand: hand, amp: amp, ms: ms, played: !!act, t: performance.now() });
    if (stats.haptics.length > 200) stats.haptics.shift();
    if (act) Promise.resolve(act.pulse(amp, ms)).catch(function () {});
  }

  // ---- host -> page: camera panels and the HUD (latest only while one decodes) -----------------
  const latest = [null, null, null, null];
  const decoding = [false, false, false, false];
  const images = [null, null, null, null];
  const dirty = [false, false, false, false];

  function onPanel(buf) {
    const bytes = new Uint8Array(buf);
    if (bytes.length < 2 || bytes[0] > HUD) return;
    const p = bytes[0];
    stats.panelsReceived[p]++;
    if (latest[p]) stats.panelsSuperseded++;   // a newer one came while the last still decoded: drawn instead
    latest[p] = new Blob([bytes.subarray(1)], { type: 'image/jpeg' });
    if (!decoding[p]) decode(p);
  }

  function decode(p) {
    const blob = latest[p];
    latest[p] = null;
    if (!blob) return;
    decoding[p] = true;
    createImageBitmap(blob).then(function (bmp) {
      if (images[p] && images[p].close) images[p].close();
      images[p] = bmp;
      dirty[p] = true;
      stats.panels[p]++;
    }, function () { stats.panelDecodeErrors++; }).then(function () {
      decoding[p] = false;
      if (latest[p]) decode(p);
    });
  }

  // ---- where the panels are (metres, local-floor; the host may move them) --------------------
  const DEFAULTS = [
    { x: -0.55, y: 1.45, z: -1.0, width: 0.5, yaw: 0 }, { x: 0.0, y: 1.45, z: -1.0, width: 0.5, yaw: 0 },
    { x: 0.55, y: 1.45, z: -1.0, width: 0.5, yaw: 0 }, { x: 0.0, y: 1.07, z: -1.0, width: 0.8, yaw: 0 },
  ];
  let placements = DEFAULTS.map(function (d) { return Object.assign({}, d); });
  let headPose = null;

  function placeFront() {
    if (!headPose) { placements = DEFAULTS.map(function (d) { return Object.assign({}, d); }); return; }
    const p = headPose.transform.position;
    const q = headPose.transform.orientation;
    // the head's yaw: its forward (-z) projected on the floor
    const fx = -2 * (q.x * q.z + q.w * q.y);
    const fz = -(1 - 2 * (q.x * q.x + q.y * q.y));
    const yaw = Math.atan2(-fx, -fz);
    const c = Math.cos(yaw);
    const s = Math.sin(yaw);
    placements = DEFAULTS.map(function (d) {
      return { x: p.x + c * d.x + s * d.z, y: d.y, z: p.z - s * d.x + c * d.z, width: d.width, yaw: yaw };
    });
  }

  // ---- XR frames -> protocol frames ------------------------------------------------------------
  function num(v) { return Number.isFinite(v) ? v : 0; }

  function device(pose) {
    if (!pose) return { pos: [0, 0, 0], quat: [0, 0, 0, 1], valid: false, tracked: false };
    const p = pose.transform.position;
    const o = pose.transform.orientation;
    return { pos: [num(p.x), num(p.y), num(p.z)], quat: [num(o.x), num(o.y), num(o.z), num(o.w)], valid: true,
      tracked: !pose.emulatedPosition };
  }

  function hand(frame, name) {
    const src = inputs[name];
    const pose = src && src.gripSpace ? frame.getPose(src.gripSpace, refSpace) : null;
    const out = device(pose);
    const gp = src && src.gamepad;
    const b = function (i) { return gp && gp.buttons[i] ? gp.buttons[i] : null; };
    const axis = function (i) { return gp && gp.axes.length > i ? Math.min(Math.max(num(gp.axes[i]), -1), 1) : 0; };
    // xr-standard mapping: 0 trigger, 1 squeeze, 3 thumbstick press, 4 A/X, 5 B/Y; axes 2/3 the thumbstick.
    // The menu button belongs to the Quest Browser (it never reaches a page).
    out.trigger = b(0) ? unit(b(0).value) : 0;
    out.squeeze = b(1) ? unit(b(1).value) : 0;
    out.stick = [axis(2), axis(3)];
    out.stick_click = !!(b(3) && b(3).pressed);
    out.primary = !!(b(4) && b(4).pressed);
    out.secondary = !!(b(5) && b(5).pressed);
    out.menu = false;
    return out;
  }

  function onXRFrame(time, frame) {
    frame.session.requestAnimationFrame(onXRFrame);
    inputs.left = inputs.right = null;
    for (const src of frame.session.inputSources) {
      if (src.gamepad && (src.handedness === 'left' || src.handedness === 'right')) inputs[src.handedness] = src;
    }
    const pose = frame.getViewerPose(refSpace);
    headPose = pose || headPose;
    stats.sending = canSend();
    if (stats.sending && ws && ws.bufferedAmount > 65536) {
      stats.framesBackedUp++;   // the link is behind: drop this frame rather than queue stale poses
    } else if (stats.sending) {
      const mono = frame.predictedDisplayTime / 1000;
      if (send({ t: mono, mono: mono, frame: frameNo++, state: 'FOCUSED', space: spaceName, head: device(pose),
        left: hand(frame, 'left'), right: hand(frame, 'right') })) stats.framesSent++;
    } else {
      stats.framesSuppressed++;
    }
    render(frame, pose);
  }

  // ---- WebGL: textured quads for the panels, a full-view quad for the tint ---------------------
  let gl = null;
  let quadProg = null;
  let tintProg = null;
  let quadBuf = null;
  const textures = [null, null, null, null];

  function shader(type, src) {
    const s = gl.createShader(type);
    gl.shaderSource(s, src);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
    return s;
  }

  function program(vs, fs) {
    const p = gl.createProgram();
    gl.attachShader(p, shader(gl.VERTEX_SHADER, vs));
    gl.attachShader(p, shader(gl.FRAGMENT_SHADER, fs));
    gl.linkProgram(p);
    if (!gl.getProgramParameter(p, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(p));
    return p;
  }

  function initGL() {
    gl = canvas.getContext('webgl', { xrCompatible: true, alpha: true, antialias: false });
    if (!gl) throw new Error('no WebGL');
    quadProg = program(
      'attribute vec2 a; uniform mat4 mvp; varying vec2 uv;' +
      'void main() { uv = vec2(a.x + 0.5, 0.5 - a.y); gl_Position = mvp * vec4(a, 0.0, 1.0); }',
      'precision mediump float; varying vec2 uv; uniform sampler2D tex;' +
      'void main() { gl_FragColor = texture2D(tex, uv); }');
    tintProg = program('attribute vec2 a; void main() { gl_Position = vec4(a * 2.0, 0.0, 1.0); }',
      'precision mediump float; uniform vec4 color; void main() { gl_FragColor = color; }');
    quadBuf = gl.createBuffer();
    gl.bindBuffer(gl.ARRAY_BUFFER, quadBuf);
    gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-0.5, -0.5, 0.5, -0.5, 0.5, 0.5, -0.5, -0.5, 0.5, 0.5, -0.5, 0.5]),
      gl.STATIC_DRAW);
  }

  function upload(p) {
    if (!textures[p]) {
      textures[p] = gl.createTexture();
      gl.bindTexture(gl.TEXTURE_2D, textures[p]);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_S, gl.CLAMP_TO_EDGE);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_WRAP_T, gl.CLAMP_TO_EDGE);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.LINEAR);
      gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MAG_FILTER, gl.LINEAR);
    }
    gl.bindTexture(gl.TEXTURE_2D, textures[p]);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, gl.RGBA, gl.UNSIGNED_BYTE, images[p]);
    dirty[p] = false;
  }

  function mul(a, b) {   // column-major 4x4
    const o = new Float32Array(16);
    for (let c = 0; c < 4; c++) {
      for (let r = 0; r < 4; r++) {
        let s = 0;
        for (let k = 0; k < 4; k++) s += a[k * 4 + r] * b[c * 4 + k];
        o[c * 4 + r] = s;
      }
    }
    return o;
  }

  function model(pl, aspect) {   // translate * rotate about y * scale (width, width * aspect)
    const c = Math.cos(pl.yaw);
    const s = Math.sin(pl.yaw);
    const w = pl.width;
    const h = pl.width * aspect;
    return new Float32Array([c * w, 0, -s * w, 0, 0, h, 0, 0, s, 0, c, 0, pl.x, pl.y, pl.z, 1]);
  }

  function draw(prog) {
    gl.useProgram(prog);
    const loc = gl.getAttribLocation(prog, 'a');
    gl.bindBuffer(gl.ARRAY_BUFFER, quadBuf);
    gl.enableVertexAttribArray(loc);
    gl.vertexAttribPointer(loc, 2, gl.FLOAT, false, 0, 0);
    gl.drawArrays(gl.TRIANGLES, 0, 6);
  }

  function render(frame, pose) {
    const layer = frame.session.renderState.baseLayer;
    if (!gl || !layer) return;
    gl.bindFramebuffer(gl.FRAMEBUFFER, layer.framebuffer);
    if (sessionMode === 'immersive-ar') gl.clearColor(0, 0, 0, 0); else gl.clearColor(0.06, 0.06, 0.07, 1);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    for (let p = 0; p <= HUD; p++) if (dirty[p]) upload(p);
    if (!pose) return;
    gl.enable(gl.BLEND);
    // colour blended by alpha; the alpha adds up, so an opaque VR view stays opaque under the tint
    gl.blendFuncSeparate(gl.SRC_ALPHA, gl.ONE_MINUS_SRC_ALPHA, gl.ONE, gl.ONE_MINUS_SRC_ALPHA);
    for (const view of pose.views) {
      const vp = layer.getViewport(view);
      gl.viewport(vp.x, vp.y, vp.width, vp.height);
      const pv = mul(view.projectionMatrix, view.transform.inverse.matrix);
      for (let p = 0; p <= HUD; p++) {
        if (!images[p]) continue;
        gl.useProgram(quadProg);
        gl.uniformMatrix4fv(gl.getUniformLocation(quadProg, 'mvp'), false,
          mul(pv, model(placements[p], images[p].height / images[p].width)));
        gl.activeTexture(gl.TEXTURE0);
        gl.bindTexture(gl.TEXTURE_2D, textures[p]);
        gl.uniform1i(gl.getUniformLocation(quadProg, 'tex'), 0);
        draw(quadProg);
      }
      if (stats.tint[3] > 0) {   // the red view while recording
        gl.useProgram(tintProg);
        gl.uniform4fv(gl.getUniformLocation(tintProg, 'color'), stats.tint);
        draw(tintProg);
      }
    }
  }

  // ---- the session -----------------------------------------------------------------------------
  async function enter(mode) {
    if (session) return;
    try {
      const s = await navigator.xr.requestSession(mode, { optionalFeatures: ['local-floor'] });
      if (!gl) initGL();
      await s.updateRenderState({ baseLayer: new XRWebGLLayer(s, gl) });
      try {
        refSpace = await s.requestReferenceSpace('local-floor');
        spaceName = 'local_floor';
      } catch (e) {
        refSpace = await s.requestReferenceSpace('local');
        spaceName = 'local';
      }
      session = s;
      sessionMode = mode;
      stats.session = mode;
      stats.visibility = s.visibilityState || 'visible';
      s.addEventListener('visibilitychange', function () {
        stats.visibility = s.visibilityState;
        if (!canSend()) send({ heartbeat: ++beat, state: pageState() });
      });
      s.addEventListener('inputsourceschange', function () { setTimeout(sendHello, 0); });
      s.addEventListener('end', function () {
        session = null; sessionMode = ''; stats.session = ''; stats.visibility = 'none';
        statusEl.textContent = 'session ended';
        sendHello();
      });
      statusEl.textContent = 'in ' + mode;
      sendHello();
      s.requestAnimationFrame(onXRFrame);
    } catch (e) {
      stats.lastError = String(e);
      statusEl.textContent = 'could not start ' + mode + ': ' + e;
    }
  }

  function unavailable(why) {
    stats.xr = 'unavailable';
    statusEl.textContent = 'WebXR is unavailable: ' + why;
  }

  window.piperWeb = { stats: stats, enter: enter };
  connect();
  if (!navigator.xr) {
    unavailable(window.isSecureContext ? 'this browser has no WebXR (open this page in the Quest Browser)'
      : 'this page is not a secure context (open it at localhost through adb reverse, or over HTTPS)');
    return;
  }
  statusEl.textContent = 'checking WebXR';
  const modes = [['enter-ar', 'immersive-ar'], ['enter-vr', 'immersive-vr']];
  const errors = [];
  Promise.all(modes.map(function ([id, mode]) {
    const btn = document.getElementById(id);
    btn.addEventListener('click', function () { enter(mode); });
    return navigator.xr.isSessionSupported(mode).then(function (ok) { btn.disabled = !ok; return ok; },
      function (e) { btn.disabled = true; errors.push(mode + ': ' + e); return false; });
  })).then(function (supported) {
    if (supported.some(Boolean) || session) {
      stats.xr = 'ready';
      if (!session) statusEl.textContent = 'ready';   // else it says which session it is in
    } else {
      unavailable(errors.length ? errors.join('; ') : 'no immersive-ar or immersive-vr session is offered: no XR ' +
        'device here (open this page in the Quest Browser on the headset)');
    }
  });
})();
