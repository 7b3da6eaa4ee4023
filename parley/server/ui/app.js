// The page: signing in, the session list, one session's transcript with its plan and the
// composer, and the inbox of decisions and draft plans across sessions, kept live by the
// owner-wide stream (/v1/events).

import { api, ApiError, sessionPath, tokens, whenRefused } from './api.js';
import { openConnect, openPage } from './connect.js';
import { decisionCard, showTitle } from './decision.js';
import { byId, el, newId, say, when } from './dom.js';
import { fillFilterAgents, filterQuery, planWords, SessionControls, watchFilter } from './manage.js';
import { draftCard, PlanPanel } from './plan.js';
import { oauthSignIn } from './signin.js';
import { showAccounts } from './accounts.js';
import { showSchedules } from './schedules.js';
import { followResult, TaskForm } from './taskform.js';
import { Attachments } from './attach.js';
import { follow } from './sse.js';
import { Transcript } from './transcript.js';

// The tabs, shown once signed in.
const NAV = ['nav-sessions', 'nav-inbox', 'nav-schedules', 'nav-accounts'];

const state = {
  open: false, // auth: none: nobody signs in, and decisions here are not a person's
  transcript: null,
  plan: null, // the open session's PlanPanel
  owner: null,
  agents: [],
  pending: [],
  drafts: [],
  refreshTimer: null,
  controls: null, // the open session's header controls (manage.js)
  titles: new Map(), // session id -> {title, agent}, for the inbox's cards
  listFilter: '', // the filter of the sessions listed
  listWanted: 20, // how many sessions the person asked to see (a page more with "Show more")
  listAsked: 0, // the number of the latest list request (older answers are dropped)
};

// ---- signing in -------------------------------------------------------------------------------

async function boot() {
  byId('sign-in-form').addEventListener('submit', signIn);
  byId('sign-out').addEventListener('click', signOut);
  byId('new-session').addEventListener('submit', startSession);
  byId('new-agent').addEventListener('change', describeAgent);
  taskForm = new TaskForm(byId('task-form'));
  attachments = new Attachments({
    form: byId('composer'),
    input: byId('attach-input'),
    list: byId('attach-list'),
    error: byId('attach-error'),
  });
  byId('attach').addEventListener('click', () => byId('attach-input').click());
  byId('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    sendMessage(false);
  });
  byId('composer-text').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendMessage(false);
    }
  });
  byId('steer').addEventListener('click', () => sendMessage(true));
  byId('cancel').addEventListener('click', cancelTurn);
  byId('more-sessions').addEventListener('click', () => refreshSessions(true));
  watchFilter(() => refreshSessions());
  state.controls = new SessionControls({
    onChanged: refreshSessionsSoon,
    onDeleted: () => {
      location.hash = '#/';
      refreshSessionsSoon();
    },
  });
  window.addEventListener('hashchange', route);
  watchScrolling();
  // A token that stops working (an OAuth token expires) sends the person back to sign in.
  whenRefused((error) => {
    if (byId('app').hidden) return; // already asking
    if (state.owner) state.owner.stop();
    closeSession();
    tokens.clear();
    oauthSignIn.forget();
    showSignIn(refusal(error), error.challenge);
  });
  await oauthSignIn.boot(); // an answer at ui/callback becomes the token, or a refusal shown below
  await enter(tokens.get());
}

/** Without a token first (a parley with auth: none answers, and then no token is used), else
 * with `token`; show the app, or the sign-in form saying why. */
async function enter(token) {
  let agents;
  try {
    agents = await api.get('/v1/agents', '');
    tokens.clear();
    state.open = true;
  } catch (error) {
    if (!(error instanceof ApiError && (error.status === 401 || error.status === 403))) {
      showTrouble(error);
      return;
    }
    if (!token) {
      showSignIn('', error.challenge);
      return;
    }
    try {
      agents = await api.get('/v1/agents', token);
    } catch (refused) {
      if (refused instanceof ApiError && (refused.status === 401 || refused.status === 403)) {
        tokens.clear();
        showSignIn(refusal(refused), error.challenge);
      } else {
        say(byId('trouble'), refused.message);
      }
      return;
    }
    tokens.set(token);
    state.open = false;
  }
  say(byId('trouble'), '');
  state.agents = agents.agents;
  attachments.setLimits(agents.attachments);
  showApp();
}

