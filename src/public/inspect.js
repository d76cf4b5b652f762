// The live state inspector page: lists sessions, draws the session machine with the current state
// highlighted, shows the actor tree and a scrolling event log. Plain module, no network assets.

/** Rows kept in the event log; older ones scroll away so a long session cannot grow the page without bound. */
const LOG_MAX_ROWS = 500;
/** Redraws of the chart are coalesced: mermaid re-lays out the whole diagram each time. */
const CHART_REDRAW_MS = 150;

const $ = (id) => document.getElementById(id);
const state = {
  selected: null,
  pinned: false,
  chart: '',
  machineId: 'session',
  value: null,
  actors: new Map(),
  drawTimer: null,
  drawing: false,
  pending: false,
};

window.mermaid.initialize({
  startOnLoad: false,
  securityLevel: 'strict',
  theme: matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'default',
});

function chartId(stateNodeId) {
  return stateNodeId.replace(/[^A-Za-z0-9_]/g, '_');
}

/** `{running: {turn: {phase: 'speaking'}}}` → ['running', 'running.turn', 'running.turn.phase.speaking', …]. */
function activePaths(value, prefix = '') {
  if (typeof value === 'string') return [prefix + value];
  if (!value || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, child]) => [prefix + key, ...activePaths(child, `${prefix}${key}.`)]);
}

/** Leaf states only, for the one-line state label. */
function leafPaths(value, prefix = '') {
  if (typeof value === 'string') return [prefix + value];
  if (!value || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, child]) => leafPaths(child, `${prefix}${key}.`));
}

function scheduleChart() {
  if (state.drawTimer) return;
  state.drawTimer = setTimeout(drawChart, CHART_REDRAW_MS);
}

async function drawChart() {
  state.drawTimer = null;
  if (state.drawing) {
    state.pending = true;
    return;
  }
  state.drawing = true;
  try {
    // Leaves are filled; their enclosing states only outlined, so the current leaf stands out.
    const toIds = (paths) => paths.map((path) => chartId(`${state.machineId}.${path}`));
    const leaves = state.value ? toIds(leafPaths(state.value)) : [];
    const parents = state.value ? toIds(activePaths(state.value)).filter((id) => !leaves.includes(id)) : [];
    let text = state.chart;
    if (leaves.length) text += `\n  class ${leaves.join(',')} active`;
    if (parents.length) text += `\n  class ${parents.join(',')} activeParent`;
    const { svg } = await window.mermaid.render(`chart-${Date.now()}`, text);
    $('chart').innerHTML = svg;
  } catch (error) {
    $('chart').textContent = `chart failed to draw: ${error.message}`;
  } finally {
    state.drawing = false;
    if (state.pending) {
      state.pending = false;
      scheduleChart();
    }
  }
}

function showState() {
  $('state').textContent = state.value ? leafPaths(state.value).join(' · ') : 'no session selected';
  $('state').dataset.value = state.value ? activePaths(state.value).join(' ') : '';
}

function showActors() {
  const list = $('actors');
  list.replaceChildren();
  for (const [path, actor] of state.actors) {
    const item = document.createElement('li');
    const depth = path.split('/').length - 1;
    item.style.paddingLeft = `${depth * 16}px`;
    item.textContent = `${depth ? '└ ' : ''}${path.split('/').pop()} (${actor.status})`;
    item.dataset.actor = path;
    if (actor.status !== 'active') item.className = 'stopped';
    list.append(item);
  }
}

function logRow(record) {
  const row = document.createElement('tr');
  const time = new Date(record.at).toISOString().slice(11, 23);
  let cells;
  if (record.type === '@xstate.event')
    cells = [time, `${record.source} → ${record.actor}`, record.event, record.payload ?? ''];
  else if (record.type === '@xstate.actor') cells = [time, record.actor, 'actor created', ''];
  else return null;
  cells.forEach((text, index) => {
    const cell = document.createElement('td');
    cell.textContent = text;
    if (index === 3) cell.className = 'payload';
    row.append(cell);
  });
  return row;
}

function apply(record) {
  if (record.session_id !== state.selected) return;
  if (record.type === '@xstate.actor') {
    state.actors.set(record.actor, { status: 'active' });
    showActors();
  }
  if (record.type === '@xstate.snapshot' && record.actor === 'session') {
    state.value = record.value;
    // Children that left the root snapshot have stopped: kept in the tree, struck through, until reselect.
    const live = new Set((record.children ?? []).map((id) => `session/${id}`));
    for (const [path, actor] of state.actors)
      if (path !== 'session') actor.status = live.has(path) ? 'active' : 'stopped';
    state.actors.set('session', { status: record.status });
    showState();
    showActors();
    scheduleChart();
  }
  const row = logRow(record);
  if (row) {
    const rows = $('log-rows');
    rows.append(row);
    while (rows.children.length > LOG_MAX_ROWS) rows.firstElementChild.remove();
    $('log').scrollTop = $('log').scrollHeight;
  }
}

let source = null;
function select(sessionId) {
  if (state.selected === sessionId) return;
  state.selected = sessionId;
  state.value = null;
  state.actors = new Map();
  $('log-rows').replaceChildren();
  showState();
  showActors();
  scheduleChart();
  source?.close();
  source = new EventSource(`/inspect/events?session_id=${encodeURIComponent(sessionId)}`);
  source.onmessage = (message) => apply(JSON.parse(message.data));
  for (const button of document.querySelectorAll('#sessions button'))
    button.setAttribute('aria-pressed', String(button.dataset.session === sessionId));
}

async function refreshSessions() {
  try {
    const { sessions } = await (await fetch('/inspect/sessions')).json();
    const list = $('sessions');
    list.replaceChildren();
    $('no-sessions').hidden = sessions.length > 0;
    for (const session of sessions) {
      const item = document.createElement('li');
      const button = document.createElement('button');
      button.dataset.session = session.session_id;
      button.setAttribute('aria-pressed', String(session.session_id === state.selected));
      button.setAttribute('aria-label', `Inspect session ${session.session_id}`);
      button.textContent = `${session.session_id.slice(0, 8)} · ${leafPaths(session.value).join(' · ')}`;
      if (session.terminated_at) button.classList.add('ended');
      button.onclick = () => {
        state.pinned = true;
        select(session.session_id);
      };
      item.append(button);
      list.append(item);
    }
    // Follow the newest live session until the developer picks one.
    const newest = sessions.find((session) => !session.terminated_at);
    const selectedGone = !sessions.some((session) => session.session_id === state.selected);
    if (newest && (!state.pinned || selectedGone)) select(newest.session_id);
  } catch {
    // The service restarting: try again on the next tick.
  }
}

const machine = await (await fetch('/inspect/machine')).json();
state.chart = machine.mermaid;
state.machineId = machine.id;
scheduleChart();
await refreshSessions();
setInterval(refreshSessions, 1000);
