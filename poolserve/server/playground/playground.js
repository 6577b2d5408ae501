// poolserve playground: one page over the server's own HTTP API. Plain ES2020, no build step.
// State lives in `state`; every call goes through `api()`, which adds the API key (kept in this
// variable only) and turns any failure into an ApiError carrying the server's own message.
'use strict';

const POLL_MS = 2000;
const TOP_TERMS = 20;
const MAX_BARS = 20;

const state = {
  key: null,            // the API key: this variable only, never storage, cookies or URLs
  models: [],           // cards from /v1/models
  model: null,          // the chosen card
  tickets: {},          // per result: the newest request; older answers are dropped
  termNames: new Map(), // model id -> Map(token id -> token string), for sparse terms
  images: [],           // the chosen image files as {name, uri} (data URIs), for image search
  pollTimer: null,
  polling: false,
};

const $ = (id) => document.getElementById(id);

// el('td', {class: 'x', title: 't', dataset: {value: '1'}}, 'text', child, ...)
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value == null || value === false) continue;
    if (name === 'dataset') Object.assign(node.dataset, value);
    else if (name === 'style') node.style.cssText = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child != null && child !== false) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const svgEl = (tag, attrs = {}) => {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
};

const short = (text, n = 18) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);
const fmt = (value, digits = 1) => (value == null || !Number.isFinite(value) ? '—' : value.toFixed(digits));
const pct = (value) => (value == null ? '—' : `${(value * 100).toFixed(1)}%`);

// ---------------------------------------------------------------- HTTP and errors

class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// The server's message from either error shape: OpenAI-style {"error": {"message", ...}} or
// text-embeddings-inference's {"error": "...", "error_type": "..."}; else the raw body.
function serverMessage(text) {
  try {
    const body = JSON.parse(text);
    const error = body && body.error;
    if (error && typeof error === 'object' && typeof error.message === 'string') return error.message;
    if (typeof error === 'string') return body.error_type ? `${error} (${body.error_type})` : error;
    if (body && typeof body.detail === 'string') return body.detail;
  } catch (_) { /* not JSON: fall through to the text itself */ }
  return text.trim().slice(0, 500);
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(`${method} ${path}: could not reach the server (${err.message})`, 0);
  }
  const text = await response.text();
  if (!response.ok) {
    if (response.status === 401) needKey();
    const message = serverMessage(text) || response.statusText || 'no message';
    throw new ApiError(`${method} ${path} answered ${response.status}: ${message}`, response.status);
  }
  try {
    return JSON.parse(text);
  } catch (_) {
    throw new ApiError(`${method} ${path} answered ${response.status} with a body that is not JSON`, response.status);
  }
}

function showError(message) {
  const box = $('error');
  box.textContent = message;
  box.hidden = false;
}

function clearError() {
  const box = $('error');
  box.textContent = '';
  box.hidden = true;
}

// ---------------------------------------------------------------- API key

function needKey() {
  const form = $('key-form');
  if (form.hidden) {
    form.hidden = false;
    // Take the focus only when nothing else has it (a failed poll must not steal the cursor).
    if (document.activeElement === document.body || document.activeElement == null) $('api-key').focus();
  }
  $('key-status').textContent = state.key
    ? 'The server refused this key; check it and try again.'
    : 'This server needs an API key.';
}

$('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = $('api-key');
  state.key = input.value.trim() || null;
  input.value = '';
  $('key-status').textContent = state.key ? 'Key in use (kept in this page only).' : 'No key set.';
  loadModels();
  pollSoon(0);
});

// ---------------------------------------------------------------- models

async function loadModels() {
  document.body.dataset.state = 'loading';
  const select = $('model-select');
  try {
    const list = await api('GET', '/v1/models');
    state.models = Array.isArray(list.data) ? list.data : [];
  } catch (err) {
    state.models = [];
    select.replaceChildren(el('option', {}, 'no models'));
    select.disabled = true;
    chooseModel(null);
    if (err.status !== 401) document.body.dataset.state = 'error';
    showError(err.message);
    return;
  }
  const previous = state.model && state.model.id;
  // Every served name, aliases included; a name that differs from its model's root says it.
  select.replaceChildren(...(state.models.length ? state.models.map((card) => el('option', { value: card.id },
    card.root && card.root !== card.id ? `${card.id} (${card.root})` : card.id)) : [el('option', {}, 'no models served')]));
  select.disabled = state.models.length === 0;
  if (state.models.some((card) => card.id === previous)) select.value = previous;
  clearError();
  chooseModel(select.value);
  document.body.dataset.state = 'ready';
}

