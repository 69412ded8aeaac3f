// The explore page's drawing and navigation: the head grid, the map with its tooltip, the side
// panels, the table, keys and clicks (data.js, before this file, decodes the data; patch.js draws
// the clean/corrupted section).
function drawCells(ctx, values, s, head, x0, y0, cell, sc) {
  for (let i = 0; i < s.queries; i++)
    for (let j = 0; j < s.keys; j++) {
      const at = (head * s.queries + i) * s.keys + j;
      const x = x0 + j * cell, y = y0 + i * cell;
      if (s.mask[at]) {
        ctx.fillStyle = MASKED;
        ctx.fillRect(x, y, cell, cell);
        if (cell >= 6) {
          ctx.strokeStyle = '#aaa';
          ctx.beginPath(); ctx.moveTo(x, y + cell); ctx.lineTo(x + cell, y); ctx.stroke();
        }
      } else {
        ctx.fillStyle = colour(position(values[i * s.keys + j], sc));
        ctx.fillRect(x, y, cell, cell);
      }
    }
}

// The query row whose loss is chosen, in a site whose queries are the loss's input (else -1).
function chosenRow(s) {
  return s.query_input === data.loss_input ? data.choices[state.choice].position : -1;
}

// The big map: tokens on both axes (queries down, keys across).
const map = document.getElementById('map');
let layout = null;
function drawMap() {
  const s = data.sites[state.site], view = VIEWS[state.view].key;
  const values = matrix(view, state.site, state.head, state.choice);
  const sc = scaleOf(values, view !== 'weights');
  const cell = Math.max(4, Math.min(28, Math.floor(480 / Math.max(s.queries, s.keys))));
  const left = 8 + 7 * Math.min(12, Math.max(...s.qTokens.concat(s.kTokens).map((t) => t.length), 2)) + 24, top = left;
  const ctx = sized(map, left + s.keys * cell + 4, top + s.queries * cell + 4);
  drawCells(ctx, values, s, state.head, left, top, cell, sc);
  ctx.fillStyle = '#333';
  ctx.font = `${Math.min(12, cell)}px monospace`;
  ctx.textBaseline = 'middle';
  for (let i = 0; i < s.queries; i++) {
    ctx.textAlign = 'right';
    ctx.fillText(named(s.qTokens[i], i), left - 4, top + (i + 0.5) * cell);
  }
  for (let j = 0; j < s.keys; j++) {
    ctx.save();
    ctx.translate(left + (j + 0.5) * cell, top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'left';
    ctx.fillText(named(s.kTokens[j], j), 0, 0);
    ctx.restore();
  }
  const p = chosenRow(s);
  if (p >= 0 && p < s.queries) {
    ctx.strokeStyle = '#e0701b';
    ctx.lineWidth = 2;
    ctx.strokeRect(left - 1, top + p * cell - 1, s.keys * cell + 2, cell + 2);
  }
  layout = { left, top, cell, s };
  map.dataset.site = state.site, map.dataset.head = state.head, map.dataset.choice = state.choice, map.dataset.view = view;
  drawLegend(sc);
}
function drawLegend(sc) {
  const bar = document.getElementById('legend-bar'), ctx = bar.getContext('2d');
  for (let x = 0; x < bar.width; x++) {
    const f = x / (bar.width - 1), t = sc.signed ? 2 * f - 1 : f;
    ctx.fillStyle = colour(t);
    ctx.fillRect(x, 0, 1, bar.height);
  }
  document.getElementById('legend-low').textContent = sc.signed ? short(-sc.max) : '0';
  document.getElementById('legend-high').textContent = short(sc.max);
  document.getElementById('legend-note').textContent =
    (state.log ? 'log scale: |value| from 1e-4 of the largest' : 'linear scale') + '; hatched: masked';
}

const tooltip = document.getElementById('tooltip');
function cellAt(event) {
  if (!layout) return null;
  const r = map.getBoundingClientRect();
  const j = Math.floor((event.clientX - r.left - layout.left) / layout.cell);
  const i = Math.floor((event.clientY - r.top - layout.top) / layout.cell);
  return i >= 0 && j >= 0 && i < layout.s.queries && j < layout.s.keys ? { i, j } : null;
}
function describe(i, j) {
  const s = data.sites[state.site], at = (state.head * s.queries + i) * s.keys + j, n = i * s.keys + j;
  const lines = [`query ${i}${quoted(s.qTokens[i])} → key ${j}${quoted(s.kTokens[j])}`];
  if (s.fullRow[state.head * s.queries + i]) lines.push('fully masked row: P = 0, dL/dS = 0, dQ = 0');
  else if (s.mask[at]) lines.push('masked key (score −∞): P = 0, dL/dS = 0');
  const order = [state.view, ...[0, 1, 2].filter((v) => v !== state.view)];
  for (const v of order) {
    const value = matrix(VIEWS[v].key, state.site, state.head, state.choice)[n];
    if (Number.isFinite(value)) lines.push(`${VIEWS[v].name} = ${exact(value)}`);
  }
  return lines.join('\n');
}
map.addEventListener('mousemove', (event) => {
  const c = cellAt(event);
  if (!c) { tooltip.style.display = 'none'; return; }
  tooltip.textContent = describe(c.i, c.j);
  tooltip.dataset.i = c.i, tooltip.dataset.j = c.j;
  tooltip.style.display = 'block';
  const box = map.getBoundingClientRect();
  tooltip.style.left = `${event.clientX - box.left + 14}px`;
  tooltip.style.top = `${event.clientY - box.top + 14}px`;
});
map.addEventListener('mouseleave', () => { tooltip.style.display = 'none'; });
map.addEventListener('click', (event) => {  // a query row: take its position's loss
  const c = cellAt(event);
  const k = c && layout.s.query_input === data.loss_input ? data.choices.findIndex((x) => x.position === c.i) : -1;
  if (k >= 0) { state.choice = k; render(); }
});

function headMetrics(r) {
  const parts = [];
  if (r.previous_token !== undefined) parts.push(`prev ${r.previous_token.toFixed(2)}`);
  if (r.induction !== undefined) parts.push(`ind ${r.induction.toFixed(2)}`);
  if (r.ablation_loss !== undefined) parts.push(`Δ${r.ablation_loss >= 0 ? '+' : ''}${r.ablation_loss.toFixed(3)}`);
  return parts.join(' ');
}
const metricsTitle = 'prev: previous-token mass, ind: induction score, Δ: held-out loss change with the head removed';
// The grid of every layer's heads, drawn in the current view and loss.
const nav = document.getElementById('heads');
function buildGrid() {
  nav.style.gridTemplateColumns = `repeat(${Math.max(...data.sites.map((s) => s.heads))}, auto)`;
  data.sites.forEach((s, site) => {
    const name = document.createElement('div');
    name.className = 'layer-name';
    name.textContent = s.name;
    nav.appendChild(name);
    for (let h = 0; h < s.heads; h++) {
      const box = document.createElement('div');
      box.className = 'head';
      box.dataset.site = site, box.dataset.head = h;
      box.title = `${s.name} head ${h}; ${metricsTitle}`;
      const canvas = document.createElement('canvas');
      canvas.width = s.keys, canvas.height = s.queries;
      const r = (s.head_reports || [])[h];
      box.appendChild(canvas);
      for (const [cls, text] of [['label', `${h}${r ? ': ' + r.label : ''}`], ['metrics', r ? headMetrics(r) : '']]) {
        const span = document.createElement('span');
        span.className = cls, span.textContent = text;
        box.appendChild(span);
      }
      box.addEventListener('click', () => { state.site = site, state.head = h; render(); });
      nav.appendChild(box);
    }
  });
}
function drawGrid() {
  const view = VIEWS[state.view].key;
  for (const box of nav.querySelectorAll('.head')) {
    const site = +box.dataset.site, head = +box.dataset.head, s = data.sites[site];
    const values = matrix(view, site, head, state.choice);
    drawCells(box.querySelector('canvas').getContext('2d'), values, s, head, 0, 0, 1, scaleOf(values, view !== 'weights'));
    box.classList.toggle('selected', site === state.site && head === state.head);
  }
}

function barRows(container, rows) {  // rows: {name, values: [{v, cls}], selected, masked}
  let max = 0;
  for (const r of rows) for (const x of r.values) max = Math.max(max, x.v);
  container.className = 'bars';
  container.innerHTML = '';
  for (const r of rows) {
    const row = document.createElement('div');
    row.className = 'bar-row' + (r.selected ? ' selected' : '');
    const name = document.createElement('span');
    name.className = 'name', name.textContent = name.title = r.name;
    row.appendChild(name);
    for (const x of r.values) {
      const bar = document.createElement('span');
      bar.className = 'bar ' + x.cls + (r.masked ? ' masked' : '');
      if (!r.masked) bar.style.width = `${max > 0 ? Math.max(1, (60 * x.v) / max) : 1}px`;
      bar.title = `${x.label} = ${exact(x.v)}${r.masked ? ' (fully masked row)' : ''}`;
      row.appendChild(bar);
    }
    container.appendChild(row);
  }
}
function drawSide() {
  const s = data.sites[state.site], g = grads(state.choice, state.site), h = state.head, p = chosenRow(s);
  const self = s.query_input >= 0 && s.query_input === s.key_input && s.queries === s.keys;
  const query = (t) => ({ v: g.dq[h * s.queries + t], cls: 'q', label: '‖dQ‖' });
  const keyValue = (t) => [{ v: g.dk[h * s.keys + t], cls: 'k', label: '‖dK‖' }, { v: g.dv[h * s.keys + t], cls: 'v', label: '‖dV‖' }];
  const masked = (t) => s.fullRow[h * s.queries + t] === 1;
  const rows = [];
  if (self)
    for (let t = 0; t < s.queries; t++)
      rows.push({ name: named(s.qTokens[t], t), values: [query(t), ...keyValue(t)], selected: t === p, masked: masked(t) });
  else {
    for (let t = 0; t < s.queries; t++)
      rows.push({ name: 'query ' + named(s.qTokens[t], t), values: [query(t)], selected: t === p, masked: masked(t) });
    for (let t = 0; t < s.keys; t++) rows.push({ name: 'key ' + named(s.kTokens[t], t), values: keyValue(t) });
  }
  barRows(document.getElementById('qkv'), rows);
  const shares = document.getElementById('shares');
  if (!g.share) shares.textContent = 'not available: this attention\'s inputs do not come from a Linear projection';
  else {
    const total = g.share.reduce((a, b) => a + b, 0);
    barRows(shares, Array.from(g.share, (v, k) => ({ name: `head ${k}${total > 0 ? ' ' + Math.round((100 * v) / total) + '%' : ''}`,
      values: [{ v, cls: 'q', label: '‖dX_h‖' }], selected: k === h })));
  }
  const strips = document.getElementById('saliency'), choice = data.choices[state.choice];
  strips.innerHTML = '';
  data.inputs.forEach((input, k) => {
    const values = choice.saliency[k] ? numbersOf(choice.saliency[k]) : [];
    if (!values.length) return;
    const top = Math.max(...values, 0), strip = document.createElement('div');
    strip.className = 'tokens';
    strip.dataset.input = input.name;
    if (data.inputs.length > 1) strip.textContent = input.name + ': ';
    values.forEach((v, t) => {
      const span = document.createElement('span');
      span.textContent = input.tokens[t] || String(t);
      span.title = `${input.name} token ${t}: ‖dL/dx‖ = ${exact(v)}`;
      span.style.background = heat(top > 0 ? v / top : 0);
      if (k === data.loss_input && t === choice.position) span.style.borderColor = '#e0701b';
      strip.appendChild(span);
    });
    strips.appendChild(strip);
  });
}

function buildTable() {
  const table = document.getElementById('head-table');
  document.getElementById('heads-note').textContent = data.heads_note || 'no head reports';
  const reports = data.sites.flatMap((s, site) => (s.head_reports || []).map((r) => ({ ...r, site })));
  if (!reports.length) return;
  const columns = [['layer', (r) => r.site], ['head', (r) => r.head], ['label', (r) => r.label],
    ['prev', (r) => r.previous_token, 3], ['induction', (r) => r.induction, 3], ['first', (r) => r.first_token, 3],
    ['uniform', (r) => r.uniformity, 3], ['Δloss', (r) => r.ablation_loss, 4], ['Δaccuracy', (r) => r.ablation_accuracy, 4]]
    .filter(([, get]) => reports.some((r) => get(r) !== undefined));
  const header = document.createElement('tr');
  for (const [name] of columns) {
    const th = document.createElement('th');
    th.textContent = name, th.className = name === 'label' ? 'label' : '';
    header.appendChild(th);
  }
  table.appendChild(header);
  for (const r of reports) {
    const tr = document.createElement('tr');
    tr.dataset.site = r.site, tr.dataset.head = r.head;
    for (const [name, get, digits] of columns) {
      const td = document.createElement('td'), v = get(r);
      td.textContent = v === undefined ? '' : digits ? v.toFixed(digits) : String(v);
      td.className = name === 'label' ? 'label' : '';
      tr.appendChild(td);
    }
    tr.addEventListener('click', () => { state.site = r.site, state.head = r.head; render(); });
    table.appendChild(tr);
  }
}

function render() {
  const s = data.sites[state.site], c = data.choices[state.choice], r = (s.head_reports || [])[state.head];
  document.getElementById('head-title').textContent = `${s.name} · head ${state.head} of ${s.heads} · ${VIEWS[state.view].title}`;
  document.getElementById('head-summary').textContent = r ? `${r.label}. ${headMetrics(r)}` : '';
  document.getElementById('choice').value = String(state.choice);
  document.getElementById('loss').textContent = `loss ${exact(c.loss)}`;
  document.getElementById('formula').textContent = VIEWS[state.view].formula;
  for (const b of document.querySelectorAll('#views button')) b.classList.toggle('on', +b.dataset.view === state.view);
  for (const b of document.querySelectorAll('#scales button')) b.classList.toggle('on', (b.dataset.scale === 'log') === state.log);
  for (const tr of document.querySelectorAll('#head-table tr[data-site]'))
    tr.classList.toggle('selected', +tr.dataset.site === state.site && +tr.dataset.head === state.head);
  drawMap();
  drawGrid();
  drawSide();
  drawPatching();
}

function setup() {
  document.title = `xgrad explore: ${data.title}`;
  document.getElementById('title').textContent = `xgrad explore: ${data.title}`;
  document.getElementById('description').textContent = data.description;
  const select = document.getElementById('choice');
  data.choices.forEach((c, k) => select.add(new Option(c.label, String(k))));
  select.addEventListener('change', () => { state.choice = +select.value; render(); });
  const views = document.getElementById('views');
  VIEWS.forEach((v, k) => {
    const b = document.createElement('button');
    b.textContent = v.title, b.dataset.view = k;
    b.addEventListener('click', () => { state.view = k; render(); });
    views.appendChild(b);
  });
  const scales = document.getElementById('scales');
  for (const name of ['linear', 'log']) {
    const b = document.createElement('button');
    b.textContent = name, b.dataset.scale = name;
    b.addEventListener('click', () => { state.log = name === 'log'; render(); });
    scales.appendChild(b);
  }
  document.addEventListener('keydown', (e) => {
    if (e.target instanceof HTMLSelectElement) return;
    const sites = data.sites.length, heads = data.sites[state.site].heads;
    const moves = {
      ArrowRight: () => { state.head = (state.head + 1) % heads; },
      ArrowLeft: () => { state.head = (state.head + heads - 1) % heads; },
      ArrowDown: () => { state.site = (state.site + 1) % sites; },
      ArrowUp: () => { state.site = (state.site + sites - 1) % sites; },
      ']': () => { state.choice = (state.choice + 1) % data.choices.length; },
      '[': () => { state.choice = (state.choice + data.choices.length - 1) % data.choices.length; },
      v: () => { state.view = (state.view + 1) % VIEWS.length; },
      s: () => { state.log = !state.log; },
    };
    if (!moves[e.key]) return;
    e.preventDefault();
    moves[e.key]();
    state.head = Math.min(state.head, data.sites[state.site].heads - 1);
    render();
  });
  buildGrid();
  buildTable();
  buildPatching();
  render();
}
setup();
// For tests and the console: the state, a redraw, the data, and where cell (i, j) of the map is
// (CSS pixels from the canvas' top left corner).
window.xgradExplore = { state, render, data,
  cellCenter: (i, j) => ({ x: layout.left + (j + 0.5) * layout.cell, y: layout.top + (i + 0.5) * layout.cell }) };
