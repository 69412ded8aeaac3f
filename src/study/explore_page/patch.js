// The explore page's clean/corrupted section (`xgrad explore --corrupt-text`, docs/explore.md):
// patching each head's z from the clean run into the corrupted one, the exact effect beside AtP's
// estimate per layer and head, the two against each other, and the logit lens of both runs. Shown
// only when the data has a `patching` part; a head picked here is picked in the maps above.
const PATCH_CELL = 26;
const patchPanels = [['patch-exact', 'exact'], ['patch-atp', 'atp']];

function signedColour(v, max) {  // blue (−) white (0) red (+)
  const t = max > 0 ? Math.max(-1, Math.min(1, v / max)) : 0;
  const far = t >= 0 ? [178, 24, 43] : [33, 102, 172], f = Math.abs(t);
  const c = [255, 255, 255].map((x, i) => Math.round(x + (far[i] - x) * f));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
function patchLargest() {
  const p = data.patching;
  return Math.max(1e-12, ...p.exact.map(Math.abs), ...p.atp.map(Math.abs));
}
const selectedHead = () => state.site * data.patching.heads + state.head;
function headName(k) {
  const p = data.patching;
  return `layer ${Math.floor(k / p.heads)} head ${k % p.heads}: exact ${exact(p.exact[k])}, AtP ${exact(p.atp[k])}`;
}
function patchReadout(k) {
  document.getElementById('patch-readout').textContent = k >= 0 ? headName(k) : '';
}

// Exact and AtP as layer × head grids on one colour scale; the head chosen above is outlined.
const PATCH_LEFT = 28, PATCH_TOP = 18;
function drawPatchGrids() {
  const p = data.patching, max = patchLargest();
  for (const [id, key] of patchPanels) {
    const canvas = document.getElementById(id);
    const ctx = sized(canvas, PATCH_LEFT + p.heads * PATCH_CELL + 2, PATCH_TOP + p.layers * PATCH_CELL + 2);
    ctx.textAlign = 'center';
    for (let h = 0; h < p.heads; h++) ctx.fillText(String(h), PATCH_LEFT + (h + 0.5) * PATCH_CELL, 9);
    ctx.textAlign = 'right';
    for (let l = 0; l < p.layers; l++) ctx.fillText(String(l), PATCH_LEFT - 4, PATCH_TOP + (l + 0.5) * PATCH_CELL + 4);
    for (let k = 0; k < p.layers * p.heads; k++) {
      ctx.fillStyle = signedColour(p[key][k], max);
      ctx.fillRect(PATCH_LEFT + (k % p.heads) * PATCH_CELL, PATCH_TOP + Math.floor(k / p.heads) * PATCH_CELL, PATCH_CELL, PATCH_CELL);
    }
    const k = selectedHead();
    ctx.strokeStyle = '#e0701b', ctx.lineWidth = 2;
    ctx.strokeRect(PATCH_LEFT + (k % p.heads) * PATCH_CELL, PATCH_TOP + Math.floor(k / p.heads) * PATCH_CELL, PATCH_CELL, PATCH_CELL);
  }
  document.getElementById('patch-scale').textContent = `colour: ±${short(max)}, the largest |value| of the two`;
}
function gridHead(canvas, event) {
  const p = data.patching, r = canvas.getBoundingClientRect();
  const h = Math.floor((event.clientX - r.left - PATCH_LEFT) / PATCH_CELL), l = Math.floor((event.clientY - r.top - PATCH_TOP) / PATCH_CELL);
  return h >= 0 && l >= 0 && h < p.heads && l < p.layers ? l * p.heads + h : -1;
}

// AtP against exact, one point per head, the diagonal where they agree.
const SCATTER = { size: 300, pad: 36 };
function scatterPoint(k) {
  const p = data.patching, max = patchLargest(), span = SCATTER.size - 2 * SCATTER.pad;
  return { x: SCATTER.pad + ((p.exact[k] / max + 1) / 2) * span, y: SCATTER.size - SCATTER.pad - ((p.atp[k] / max + 1) / 2) * span };
}
function drawScatter() {
  const p = data.patching, ctx = sized(document.getElementById('patch-scatter'), SCATTER.size, SCATTER.size);
  const lo = SCATTER.pad, hi = SCATTER.size - SCATTER.pad;
  ctx.strokeStyle = '#bbb', ctx.lineWidth = 1;
  ctx.strokeRect(lo, lo, hi - lo, hi - lo);
  ctx.beginPath(); ctx.moveTo(lo, hi); ctx.lineTo(hi, lo); ctx.stroke();
  ctx.beginPath(); ctx.moveTo((lo + hi) / 2, lo); ctx.lineTo((lo + hi) / 2, hi); ctx.moveTo(lo, (lo + hi) / 2); ctx.lineTo(hi, (lo + hi) / 2);
  ctx.setLineDash([3, 3]); ctx.stroke(); ctx.setLineDash([]);
  ctx.fillStyle = '#333', ctx.textAlign = 'center';
  ctx.fillText('exact effect', (lo + hi) / 2, SCATTER.size - 8);
  ctx.save(); ctx.translate(12, (lo + hi) / 2); ctx.rotate(-Math.PI / 2); ctx.fillText('AtP estimate', 0, 0); ctx.restore();
  const max = short(patchLargest());
  ctx.fillText(`-${max}`, lo, hi + 14), ctx.fillText(max, hi, hi + 14);
  for (let k = 0; k < p.layers * p.heads; k++) {
    const at = scatterPoint(k), chosen = k === selectedHead();
    ctx.fillStyle = chosen ? '#e0701b' : '#2b5ea8';
    ctx.beginPath(); ctx.arc(at.x, at.y, chosen ? 5 : 3, 0, 2 * Math.PI); ctx.fill();
  }
  document.getElementById('scatter-title').textContent =
    `AtP against exact, per head: Pearson ${p.pearson.toFixed(3)}, Spearman ${p.spearman.toFixed(3)}`;
}
function scatterHead(event) {
  const r = document.getElementById('patch-scatter').getBoundingClientRect();
  let best = -1, bestDistance = 64;  // within 8 px
  for (let k = 0; k < data.patching.exact.length; k++) {
    const at = scatterPoint(k), dx = at.x - (event.clientX - r.left), dy = at.y - (event.clientY - r.top);
    if (dx * dx + dy * dy < bestDistance) best = k, bestDistance = dx * dx + dy * dy;
  }
  return best;
}

// The logit lens: the metric read from each block's input and from the final residual, both runs.
function drawLens() {
  const p = data.patching, n = p.lens_clean.length, width = 360, height = 240, pad = 40;
  const ctx = sized(document.getElementById('patch-lens'), width, height);
  const all = p.lens_clean.concat(p.lens_corrupt);
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi - lo < 1e-12) lo -= 1, hi += 1;
  const x = (i) => pad + (i / Math.max(1, n - 1)) * (width - 2 * pad), y = (v) => height - pad - ((v - lo) / (hi - lo)) * (height - 2 * pad);
  ctx.strokeStyle = '#bbb';
  ctx.strokeRect(pad, pad, width - 2 * pad, height - 2 * pad);
  ctx.textAlign = 'center';
  for (let i = 0; i < n; i++) ctx.fillText(i < n - 1 ? String(i) : 'final', x(i), height - pad + 14);
  ctx.fillText('read from: block l\'s resid_pre, then the final residual', width / 2, height - 6);
  ctx.textAlign = 'right';
  ctx.fillText(short(hi), pad - 4, pad + 4), ctx.fillText(short(lo), pad - 4, height - pad + 4);
  for (const [values, stroke] of [[p.lens_clean, '#2f8f4e'], [p.lens_corrupt, '#b2182b']]) {
    ctx.strokeStyle = ctx.fillStyle = stroke, ctx.lineWidth = 2;
    ctx.beginPath();
    values.forEach((v, i) => (i ? ctx.lineTo(x(i), y(v)) : ctx.moveTo(x(i), y(v))));
    ctx.stroke();
    values.forEach((v, i) => { ctx.beginPath(); ctx.arc(x(i), y(v), 3, 0, 2 * Math.PI); ctx.fill(); });
  }
}