// Does the chosen model serve `route`? A card without `routes` is trusted with every route:
// the server then answers for itself.
function serves(route) {
  const routes = state.model && state.model.routes;
  return !Array.isArray(routes) || routes.includes(route);
}

const KIND_NAMES = {
  embedding: 'embedding model', cross_encoder: 'cross-encoder (reranker)', classifier: 'classifier',
  sparse: 'sparse model', late_interaction: 'late-interaction model', token_classifier: 'token classifier',
};

function chooseModel(id) {
  state.model = state.models.find((card) => card.id === id) || null;
  for (const name of Object.keys(state.tickets)) state.tickets[name] += 1; // drop answers in flight
  clearResults();
  const card = state.model;
  const kind = card ? KIND_NAMES[card.kind] || card.kind || 'model' : null;
  $('model-info').textContent = card ? [
    kind,
    card.max_model_len != null && `max ${card.max_model_len} tokens`,
    card.embedding_dim != null && `${card.embedding_dim} dimensions`,
    Array.isArray(card.input_modalities) && card.input_modalities.includes('image') && 'texts and images',
  ].filter(Boolean).join(' · ') : '';

  const missing = [];
  for (const button of document.querySelectorAll('#panel-texts button[data-route]')) {
    const ok = card != null && serves(button.dataset.route);
    button.disabled = !ok;
    if (!ok && card) missing.push(`${button.textContent} needs ${button.dataset.route}`);
  }
  $('btn-tokens').disabled = card == null;
  $('texts-note').textContent = !card ? 'No model is loaded.'
    : missing.length ? `Not served by this ${kind}: ${missing.join('; ')}.` : '';

  const images = card != null && Array.isArray(card.input_modalities) && card.input_modalities.includes('image');
  $('panel-images').hidden = !images;
  $('btn-image-search').disabled = !images || state.images.length === 0;

  const rerank = card != null && serves('/rerank');
  $('btn-rerank').disabled = !rerank;
  $('rerank-form').hidden = !rerank;
  $('rerank-note').hidden = rerank;
  $('rerank-note').textContent = rerank ? ''
    : card ? `This ${kind} does not serve /rerank; choose an embedding model or a cross-encoder.` : 'No model is loaded.';
}

$('model-select').addEventListener('change', (event) => chooseModel(event.target.value));

// ---------------------------------------------------------------- running an action

function readLines(id) {
  return $(id).value.split('\n').map((line) => line.replace(/\r$/, '')).filter((line) => line.trim() !== '');
}

// Runs one action: checks inputs, calls, renders into `target`, marks it data-ready="1".
// Answers that arrive after a newer request (or a model change) for the same target are dropped.
async function run(target, block, work) {
  const node = $(target);
  if (!state.model) return showError('Choose a model first.');
  const ticket = (state.tickets[target] = (state.tickets[target] || 0) + 1);
  delete node.dataset.ready;
  node.setAttribute('aria-busy', 'true');
  clearError();
  try {
    const render = await work();
    if (ticket !== state.tickets[target]) return;
    render(node);
    if (block) $(block).hidden = false;
    node.hidden = false;
    node.dataset.ready = '1';
    (block ? $(block) : node).scrollIntoView({ block: 'nearest' });
  } catch (err) {
    if (ticket !== state.tickets[target]) return;
    node.replaceChildren(); // no stale result next to the error
    if (block) $(block).hidden = true;
    else node.hidden = true;
    showError(err instanceof ApiError ? err.message : `Unexpected: ${err.message}`);
  } finally {
    node.removeAttribute('aria-busy');
  }
}