/** A failed call, in the page's trouble line (a refused token is the sign-in form's instead). */
function showTrouble(error) {
  if (error.status === 401 && tokens.get() === '' && byId('app').hidden) return;
  say(byId('trouble'), error.message);
}

function refusal(error) {
  if (error.status === 403) return `This token may not use parley: ${error.message}`;
  return `The token was refused: ${error.message}`;
}

function showSignIn(problem, challenge) {
  byId('app').hidden = true;
  byId('sign-in').hidden = false;
  byId('sign-out').hidden = true;
  for (const id of NAV) byId(id).hidden = true;
  byId('notice').hidden = true;
  byId('who').textContent = '';
  say(byId('trouble'), '');
  say(byId('sign-in-error'), problem);
  byId('sign-in-why').textContent = /resource_metadata/.test(challenge || '')
    ? 'This parley takes OAuth access tokens. Paste an access token for parley from your ' +
      'organisation’s authorization server.'
    : 'This parley asks every caller for a bearer token (auth: tokens). Paste yours.';
  if (oauthSignIn.offer(problem)) return; // signin.js: a button instead of the token form
  byId('token').focus();
}

async function signIn(event) {
  event.preventDefault();
  const token = byId('token').value.trim();
  if (!token) {
    say(byId('sign-in-error'), 'Paste a token first.');
    return;
  }
  byId('token').value = '';
  await enter(token);
}

async function signOut() {
  await oauthSignIn.signOut();
  tokens.clear();
  location.hash = '#/';
  location.reload();
}

function showApp() {
  byId('sign-in').hidden = true;
  byId('app').hidden = false;
  for (const id of NAV) byId(id).hidden = false;
  byId('sign-out').hidden = state.open;
  byId('who').textContent = state.open ? 'not signed in (auth: none)' : 'signed in';
  const notice = byId('notice');
  if (state.open) {
    notice.textContent =
      'Not signed in (auth: none): what you decide here is not a person’s decision, so agents with ' +
      'approver: human refuse it (decide theirs with parley approve on the server).';
    notice.title = notice.textContent;
    notice.hidden = false;
    const note = byId('inbox-note');
    note.textContent = 'Not signed in: agents that take decisions only from a person will refuse yours.';
    note.hidden = false;
  }
  fillAgents();
  followOwner();
  refreshSessions();
  route();
}

// ---- routes -----------------------------------------------------------------------------------

