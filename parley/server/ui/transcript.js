// One session's live transcript, built from its event stream (/v1/sessions/{id}/events) from the
// first event. Each event is applied once, by its sequence number: after a reload the stream is
// read again from the start and shows the same transcript, and a broken stream resumes with
// Last-Event-ID after the last event applied, so nothing is shown twice or missed. The events do
// not carry the person's messages, so those are read from the session (each names its turn).

import { showAttachments } from './attach.js';
import { api, sessionPath } from './api.js';
import { decisionCard, resolutionText } from './decision.js';
import { el, pretty, when } from './dom.js';
import { isNewer } from './plan.js';
import { follow } from './sse.js';

const ENDED = new Set(['closed', 'completed', 'failed']);
// What a turn of plan mode does, said at its top (turn_started carries the mode).
const TURN_MODE = {
  planning: 'Planning: read-only, the agent writes a plan for you to review',
  executing: 'Carrying out the approved plan',
};

export class Transcript {
  /** `list`: the <ol> to fill; `queued`: the <ul> of messages waiting for their turn;
   * `onChange(view)` whenever the status changes; `onPlan(plan, asStored)` when the plan changes
   * (`asStored`: read with the session, else from a plan_updated event). */
  constructor(sessionId, list, queued, onChange, onPlan = () => {}) {
    this.sessionId = sessionId;
    this.list = list;
    this.queued = queued;
    this.queuedTimer = null;
    this.onChange = onChange;
    this.onPlan = onPlan;
    this.plan = null; // {status, revision, todos} or null
    this.streamPlan = null; // the plan as of the last event applied
    this.lastSeq = 0;
    this.turns = new Map(); // turn id -> {node, body, step, userSlot}
    this.calls = new Map(); // call id -> node
    this.interrupts = new Map(); // interrupt id -> card slot
    this.undecided = new Set(); // interrupt ids raised and not resolved
    this.userTexts = new Map(); // turn id -> [text]
    this.userFiles = new Map(); // turn id -> [attachment reference] (attach.js shows them)
    this.messagesRead = 0; // the highest message seq read
    this.status = 'idle';
    this.lastFailure = null; // the error of a last turn that failed
    this.runningTurn = null;
    this.stream = null;
  }

  async open() {
    const view = await api.get(sessionPath(this.sessionId) + '?messages_limit=1');
    this.session = view;
    this.status = view.status;
    const last = view.last_turn;
    if (last && last.status === 'failed') this.lastFailure = last.error || view.last_error || 'no reason recorded';
    this.showQueued(view.queued_messages || []);
    this.onChange(this);
    this.plan = view.plan || null;
    this.onPlan(this.plan, true);
    await this.readMessages();
    if (this.closed) return; // the person went elsewhere meanwhile
    this.stream = follow(sessionPath(this.sessionId, '/events'), {
      onEvent: (event) => this.apply(event),
      onState: (state, error) => this.onChange(this, state, error),
    });
  }

  close() {
    this.closed = true;
    if (this.stream) this.stream.stop();
    clearTimeout(this.queuedTimer);
  }

  /** Messages sent while a turn ran wait for their own turn: shown under the transcript. */
  refreshQueuedSoon() {
    clearTimeout(this.queuedTimer);
    this.queuedTimer = setTimeout(async () => {
      try {
        const view = await api.get(sessionPath(this.sessionId) + '?messages_limit=1');
        this.showQueued(view.queued_messages || []);
      } catch {
        // the next event tries again
      }
    }, 150);
  }

  showQueued(queued) {
    this.queued.replaceChildren(...queued.map((q) => this.queuedItem(q)));
    this.queued.hidden = queued.length === 0;
  }

  /** A waiting message, with a control that takes it back before its turn (and its attachments
   * with it, where nothing else refers to them). */
  queuedItem(q) {
    const error = el('span', { class: 'error', role: 'alert' });
    const remove = el('button', { type: 'button', class: 'quiet remove-queued', text: 'Remove', 'aria-label': 'Remove this waiting message' });
    const item = el('li', { data: { queuedId: q.id } }, el('span', { class: 'muted', text: 'Waiting to be sent: ' }), el('span', { class: 'text', text: q.message }), remove, error);
    remove.addEventListener('click', async () => {
      remove.disabled = true;
      error.textContent = '';
      try {
        await api.delete(sessionPath(this.sessionId, `/queue/${encodeURIComponent(q.id)}`));
        item.remove();
        this.queued.hidden = this.queued.children.length === 0;
      } catch (failed) {
        error.textContent = failed.message;
        remove.disabled = false;
      }
    });
    return item;
  }