function clearResults() {
  for (const block of ['similarity-block', 'classify-block', 'sparse-block', 'tokens-block']) $(block).hidden = true;
  for (const id of ['heatmap', 'classify-results', 'sparse-results', 'tokens-results', 'rerank-results', 'image-results']) {
    $(id).replaceChildren();
    delete $(id).dataset.ready;
  }
  $('rerank-results').hidden = true;
  $('image-results').hidden = true;
}

function texts() {
  const lines = readLines('texts');
  if (lines.length === 0) throw new ApiError('Type at least one text (one per line).', 0);
  return lines;
}

// ---------------------------------------------------------------- similarity

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i += 1) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / (Math.sqrt(na) * Math.sqrt(nb));
}

// -1 (orange) .. 0 (white) .. 1 (blue), and a text colour that stays readable on it.
function heatColour(value) {
  const v = Math.max(-1, Math.min(1, Number.isFinite(value) ? value : 0));
  const [r, g, b] = v >= 0 ? [29, 78, 216] : [194, 65, 12];
  const t = Math.abs(v);
  const mix = (c) => Math.round(255 + (c - 255) * t);
  return `background:rgb(${mix(r)},${mix(g)},${mix(b)});color:${t > 0.55 ? '#fff' : '#111'}`;
}

async function similarity() {
  const inputs = texts();
  const body = await api('POST', '/v1/embeddings', { model: state.model.id, input: inputs });
  const vectors = [...body.data].sort((x, y) => x.index - y.index).map((item) => item.embedding);
  const scores = vectors.map((a) => vectors.map((b) => cosine(a, b)));
  return (table) => {
    const head = (text, scope) => el('th', { scope, title: text }, short(text, scope === 'row' ? 28 : 14));
    table.replaceChildren(
      el('caption', { class: 'sr-only' }, `Cosine similarity of ${inputs.length} texts`),
      el('thead', {}, el('tr', {}, el('td'), inputs.map((text) => head(text, 'col')))),
      el('tbody', {}, scores.map((row, i) => el('tr', {}, head(inputs[i], 'row'),
        row.map((value, j) => el('td', {
          dataset: { value: String(value) }, style: heatColour(value),
          title: `${short(inputs[i], 40)} × ${short(inputs[j], 40)}: ${value}`,
        }, Number.isFinite(value) ? value.toFixed(3) : '—'))))),
    );
  };
}

// ---------------------------------------------------------------- classify

async function classify() {
  const inputs = texts();
  const body = await api('POST', '/classify', { model: state.model.id, input: inputs });
  const items = [...body.data].sort((x, y) => x.index - y.index);
  return (node) => node.replaceChildren(...items.map((item) => {
    const probs = item.probs || [];
    const top = probs.reduce((best, p, i) => (p > probs[best] ? i : best), 0);
    const name = (i) => (i === top && item.label != null ? item.label : `#${i}`);
    let shown = probs.map((p, i) => i);
    if (shown.length > MAX_BARS) shown = shown.sort((a, b) => probs[b] - probs[a]).slice(0, MAX_BARS);
    return el('article', { class: 'item', dataset: { index: item.index } },
      el('p', { class: 'text', title: inputs[item.index] }, inputs[item.index]),
      el('p', {}, 'Top: ', el('strong', { class: 'label' }, name(top)),
        ` (${fmt(probs[top], 3)})`,
        shown.length < probs.length ? el('span', { class: 'muted' }, ` · showing ${shown.length} of ${probs.length} classes`) : null),
      el('ul', { class: 'bars' }, shown.map((i) => el('li', { class: i === top ? 'top' : null },
        el('span', { class: 'name', title: name(i) }, name(i)),
        el('span', { class: 'bar' }, el('span', { style: `width:${Math.max(0, Math.min(1, probs[i])) * 100}%` })),
        el('span', { class: 'num' }, fmt(probs[i], 3))))));
  }));
}

// ---------------------------------------------------------------- sparse terms