function route() {
  const hash = location.hash || '#/';
  const session = hash.match(/^#\/s\/([A-Za-z0-9_-]+)$/);
  const connecting = hash.match(/^#\/connect\/(flow_[0-9a-f]+)$/);
  const visiting = hash.match(/^#\/open\/(ses_[0-9a-f]+)\/(int_[0-9a-f]+)$/);
  if (!visiting) byId('inbox-page').replaceChildren();
  document.body.classList.remove('view-sessions', 'view-session', 'view-inbox', 'view-schedules', 'view-accounts');
  const views = { '#/inbox': 'nav-inbox', '#/schedules': 'nav-schedules', '#/accounts': 'nav-accounts' };
  for (const id of NAV) byId(id).classList.toggle('active', (views[hash] || 'nav-sessions') === id);
  if (session) {
    document.body.classList.add('view-session');
    openSession(session[1]);
  } else if (connecting) {
    document.body.classList.add('view-inbox');
    openConnect(connecting[1], byId('inbox-note'));
  } else if (visiting) {
    document.body.classList.add('view-inbox');
    openPage(visiting[1], visiting[2], byId('inbox-note'), byId('inbox-page'));
  } else if (hash === '#/inbox') {
    document.body.classList.add('view-inbox');
  } else if (hash === '#/schedules') {
    document.body.classList.add('view-schedules');
    showSchedules();
  } else if (hash === '#/accounts') {
    document.body.classList.add('view-accounts');
    showAccounts();
  } else {
    document.body.classList.add('view-sessions');
    closeSession();
  }
  markSelected();
}

// ---- the session list and starting one --------------------------------------------------------

// The kind and inputs of "New session" (taskform.js).
let taskForm = null;
// The files the composer sends with the next message (attach.js).
let attachments = null;

function fillAgents() {
  const select = byId('new-agent');
  select.replaceChildren(...state.agents.map((a) => el('option', { value: a.name, text: a.name })));
  describeAgent();
  fillFilterAgents(state.agents);
}

function describeAgent() {
  const agent = state.agents.find((a) => a.name === byId('new-agent').value);
  byId('new-agent-about').textContent = agent ? agent.description : '';
  taskForm.show(agent);
  byId('new-message').required = taskForm.messageRequired;
  taskForm.kind.addEventListener('change', () => (byId('new-message').required = taskForm.messageRequired));
}

function refreshSessionsSoon() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => refreshSessions(), 250);
}

/** The sessions the filter asks for again, as many as the person asked to see (`more`: a page
 * more). A live refresh keeps what "Show more" opened; an answer overtaken by a newer one is
 * dropped. */
async function refreshSessions(more = false) {
  const filter = filterQuery();
  if (filter !== state.listFilter) state.listWanted = PAGE_SIZE;
  if (more) state.listWanted += PAGE_SIZE;
  const asked = ++state.listAsked;
  let listed;
  try {
    listed = await readSessions(filter, state.listWanted);
  } catch (error) {
    showTrouble(error);
    return;
  }
  if (asked !== state.listAsked) return;
  state.listFilter = filter;
  say(byId('trouble'), '');
  byId('more-sessions').hidden = !listed.next_cursor;
  const list = byId('session-list');
  for (const s of listed.sessions) state.titles.set(s.session_id, { title: s.title, agent: s.agent });
  list.replaceChildren(...listed.sessions.map(sessionItem));
  const none = list.children.length === 0;
  byId('session-list-empty').hidden = !none || Boolean(filter);
  byId('session-list-none').hidden = !none || !filter;
  markSelected();
}

/** Up to `wanted` sessions (pages of at most 100, the server's limit) and the cursor after them. */
async function readSessions(filter, wanted) {
  const sessions = [];
  let cursor = null;
  do {
    const after = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const page = await api.get(`/v1/sessions?limit=${Math.min(100, wanted - sessions.length)}${filter ? `&${filter}` : ''}${after}`);
    sessions.push(...page.sessions);
    cursor = page.next_cursor;
  } while (cursor && sessions.length < wanted);
  return { sessions, next_cursor: cursor };
}

const PAGE_SIZE = 20;

function sessionItem(s) {
  const plan = s.plan_status === 'draft' ? planWords('draft') : '';
  // A failed last turn leaves the session idle (it takes the next message): say so, with why.
  const failed = s.last_error && s.status !== 'running' ? s.last_error : '';
  return el(
    'li',
    { data: { sessionId: s.session_id } },
    el(
      'a',
      { href: `#/s/${s.session_id}` },
      el('span', { class: 'agent', text: s.agent }),
      el('span', { class: `status ${s.status}`, text: statusText(s.status) }),
      ...(plan ? [el('span', { class: 'plan-badge', text: plan })] : []),
      ...(s.title ? [el('span', { class: 'title', text: s.title })] : []),
      ...(failed ? [el('span', { class: 'failure small', text: `Last turn failed: ${failed}`, title: failed })] : []),
      ...(s.tags && s.tags.length ? [el('span', { class: 'tags muted small', text: s.tags.map((t) => `#${t}`).join(' ') })] : []),
      el('span', { class: 'muted small', text: `${s.turn_count} turn${s.turn_count === 1 ? '' : 's'} · ${when(s.updated_at)}` }),
      el('span', { class: 'muted small mono', text: s.session_id }),
    ),
  );
}

function markSelected() {
  const current = state.transcript ? state.transcript.sessionId : null;
  for (const item of byId('session-list').children) {
    item.classList.toggle('selected', item.dataset.sessionId === current);
  }
}

function statusText(status) {
  return (status || '').replaceAll('_', ' ');
}

async function startSession(event) {
  event.preventDefault();
  const form = byId('new-session');
  const message = byId('new-message').value;
  const button = form.querySelector('button');
  button.disabled = true;
  say(byId('new-session-error'), '');
  const { inputs, ok } = taskForm.collect();
  if (!ok) {
    button.disabled = false;
    say(byId('new-session-error'), 'Some inputs need a fix (marked below each).');
    return;
  }
  try {
    const body = { agent: byId('new-agent').value, wait_seconds: 0, client_message_id: newId() };
    if (message.trim()) body.message = message;
    if (taskForm.kindValue !== 'chat') body.kind = taskForm.kindValue;
    if (inputs !== undefined) body.inputs = inputs;
    const started = await api.post('/v1/sessions', body);
    byId('new-message').value = '';
    location.hash = `#/s/${started.session_id}`;
    refreshSessionsSoon();
  } catch (error) {
    const byField = taskForm.showRefusal(error);
    say(byId('new-session-error'), byField ? 'parley refused some inputs (marked below each).' : error.message);
  } finally {
    button.disabled = false;
  }
}

// ---- one session ------------------------------------------------------------------------------

function closeSession() {
  if (state.transcript) state.transcript.close();
  state.transcript = null;
  state.plan = null;
  byId('plan').replaceChildren();
  byId('plan').hidden = true;
  byId('session-view').hidden = true;
  byId('session-none').hidden = false;
  byId('queued').replaceChildren();
  byId('queued').hidden = true;
  if (state.controls) state.controls.reset();
}

async function openSession(sessionId) {
  if (state.transcript && state.transcript.sessionId === sessionId) return;
  closeSession();
  const list = byId('transcript');
  list.replaceChildren();
  delete list.dataset.lastSeq;
  atBottom = true;
  byId('session-title').textContent = sessionId;
  byId('session-status').textContent = '';
  byId('session-none').hidden = true;
  byId('session-view').hidden = false;
  say(byId('composer-error'), '');
  const plan = new PlanPanel(byId('plan'), sessionId, () => state.drafts.find((d) => d.session_id === sessionId));
  const showPlan = (shown, asStored) => (asStored ? plan.show(shown) : plan.update(shown));
  const transcript = new Transcript(sessionId, list, byId('queued'), showSessionState, showPlan);
  state.transcript = transcript;
  state.plan = plan;
  markSelected();
  try {
    await transcript.open();
  } catch (error) {
    if (state.transcript === transcript) say(byId('composer-error'), error.message);
  }
}

function showSessionState(transcript, streamState, error) {
  if (transcript !== state.transcript) return;
  const session = transcript.session;
  if (session) state.controls.show({ ...session, plan: transcript.plan }, transcript.status);
  byId('task-result').dataset.sessionId = transcript.sessionId;
  followResult(byId('task-result'), transcript, () => api.get(sessionPath(transcript.sessionId) + '?messages_limit=1'));
  state.controls.showFailure(transcript.lastFailure);
  const status = byId('session-status');
  status.textContent = statusText(transcript.status);
  status.className = `status ${transcript.status}`;
  byId('session-view').dataset.status = transcript.status;
  if (streamState) {
    const shown = { live: 'live', reconnecting: 'reconnecting…', failed: 'stopped' }[streamState];
    byId('stream-state').textContent = shown;
    byId('stream-state').dataset.state = streamState;
    if (streamState === 'failed' && error) say(byId('composer-error'), error.message);
  }
  const ended = ['closed', 'completed', 'failed', 'deleted'].includes(transcript.status);
  const busy = ['running', 'waiting_for_input'].includes(transcript.status);
  byId('composer-text').disabled = ended;
  byId('send').disabled = ended;
  byId('steer').disabled = !busy;
  byId('cancel').disabled = !busy;
  followNewest();
}

// The transcript follows the newest part unless the person scrolled up to read.
let atBottom = true;

function followNewest() {
  const list = byId('transcript');
  if (atBottom) list.scrollTop = list.scrollHeight;
}

function watchScrolling() {
  const list = byId('transcript');
  list.addEventListener('scroll', () => {
    atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
  });
  // New parts (and a narrower window) make the list taller: stay at the bottom if it was there.
  const observer = new ResizeObserver(followNewest);
  observer.observe(list);
  new MutationObserver(followNewest).observe(list, { childList: true, subtree: true, characterData: true });
}

async function sendMessage(steer) {
  const transcript = state.transcript;
  const box = byId('composer-text');
  const message = box.value;
  if (!transcript || !message.trim()) {
    say(byId('composer-error'), 'Write a message first.');
    return;
  }
  say(byId('composer-error'), '');
  if (state.plan) state.plan.expectRevision();
  try {
    const body = { message, wait_seconds: 0, client_message_id: newId() };
    const files = await attachments.blocks();
    if (files) body.attachments = files;
    await api.post(sessionPath(transcript.sessionId, steer ? '/steer' : '/messages'), body);
    box.value = '';
    attachments.clear();
  } catch (error) {
    say(byId('composer-error'), attachments.explain(error.message));
  }
}

async function cancelTurn() {
  const transcript = state.transcript;
  if (!transcript) return;
  try {
    await api.post(sessionPath(transcript.sessionId, '/cancel'), { wait_seconds: 0 });
  } catch (error) {
    say(byId('composer-error'), error.message);
  }
}

// ---- the inbox and the owner-wide stream -------------------------------------------------------

function followOwner() {
  if (state.owner) state.owner.stop();
  state.owner = follow('/v1/events', {
    onEvent(event) {
      if (event.kind === 'snapshot') {
        for (const s of event.sessions || []) state.titles.set(s.session_id, { title: s.title, agent: s.agent });
        showPending(event.pending, event.drafts || []);
        refreshSessionsSoon();
        return;
      }
      // A turn that ends (cancelled, closed) takes what it waited for with it, without a decision.
      // A plan written, approved or discarded changes the drafts waiting for review.
      if (
        ['interrupt_raised', 'interrupt_resolved', 'turn_ended', 'session_closed', 'session_deleted', 'plan_updated', 'plan_execution_started'].includes(
          event.kind,
        )
      ) {
        refreshPending();
      }
      if (
        [
          'session_created',
          'session_updated',
          'session_deleted',
          'turn_started',
          'turn_ended',
          'turn_parked',
          'session_closed',
          'session_completed',
          'session_failed',
          'plan_updated',
        ].includes(event.kind)
      ) {
        refreshSessionsSoon();
      }
    },
    onState(streamState, error) {
      if (streamState === 'failed' && error) showTrouble(error);
    },
  });
}

async function refreshPending() {
  try {
    const found = await api.get('/v1/pending?limit=200');
    showPending(found.pending, found.drafts || []);
  } catch (error) {
    showTrouble(error);
  }
}

function showPending(pending, drafts) {
  state.pending = pending;
  const inbox = byId('inbox');
  // Cards already shown stay (with what the person typed in them); new ones are added.
  const shown = new Map([...inbox.children].map((card) => [card.dataset.interruptId, card]));
  const wanted = new Set(pending.map((p) => p.interrupt.id));
  for (const [id, card] of shown) if (!wanted.has(id)) card.remove();
  for (const item of pending) {
    if (!shown.has(item.interrupt.id)) {
      const known = state.titles.get(item.session_id);
      const card = decisionCard({ ...item, title: known && known.title }, { showSession: true, onDecided: refreshPending });
      inbox.append(card);
      if (!known) titleOf(item.session_id).then((title) => showTitle(card, title));
    }
  }
  showDrafts(drafts);
  const waiting = pending.length + drafts.length;
  const count = byId('inbox-count');
  const before = count.hidden ? 0 : Number(count.textContent);
  count.textContent = String(waiting);
  count.hidden = waiting === 0;
  byId('inbox-empty').hidden = waiting > 0;
  // Said once to a screen reader when more comes in (the badge alone is silent).
  if (waiting > before) {
    byId('live').textContent = waiting === 1 ? 'One decision waits for you in the inbox.' : `${waiting} decisions wait for you in the inbox.`;
  }
}

/** A session's title, read once (a session the list does not show); '' when it cannot be read. */
async function titleOf(sessionId) {
  try {
    const view = await api.get(sessionPath(sessionId) + '?messages_limit=1');
    state.titles.set(sessionId, { title: view.title, agent: view.agent });
    return view.title || '';
  } catch {
    return ''; // an approver who may not read the session: its id and agent are shown
  }
}

/** The drafts waiting for review: a card per session and revision (a new revision is a new card,
 * so its Execute plan names the revision it shows). */
function showDrafts(drafts) {
  state.drafts = drafts;
  const list = byId('inbox-drafts');
  const key = (sessionId, revision) => `${sessionId}:${revision}`;
  const shown = new Map([...list.children].map((card) => [key(card.dataset.sessionId, card.dataset.revision), card]));
  const replaced = new Map();
  for (const [id, card] of shown) {
    if (drafts.some((d) => key(d.session_id, d.plan.revision) === id)) continue;
    const refusal = card.querySelector('.error:not([hidden])');
    if (refusal) replaced.set(card.dataset.sessionId, refusal.textContent);
    card.remove();
  }
  for (const item of drafts) {
    if (!shown.has(key(item.session_id, item.plan.revision))) {
      list.append(draftCard(item, { onDecided: refreshPending, note: replaced.get(item.session_id) }));
    }
  }
  byId('drafts-title').hidden = drafts.length === 0;
  if (state.plan) state.plan.deciderRead();
}

boot();
