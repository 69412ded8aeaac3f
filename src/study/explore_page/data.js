// The explore page's data (docs/explore.md): what `xgrad explore` wrote into #xgrad-data, decoded,
// and the colour scales. Every number shown is one the tool computed. page.js, which follows this
// file in the page, lays them out.
'use strict';
const data = JSON.parse(document.getElementById('xgrad-data').textContent);
const DOUBLE = data.dtype === 'float64';
const VIEWS = [
  { key: 'weights', name: 'P', title: 'weights P',
    formula: 'P = softmax(S) row by row, S = Q·Kᵀ/√d + mask. Hatched cells are masked keys (score −∞, P = 0).' },
  { key: 'dweights', name: 'dL/dP', title: 'dL/dP',
    formula: 'dL/dP = dO·Vᵀ for each head: how the loss changes with each weight. Masked cells have no weight to change.' },
  { key: 'dscores', name: 'dL/dS', title: 'dL/dS',
    formula: 'dL/dS = P ⊙ (dL/dP − rowsum(dL/dP ⊙ P)): the softmax backward. It is 0 wherever P is 0 (masked keys, ' +
      'fully masked rows), and each row sums to 0. dQ = dS·K/√d, dK = dSᵀ·Q/√d, dV = Pᵀ·dO.' },
];
const state = { site: 0, head: 0, choice: 0, view: 0, log: false };

function bytesOf(b64) {
  const text = atob(b64 || '');
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}
function numbersOf(b64) {
  const b = bytesOf(b64);
  return DOUBLE ? new Float64Array(b.buffer) : new Float32Array(b.buffer);
}
// A value as written: the shortest decimal that reads back as the same float32 (or float64).
function exact(v) {
  if (!DOUBLE) for (let p = 1; p <= 9; p++) { const s = v.toPrecision(p); if (Math.fround(+s) === v) return s; }
  return String(v);
}
// A token on an axis: its text (if it has one) and its index.
function named(token, index) {
  return token ? `${token} ${index}` : String(index);
}
const quoted = (token) => (token ? ` '${token}'` : '');
function short(v) {
  const a = Math.abs(v);
  return a === 0 ? '0' : a >= 1e-3 && a < 1e4 ? v.toPrecision(3) : v.toExponential(2);
}

// Sites: their queries' and keys' labels, the mask, P (stored at unmasked cells only), fully masked rows.
const labels = (input, n) => Array.from({ length: n }, (_, i) => (input >= 0 ? data.inputs[input].tokens[i] || '' : ''));
for (const s of data.sites) {
  s.qTokens = labels(s.query_input, s.queries), s.kTokens = labels(s.key_input, s.keys);
  s.mask = bytesOf(s.masked);
  s.P = expand(s, numbersOf(s.weights), s.queries, 0);
  s.fullRow = new Uint8Array(s.heads * s.queries);
  for (let h = 0; h < s.heads; h++)
    for (let i = 0; i < s.queries; i++) {
      let all = true;
      for (let j = 0; j < s.keys && all; j++) all = s.mask[(h * s.queries + i) * s.keys + j] === 1;
      s.fullRow[h * s.queries + i] = all ? 1 : 0;
    }
}
// Dense (H, L, S) from values at the unmasked cells of rows [0, rows) of each head; `fill` elsewhere
// in those rows' masked cells (rows past `rows` are 0: the tool found them all zero).
function expand(s, values, rows, fill) {
  const out = new Float64Array(s.heads * s.queries * s.keys);
  let k = 0;
  for (let h = 0; h < s.heads; h++)
    for (let i = 0; i < rows; i++)
      for (let j = 0; j < s.keys; j++) {
        const at = (h * s.queries + i) * s.keys + j;
        out[at] = s.mask[at] ? fill : values[k++];
      }
  if (k !== values.length) throw new Error(`explore: ${s.name}: ${values.length} values for ${k} cells`);
  return out;
}
function grads(choice, site) {
  const g = data.choices[choice].sites[site];
  if (!g.dense) {
    const s = data.sites[site];
    g.dense = { dweights: expand(s, numbersOf(g.dweights), g.rows, NaN), dscores: expand(s, numbersOf(g.dscores), g.rows, 0),
      dq: numbersOf(g.dq), dk: numbersOf(g.dk), dv: numbersOf(g.dv), share: g.head_input ? numbersOf(g.head_input) : null };
  }
  return g.dense;
}
function matrix(view, site, head, choice) {
  const s = data.sites[site];
  const all = view === 'weights' ? s.P : grads(choice, site)[view];
  const n = s.queries * s.keys;
  return all.subarray(head * n, head * n + n);
}

// Colours: P from white to blue; gradients blue (−) white (0) red (+), symmetric around 0. The log
// scale spans four decades below the largest |value|.
function scaleOf(values, signed) {
  let max = 0;
  for (const v of values) if (Number.isFinite(v)) max = Math.max(max, Math.abs(v));
  return { max, signed };
}
function position(v, sc) {
  if (!(sc.max > 0)) return 0;
  const a = Math.abs(v);
  let t = a / sc.max;
  if (state.log) t = a <= sc.max * 1e-4 ? 0 : (Math.log10(a / sc.max) + 4) / 4;
  return sc.signed ? Math.sign(v) * t : t;
}
function colour(t) {
  const mix = (a, b, f) => a.map((x, i) => Math.round(x + (b[i] - x) * f));
  const white = [255, 255, 255];
  const c = t >= 0 ? (state.view === 0 ? mix(white, [8, 48, 107], t) : mix(white, [178, 24, 43], t)) : mix(white, [33, 102, 172], -t);
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
function heat(t) {  // saliency: white to orange
  const c = [255, 255, 255].map((x, i) => Math.round(x + ([224, 112, 27][i] - x) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}
const MASKED = '#d8d8d8';
function sized(canvas, width, height) {  // a canvas drawn in CSS pixels, sharp on any screen
  const ratio = window.devicePixelRatio || 1;
  canvas.width = width * ratio, canvas.height = height * ratio;
  canvas.style.width = width + 'px', canvas.style.height = height + 'px';
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, width, height);
  ctx.font = '11px monospace';
  ctx.fillStyle = '#333';
  return ctx;
}