// Token strings for vocabulary ids: first from /tokenize of the texts themselves (their own
// tokens), then /detokenize one id at a time for expansion terms. Cached per model.
async function tokenNames(modelId, inputs, ids) {
  if (!state.termNames.has(modelId)) state.termNames.set(modelId, new Map());
  const names = state.termNames.get(modelId);
  let problem = null;
  const missing = () => [...new Set(ids)].filter((id) => !names.has(id));
  if (missing().length) {
    await Promise.all(inputs.map(async (prompt) => {
      try {
        const out = await api('POST', '/tokenize', { model: modelId, prompt, return_token_strs: true });
        (out.tokens || []).forEach((id, i) => out.token_strs && names.set(id, out.token_strs[i]));
      } catch (err) { problem = problem || err.message; }
    }));
  }
  await Promise.all(missing().map(async (id) => {
    try {
      names.set(id, (await api('POST', '/detokenize', { model: modelId, tokens: [id] })).prompt);
    } catch (err) { problem = problem || err.message; }
  }));
  return { name: (id) => (names.has(id) ? names.get(id) : `#${id}`), problem };
}

async function sparse() {
  const inputs = texts();
  const modelId = state.model.id;
  // text-embeddings-inference's shape: per input, its non-zero [{index, value}] (vocabulary ids).
  const body = await api('POST', '/embed_sparse', { model: modelId, inputs });
  const perText = Array.isArray(body) ? body : [...(body.data || [])].sort((x, y) => x.index - y.index).map((item) => item.data);
  const tops = perText.map((entries) => [...entries].sort((a, b) => b.value - a.value).slice(0, TOP_TERMS));
  const { name, problem } = await tokenNames(modelId, inputs, tops.flat().map((entry) => entry.index));
  return (node) => node.replaceChildren(
    ...(problem ? [el('p', { class: 'muted' }, `Some token strings are unavailable, shown as #id: ${problem}`)] : []),
    ...tops.map((entries, i) => {
      const max = entries.length ? entries[0].value : 1;
      return el('article', { class: 'item', dataset: { index: i } },
        el('p', { class: 'text', title: inputs[i] }, inputs[i],
          el('span', { class: 'muted' }, ` · ${perText[i].length} non-zero terms`)),
        el('ul', { class: 'bars terms' }, entries.map((entry) => el('li', {},
          el('span', { class: 'name', title: `id ${entry.index}` }, name(entry.index)),
          el('span', { class: 'bar' }, el('span', { style: `width:${max > 0 ? (entry.value / max) * 100 : 0}%` })),
          el('span', { class: 'num' }, fmt(entry.value, 3))))));
    }));
}

// ---------------------------------------------------------------- tokens

async function tokens() {
  const inputs = texts();
  const modelId = state.model.id;
  const results = await Promise.all(inputs.map((prompt) =>
    api('POST', '/tokenize', { model: modelId, prompt, return_token_strs: true })));
  return (node) => node.replaceChildren(...results.map((out, i) => {
    const over = out.count > out.max_model_len;
    return el('article', { class: 'item', dataset: { index: i } },
      el('p', { class: 'text', title: inputs[i] }, inputs[i]),
      el('p', { class: over ? 'count over' : 'count' },
        `${out.count} tokens of ${out.max_model_len}${over ? ' — over the limit: the server refuses or truncates it' : ''}`),
      el('div', { class: 'chips' }, (out.tokens || []).map((id, j) => el('span', { class: 'chip', title: `id ${id}` },
        out.token_strs ? out.token_strs[j] : String(id)))));
  }));
}

// ---------------------------------------------------------------- rerank

async function rerank() {
  const query = $('rerank-query').value.trim();
  const documents = readLines('rerank-documents');
  if (!query) throw new ApiError('Type a query to rerank the documents against.', 0);
  if (documents.length === 0) throw new ApiError('Type at least one document (one per line).', 0);
  const body = await api('POST', '/rerank', { model: state.model.id, query, documents });
  return (list) => list.replaceChildren(...body.results.map((result) => el('li', { dataset: { index: result.index, score: String(result.relevance_score) } },
    el('span', { class: 'score', title: String(result.relevance_score) }, fmt(result.relevance_score, 4)),
    el('span', { class: 'doc' }, result.document ? result.document.text : documents[result.index]),
    el('span', { class: 'muted' }, ` #${result.index}`))));
}

// ---------------------------------------------------------------- image search