function buildPatching() {
  const p = data.patching;
  if (!p) return;
  document.getElementById('patching').hidden = false;
  document.getElementById('patch-summary').textContent =
    `metric: ${p.metric}; clean run ${p.clean_metric.toPrecision(6)}, corrupted run ${p.corrupt_metric.toPrecision(6)}. ` +
    'Each head\'s z (every position) is taken from the clean run into the corrupted one: the exact effect is the patched ' +
    'run\'s metric minus the corrupted run\'s; AtP estimates it from the corrupted run\'s gradient, (z_clean − z_corrupt)·dmetric/dz.';
  const strips = document.getElementById('patch-tokens');
  for (const [name, tokens] of [['clean', p.clean_tokens], ['corrupted', p.corrupt_tokens]]) {
    const strip = document.createElement('div');
    strip.className = 'tokens', strip.textContent = name + ': ';
    tokens.forEach((t, i) => {
      const span = document.createElement('span');
      span.textContent = t || String(i);
      if (t !== (name === 'clean' ? p.corrupt_tokens : p.clean_tokens)[i]) span.className = 'differs';
      strip.appendChild(span);
    });
    strips.appendChild(strip);
  }
  const pick = (k) => {
    if (k < 0 || Math.floor(k / p.heads) >= data.sites.length) return;
    state.site = Math.floor(k / p.heads), state.head = k % p.heads;
    render();
  };
  for (const [id] of patchPanels) {
    const canvas = document.getElementById(id);
    canvas.addEventListener('mousemove', (e) => patchReadout(gridHead(canvas, e)));
    canvas.addEventListener('click', (e) => pick(gridHead(canvas, e)));
  }
  const scatter = document.getElementById('patch-scatter');
  scatter.addEventListener('mousemove', (e) => patchReadout(scatterHead(e)));
  scatter.addEventListener('click', (e) => pick(scatterHead(e)));
  drawLens();
}
function drawPatching() {
  if (!data.patching) return;
  drawPatchGrids();
  drawScatter();
  patchReadout(selectedHead());
}