  /** The person's messages, by turn (read again when a turn starts whose message is not known).
   * One read at a time, each message taken once by its number, however many turns ask. */
  readMessages() {
    const previous = (this.reading || Promise.resolve()).catch(() => {});
    this.reading = previous.then(() => this.readNewMessages());
    return this.reading;
  }

  async readNewMessages() {
    for (;;) {
      const from = this.messagesRead + 1;
      const page = await api.get(sessionPath(this.sessionId) + `?messages_from=${from}&messages_limit=200`);
      for (const message of page.messages) {
        if (message.seq <= this.messagesRead) continue;
        this.messagesRead = message.seq;
        if (message.role === 'user' && message.turn_id) {
          const texts = this.userTexts.get(message.turn_id) || [];
          texts.push(message.text);
          this.userTexts.set(message.turn_id, texts);
          const files = this.userFiles.get(message.turn_id) || [];
          this.userFiles.set(message.turn_id, [...files, ...(message.attachments || [])]);
        }
      }
      if (page.messages.length < 200) return;
    }
  }

  apply(event) {
    if (event.kind === 'reset') return;
    if (event.kind === 'state') {
      this.startOver(event);
      return;
    }
    if (event.kind === 'cut_off') return; // the stream reconnects by itself
    if (event.kind === 'session_deleted') {
      this.note('This session was deleted.', 'ended');
      this.setStatus('deleted');
      this.stream.stop();
      return;
    }
    if (typeof event.seq !== 'number' || event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    const handler = HANDLERS[event.kind];
    if (handler) handler.call(this, event);
    this.list.dataset.lastSeq = String(this.lastSeq);
  }

  startOver(event) {
    // The events asked for are no longer kept: show the session as it is now.
    this.list.replaceChildren();
    this.turns.clear();
    this.calls.clear();
    this.interrupts.clear();
    this.undecided.clear();
    this.note('Earlier events are no longer kept; the conversation as stored:', 'muted');
    for (const message of event.session.messages || []) {
      if (message.role === 'user' || message.role === 'assistant') {
        this.list.append(bubble(message.role, message.text));
      }
    }
    this.lastSeq = event.seq;
    this.setStatus(event.session.status);
    this.plan = this.streamPlan = event.session.plan || null;
    this.onPlan(this.plan, true);
  }

  setStatus(status) {
    this.status = status;
    this.onChange(this);
  }

  note(text, kind = '') {
    const node = el('li', { class: `note ${kind}`, text });
    this.list.append(node);
    return node;
  }

  turn(event) {
    let turn = this.turns.get(event.turn_id);
    if (!turn) {
      const body = el('div', { class: 'turn-body' });
      const node = el('li', { class: 'turn', data: { turnId: event.turn_id } }, body);
      this.list.append(node);
      turn = { node, body, step: null, mode: null };
      this.turns.set(event.turn_id, turn);
    }
    return turn;
  }

  /** The assistant text of the model call in progress. */
  step(turn) {
    if (!turn.step) {
      turn.step = bubble('assistant', '');
      turn.step.classList.add('streaming');
      turn.body.append(turn.step);
    }
    return turn.step;
  }

  /** "Fork from here" under an ended turn: a new session of the person's, made of this one up to
   * the end of that turn, opened at once (the original is not changed). */
  offerFork(turnId, turn) {
    if (turn.node.querySelector(':scope > .turn-actions')) return;
    const button = el('button', { type: 'button', class: 'quiet fork', text: 'Fork from here' });
    const error = el('span', { class: 'error', role: 'alert' });
    button.addEventListener('click', async () => {
      button.disabled = true;
      error.textContent = '';
      try {
        const seq = await this.turnSeq(turnId);
        const fork = await api.post(sessionPath(this.sessionId, '/fork'), { at_turn: seq });
        location.hash = `#/s/${fork.session_id}`;
      } catch (failed) {
        error.textContent = failed.message;
      } finally {
        button.disabled = false;
      }
    });
    turn.node.append(el('div', { class: 'turn-actions' }, button, error));
  }

  /** A turn's number, as the session lists its turns (the latest 50), else its place here. */
  async turnSeq(turnId) {
    const view = await api.get(sessionPath(this.sessionId) + '?messages_limit=1');
    const listed = (view.turns || []).find((t) => t.turn_id === turnId);
    if (listed) return listed.seq;
    return [...this.turns.keys()].indexOf(turnId) + 1;
  }

  async showUserText(turnId, slot) {
    if (!this.userTexts.has(turnId)) {
      try {
        await this.readMessages();
      } catch {
        // shown as not available below; the next turn reads again
      }
    }
    const texts = this.userTexts.get(turnId);
    slot.querySelector('.text').textContent = texts ? texts.join('\n\n') : '(message not available)';
    showAttachments(slot, this.sessionId, this.userFiles.get(turnId));
    slot.classList.remove('loading');
  }
}

function bubble(role, text) {
  return el('div', { class: `msg ${role}` }, el('div', { class: 'text', text }));
}

const HANDLERS = {
  session_created(event) {
    const from = event.data.forked_from;
    if (from) {
      const link = el('a', { href: `#/s/${from.session_id}`, text: from.session_id });
      const node = this.note('', 'muted forked-from');
      node.append(`Forked ${when(event.at)} from `, link, ` at the end of turn ${from.turn}, with ${event.data.agent}`);
      return;
    }
    this.note(`Session with ${event.data.agent} started ${when(event.at)}`, 'muted');
  },
  message_queued() {
    this.refreshQueuedSoon();
  },
  message_deleted() {
    this.refreshQueuedSoon();
  },
  session_updated(event) {
    if (!this.session) return;
    this.session = { ...this.session, title: event.data.title, tags: event.data.tags || [] };
    this.onChange(this);
  },
  steer_requested() {
    const turn = this.runningTurn && this.turns.get(this.runningTurn);
    const text = 'Steered: the turn stops after its current step, then the new message is answered.';
    if (turn) turn.body.append(el('div', { class: 'note muted', text }));
    else this.note(text, 'muted');
  },
  turn_started(event) {
    const turn = this.turn(event);
    const mode = event.data.mode;
    if (TURN_MODE[mode]) {
      turn.mode = mode;
      turn.node.dataset.mode = mode;
      turn.body.append(el('div', { class: `turn-mode ${mode}`, text: TURN_MODE[mode] }));
    }
    const slot = bubble('user', '…');
    slot.classList.add('loading');
    turn.body.append(slot);
    this.showUserText(event.turn_id, slot);
    this.refreshQueuedSoon();
    this.runningTurn = event.turn_id;
    this.setStatus('running');
  },
  text_delta(event) {
    const step = this.step(this.turn(event));
    step.querySelector('.text').textContent += event.data.text || '';
  },
  reasoning_delta(event) {
    const turn = this.turn(event);
    if (!turn.reasoning) {
      turn.reasoning = el('details', { class: 'reasoning' }, el('summary', { text: 'Reasoning' }), el('div', { class: 'text' }));
      turn.body.append(turn.reasoning);
    }
    turn.reasoning.querySelector('.text').textContent += event.data.text || '';
  },
  attempt_discarded(event) {
    const turn = this.turn(event);
    if (turn.step) turn.step.querySelector('.text').textContent = '';
  },
  model_retry(event) {
    this.turn(event).body.append(el('div', { class: 'note muted', text: 'The model call is retried.' }));
  },
  model_step(event) {
    const turn = this.turn(event);
    const text = event.data.text || '';
    if (text || turn.step) {
      const step = this.step(turn);
      step.querySelector('.text').textContent = text;
      step.classList.remove('streaming');
    }
    turn.step = null;
    turn.reasoning = null;
  },
  tool_started(event) {
    const call = event.call || { id: event.data.call_id, tool: event.data.tool, arguments: {} };
    const node = el(
      'details',
      { class: 'tool running', data: { callId: call.id } },
      el('summary', {}, el('code', { text: call.tool }), el('span', { class: 'tool-status', text: ' running' })),
      el('pre', { class: 'arguments', text: pretty(call.arguments || {}) }),
    );
    this.calls.set(call.id, node);
    this.turn(event).body.append(node);
  },
  tool_finished(event) {
    const call = event.call || { id: event.data.call_id, status: event.data.status };
    let node = this.calls.get(call.id);
    if (!node) {
      HANDLERS.tool_started.call(this, event);
      node = this.calls.get(call.id);
    }
    node.classList.remove('running');
    node.classList.add(call.is_error ? 'failed' : 'done');
    // A call a planning turn refused: why is shown at once (it never ran).
    if (call.is_error && this.turn(event).mode === 'planning') node.open = true;
    node.querySelector('.tool-status').textContent = ` ${call.status || event.data.status || 'done'}`;
    if (call.result !== undefined && call.result !== null) {
      node.append(el('pre', { class: 'result', text: call.result }));
    }
  },
  plan_updated(event) {
    const plan = { revision: event.data.revision, status: event.data.status, todos: event.data.todos || [] };
    // The transcript tells the plan's story event by event (the same after a reload)...
    const before = this.streamPlan;
    this.streamPlan = plan;
    if (plan.status === 'cleared' && before && before.status === 'draft' && before.revision === plan.revision) {
      this.note('The draft plan was discarded.', 'muted');
    }
    // ...while the panel shows only what is newer than the plan read with the session.
    if (!isNewer(plan, this.plan)) return;
    this.plan = plan;
    this.onPlan(plan, false);
  },
  plan_execution_started(event) {
    const by = event.data.by ? ` by ${event.data.by}` : '';
    const text = `Revision ${event.data.revision} of the plan was approved${by}; the agent carries it out.`;
    this.note(text, 'plan-approved');
  },
  timer_set(event) {
    this.turn(event).body.append(el('div', { class: 'note muted', text: 'Waiting on a timer.' }));
  },
  interrupt_raised(event) {
    const interrupt = event.interrupt;
    if (!interrupt) return;
    const slot = el('div', { class: 'interrupt', data: { turnId: event.turn_id } });
    const card = decisionCard({
      session_id: event.session_id,
      interrupt,
      may_decide: event.may_decide,
      decided_by: event.decided_by,
    });
    slot.append(el('ul', { class: 'inline-decision' }, card));
    this.interrupts.set(interrupt.id, slot);
    this.undecided.add(interrupt.id);
    this.turn(event).body.append(slot);
  },
  interrupt_resolved(event) {
    const interrupt = event.interrupt;
    const slot = interrupt && this.interrupts.get(interrupt.id);
    const text = interrupt ? resolutionText(interrupt) : 'decided';
    const what = interrupt && interrupt.kind === 'approval' ? `${interrupt.tool}: ${text}` : text;
    const resolved = el('div', { class: 'note resolved', text: what });
    if (interrupt) this.undecided.delete(interrupt.id);
    // Nothing left to decide: the turn goes on.
    if (!this.undecided.size && this.status === 'waiting_for_input') this.setStatus('running');
    if (slot) slot.replaceChildren(resolved);
    else this.turn(event).body.append(resolved);
  },
  turn_parked(event) {
    this.setStatus(event.data.waiting_for_input ? 'waiting_for_input' : 'running');
  },
  cancel_requested(event) {
    this.turn(event).body.append(el('div', { class: 'note muted', text: 'Cancelling…' }));
  },
  compacted(event) {
    this.turn(event).body.append(el('div', { class: 'note muted', text: 'Older messages were summarized.' }));
  },
  turn_ended(event) {
    const turn = this.turn(event);
    const status = event.data.status;
    if (turn.step) turn.step.classList.remove('streaming');
    if (status !== 'answered') {
      const text = event.data.error ? `Turn ${status}: ${event.data.error}` : `Turn ${status}.`;
      turn.body.append(el('div', { class: `note ${status === 'failed' ? 'error' : 'muted'}`, text }));
    }
    turn.node.dataset.status = status;
    this.lastFailure = status === 'failed' ? event.data.error || 'no reason recorded' : null;
    // What the ended turn still waited for is no longer asked.
    for (const id of [...this.undecided]) {
      const slot = this.interrupts.get(id);
      if (slot && slot.dataset.turnId === event.turn_id) {
        slot.replaceChildren(el('div', { class: 'note muted', text: 'No longer asked: the turn ended.' }));
        this.undecided.delete(id);
      }
    }
    if (this.runningTurn === event.turn_id) this.runningTurn = null;
    if (!ENDED.has(this.status)) this.setStatus('idle');
    this.offerFork(event.turn_id, turn);
  },
  session_completed() {
    this.note('The task is complete.', 'ended');
    this.setStatus('completed');
  },
  session_failed(event) {
    this.note(`The session failed${event.data.error ? `: ${event.data.error}` : '.'}`, 'error');
    this.setStatus('failed');
  },
  session_closed(event) {
    this.note(`The session is closed${event.data.reason ? `: ${event.data.reason}` : '.'}`, 'ended');
    this.setStatus('closed');
  },
};