const readAsDataUri = (file) => new Promise((resolve, reject) => {
  const reader = new FileReader();
  reader.onload = () => resolve(reader.result);
  reader.onerror = () => reject(new ApiError(`${file.name}: could not be read (${reader.error && reader.error.message})`, 0));
  reader.readAsDataURL(file);
});

$('image-files').addEventListener('change', async (event) => {
  const files = [...event.target.files];
  try {
    state.images = await Promise.all(files.map(async (file) => ({ name: file.name, uri: await readAsDataUri(file) })));
  } catch (err) {
    state.images = [];
    showError(err.message);
  }
  $('image-thumbs').replaceChildren(...state.images.map((image, i) => el('figure', { dataset: { index: i } },
    el('img', { src: image.uri, alt: image.name }), el('figcaption', { title: image.name }, short(image.name, 16)))));
  $('image-thumbs').dataset.count = String(state.images.length);
  $('btn-image-search').disabled = state.images.length === 0 || $('panel-images').hidden;
});

// The images ranked by their vectors' cosine with the query's: /rerank with image documents.
async function imageSearch() {
  const query = $('image-query').value.trim();
  if (!query) throw new ApiError('Type what the image should show.', 0);
  if (state.images.length === 0) throw new ApiError('Choose at least one image.', 0);
  const images = state.images;
  const documents = images.map((image) => ({ image: image.uri }));
  const body = await api('POST', '/rerank', { model: state.model.id, query, documents, return_documents: false });
  return (list) => list.replaceChildren(...body.results.map((result) => el('li', { dataset: { index: result.index, score: String(result.relevance_score) } },
    el('span', { class: 'score', title: String(result.relevance_score) }, fmt(result.relevance_score, 4)),
    el('img', { class: 'thumb', src: images[result.index].uri, alt: images[result.index].name }),
    el('span', { class: 'doc' }, images[result.index].name))));
}

$('images-form').addEventListener('submit', (event) => {
  event.preventDefault();
  run('image-results', null, imageSearch);
});

// ---------------------------------------------------------------- wiring

const ACTIONS = {
  'btn-similarity': () => run('heatmap', 'similarity-block', similarity),
  'btn-classify': () => run('classify-results', 'classify-block', classify),
  'btn-sparse': () => run('sparse-results', 'sparse-block', sparse),
  'btn-tokens': () => run('tokens-results', 'tokens-block', tokens),
};
for (const [id, action] of Object.entries(ACTIONS)) $(id).addEventListener('click', action);

$('texts').addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' || !(event.ctrlKey || event.metaKey)) return;
  event.preventDefault();
  const first = Object.keys(ACTIONS).find((id) => !$(id).disabled);
  if (first) ACTIONS[first]();
});

$('rerank-form').addEventListener('submit', (event) => {
  event.preventDefault();
  run('rerank-results', null, rerank);
});
$('rerank-documents').addEventListener('keydown', (event) => {
  if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    $('rerank-form').requestSubmit();
  }
});

// ---------------------------------------------------------------- live panel

// A sparkline: the samples' values against time as polylines, broken where a value is null.
function sparkline(samples, pick, { min = 0, max = null } = {}) {
  const W = 160, H = 32, P = 2;
  const svg = svgEl('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'spark', 'aria-hidden': 'true' });
  const points = samples.map((s) => [s.t, pick(s)]);
  const values = points.map(([, v]) => v).filter((v) => v != null && Number.isFinite(v));
  if (points.length < 2 || values.length === 0) return svg;
  const top = max != null ? max : Math.max(...values, min + 1e-9);
  const t0 = points[0][0], t1 = points[points.length - 1][0] || t0 + 1;
  const x = (t) => P + ((t - t0) / (t1 - t0 || 1)) * (W - 2 * P);
  const y = (v) => H - P - ((Math.min(v, top) - min) / (top - min || 1)) * (H - 2 * P);
  svg.append(svgEl('line', { x1: P, x2: W - P, y1: H - P, y2: H - P, class: 'axis' }));
  let segment = [];
  const flush = () => {
    if (segment.length === 1) svg.append(svgEl('circle', { cx: segment[0][0], cy: segment[0][1], r: 1.5 }));
    if (segment.length > 1) svg.append(svgEl('polyline', { points: segment.map((p) => p.join(',')).join(' ') }));
    segment = [];
  };
  for (const [t, v] of points) {
    if (v == null || !Number.isFinite(v)) flush();
    else segment.push([x(t).toFixed(1), y(v).toFixed(1)]);
  }
  flush();
  return svg;
}

const SPARKS = [
  ['requests/s', (s) => s.requests_per_s, (v) => fmt(v), {}],
  ['p99 latency', (s) => s.p99_ms, (v) => `${fmt(v)} ms`, {}],
  ['queue depth', (s) => s.queue_items, (v) => fmt(v, 0), {}],
  ['mean batch size', (s) => s.mean_batch_size, (v) => fmt(v), {}],
  ['padding efficiency', (s) => s.padding_efficiency, pct, { max: 1 }],
];

function renderLive(history) {
  const samples = Array.isArray(history.samples) ? history.samples : [];
  const last = samples[samples.length - 1];
  $('live-requests-total').textContent = String(history.requests_total);
  const when = last ? new Date(last.t * 1000).toLocaleTimeString() : null;
  $('live-status').textContent = when
    ? `updated ${when} · ${samples.length} samples every ${history.interval_s} s` : 'no samples yet';
  $('live-status').classList.remove('bad');

  const metric = (name, value) => [el('dt', {}, name), el('dd', {}, value)];
  $('live-metrics').replaceChildren(...(last ? [
    metric('requests/s', fmt(last.requests_per_s)),
    metric('latency p50 / p90 / p99', `${fmt(last.p50_ms)} / ${fmt(last.p90_ms)} / ${fmt(last.p99_ms)} ms`),
    metric('queue depth', String(last.queue_items)),
    metric('in flight', String(last.requests_in_flight)),
    metric('batches · mean size', `${last.batches} · ${fmt(last.mean_batch_size)}`),
    metric('padding efficiency', pct(last.padding_efficiency)),
  ] : []).flat());

  $('live-sparks').replaceChildren(...SPARKS.map(([name, pick, show, range]) => el('figure', {},
    el('figcaption', {}, name, el('span', { class: 'num' }, last ? show(pick(last)) : '—')),
    sparkline(samples, pick, range))));

  const models = last && last.models ? Object.entries(last.models) : [];
  $('live-models').replaceChildren(
    el('thead', {}, el('tr', {}, [['model'], ['req/s', 'requests per second'], ['queue', 'items queued'],
      ['batches'], ['avg size', 'mean batch size'], ['padding', 'padding efficiency: real / padded tokens']]
      .map(([name, title]) => el('th', { scope: 'col', title }, name)))),
    el('tbody', {}, models.length ? models.map(([name, m]) => el('tr', {},
      el('th', { scope: 'row', title: name }, short(name, 18)),
      el('td', {}, fmt(m.requests_per_s)), el('td', {}, String(m.queue_items)), el('td', {}, String(m.batches)),
      el('td', {}, fmt(m.mean_batch_size)), el('td', {}, pct(m.padding_efficiency))))
      : el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no per-model data yet'))),
  );
  $('live-panel').dataset.ready = '1';
}

// Every POLL_MS while the page is visible. A 401 stops it until a key is typed (the key form
// polls again at once): asking every two seconds without a key only fills the logs with refusals.
async function poll() {
  state.pollTimer = null;
  if (document.visibilityState !== 'visible' || state.polling) return;
  state.polling = true;
  const key = state.key;
  let again = true;
  try {
    renderLive(await api('GET', '/stats/history'));
    $('live-panel').classList.remove('stale');
  } catch (err) {
    $('live-status').textContent = `Live stats unavailable: ${err.message}`;
    $('live-status').classList.add('bad');
    $('live-panel').classList.add('stale');
    again = err.status !== 401 || state.key !== key; // a key typed meanwhile: try it
  } finally {
    state.polling = false;
    if (again) pollSoon(POLL_MS);
  }
}

function pollSoon(delay) {
  clearTimeout(state.pollTimer);
  state.pollTimer = null;
  if (document.visibilityState === 'visible') state.pollTimer = setTimeout(poll, delay);
}

document.addEventListener('visibilitychange', () => pollSoon(0));

loadModels();
pollSoon(0);
