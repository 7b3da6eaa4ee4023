// A session's plan: the draft a person reviews (Execute plan approves exactly the revision shown,
// Discard plan drops it), then the approved plan, read-only, its todos' statuses kept current by
// the session's plan_updated events. The inbox shows drafts waiting for review as cards too.
// The todos are what a model wrote: text, never HTML.

import { api, ApiError, sessionPath } from './api.js';
import { el, say, when } from './dom.js';

const TODO_STATUS = { pending: 'to do', in_progress: 'in progress', completed: 'done' };
const PLAN_TITLE = { draft: 'Plan to review', active: 'Plan being carried out', completed: 'Plan completed' };

/** Whether `plan` is a plan worth showing (null, or cleared: none). */
export function hasPlan(plan) {
  return Boolean(plan) && plan.status !== 'cleared';
}

/** Whether the plan_updated `next` is newer than `shown`: revisions only grow, and within one
 * revision a draft comes first (approved or discarded after), so an event replayed from before
 * the plan read with the session does not take it back. */
export function isNewer(next, shown) {
  if (!shown) return true;
  if (next.revision !== shown.revision) return next.revision > shown.revision;
  return next.status !== 'draft' || shown.status === 'draft';
}

function todoList(todos) {
  return el(
    'ol',
    { class: 'todos' },
    (todos || []).map((todo) => {
      const status = todo.status || 'pending';
      return el(
        'li',
        { class: `todo ${status}`, data: { status } },
        el('span', { class: 'todo-status', text: TODO_STATUS[status] || status }),
        el('span', { class: 'todo-content', text: todo.content || '' }),
      );
    }),
  );
}

function post(sessionId, tail, body) {
  return api.post(sessionPath(sessionId, `/plan/${tail}`), body);
}

/** A refused execute or discard in plain words, given the plan as it is now. */
function refusalText(error, tried, now) {
  if (!(error instanceof ApiError) || error.kind !== 'plan-refused') return error.message;
  if (now && now.status === 'draft' && tried && now.revision !== tried.revision) {
    return (
      `Not executed: the agent changed the plan while you were reading it (revision ${tried.revision} ` +
      `became revision ${now.revision}). Read the new revision below, then execute it if it is right.`
    );
  }
  if (!now || now.status === 'cleared') return 'Not done: this session has no draft plan any more (it was discarded).';
  if (now.status !== 'draft') return `Not done: the plan was already approved (revision ${now.revision} is ${now.status}).`;
  return 'Not done yet: the session is busy (a turn runs or a message waits). Try again when it is idle.';
}

/** The plan panel of one session's view. `deciderOf()`: the session's entry in the inbox's
 * drafts ({may_decide, decided_by}), or null when unknown. */
export class PlanPanel {
  constructor(node, sessionId, deciderOf) {
    this.node = node;
    this.sessionId = sessionId;
    this.deciderOf = deciderOf;
    this.shown = null; // the plan on the page: what Execute plan approves
    this.latest = null; // the newest plan known (a newer draft waits for the person to look)
    this.followNext = false; // the person sent feedback here: show the draft it brings
    this.busy = false;
    this.mayDecide = undefined; // as last shown: true, false or unknown
    this.error = el('p', { class: 'error', role: 'alert', hidden: true });
  }

  /** The plan as read with the session (or after a refusal): shown as it is. */
  show(plan, message = '') {
    this.shown = this.latest = plan;
    this.render();
    say(this.error, message);
  }

  /** A plan_updated event. A new revision of the draft under review is not swapped in under the
   * person's eyes: the panel says it exists, and Execute plan still names the revision shown. */
  update(plan) {
    this.latest = plan;
    const reviewing = this.shown && this.shown.status === 'draft' && plan.status === 'draft';
    if (reviewing && plan.revision !== this.shown.revision && !this.followNext) {
      this.render();
      return;
    }
    this.followNext = false;
    this.show(plan);
  }

  /** The person sends a message while a draft is shown: feedback, so the next draft is theirs. */
  expectRevision() {
    if (this.shown && this.shown.status === 'draft') this.followNext = true;
  }

  /** The inbox's drafts were read again: the buttons follow who may approve. */
  deciderRead() {
    const decider = this.deciderOf() || {};
    if (decider.may_decide !== this.mayDecide && this.shown && this.shown.status === 'draft') this.render();
  }

  render() {
    const plan = this.shown;
    this.node.hidden = !hasPlan(plan);
    if (!hasPlan(plan)) {
      this.node.replaceChildren();
      return;
    }
    this.node.dataset.status = plan.status;
    this.node.dataset.revision = String(plan.revision);
    const head = el(
      'div',
      { class: 'plan-head' },
      el('h3', { id: 'plan-title', text: PLAN_TITLE[plan.status] || 'Plan' }),
      el('span', { class: 'plan-revision muted', text: `revision ${plan.revision} · ${plan.status}` }),
    );
    const parts = [head, todoList(plan.todos)];
    const newer = this.latest;
    if (plan.status === 'draft' && newer && newer.status === 'draft' && newer.revision !== plan.revision) {
      parts.push(
        el(
          'p',
          { class: 'plan-newer' },
          `The agent has written revision ${newer.revision} since. `,
          el('button', { type: 'button', class: 'show-newer quiet', text: `Show revision ${newer.revision}`, onclick: () => this.show(newer) }),
        ),
      );
    }
    if (plan.status === 'draft') parts.push(this.actions(plan));
    parts.push(this.error);
    this.node.replaceChildren(...parts);
  }

  actions(plan) {
    const decider = this.deciderOf() || {};
    this.mayDecide = decider.may_decide;
    const discard = el('button', { type: 'button', class: 'discard-plan quiet', text: 'Discard plan', onclick: () => this.discard() });
    if (decider.may_decide === false) {
      return el('div', { class: 'plan-actions' }, el('p', { class: 'decided-by muted', text: `Approved by ${decider.decided_by || 'someone else'}.` }), discard);
    }
    const execute = el('button', {
      type: 'button',
      class: 'execute-plan',
      text: 'Execute plan',
      title: `Approve revision ${plan.revision} as shown, and let the agent carry it out`,
      onclick: () => this.execute(plan),
    });
    return el('div', { class: 'plan-actions' }, execute, discard);
  }

  async execute(plan) {
    await this.act(plan, () => post(this.sessionId, 'execute', { revision: plan.revision, wait_seconds: 0 }));
  }

  async discard() {
    await this.act(this.shown, () => post(this.sessionId, 'discard', {}));
  }

  async act(tried, call) {
    if (this.busy) return;
    this.busy = true;
    const buttons = [...this.node.querySelectorAll('.plan-actions button')];
    buttons.forEach((b) => (b.disabled = true));
    say(this.error, '');
    try {
      await call(); // the session's events bring the plan's new status, and new buttons
    } catch (error) {
      await this.refuse(error, tried);
    } finally {
      this.busy = false;
    }
  }

  /** A refusal: the plan is read again and shown as it is now, with why in plain words. */
  async refuse(error, tried) {
    let now = this.latest;
    try {
      now = (await api.get(sessionPath(this.sessionId) + '?messages_limit=1')).plan;
    } catch {
      // shown with the newest plan the events brought
    }
    this.followNext = false;
    this.show(now, refusalText(error, tried, now));
  }
}

/** A draft waiting for review, as an inbox card: its todos, and Execute plan for the revision on
 * the card when the caller may approve it (else who does). `onDecided()` after it was approved,
 * or refused (the list is read again); `note`: a refusal the card this one replaces showed. */
export function draftCard(item, { onDecided, note = '' } = {}) {
  const plan = item.plan;
  const error = el('p', { class: 'error', role: 'alert', hidden: !note, text: note });
  const card = el('li', { class: 'draft', data: { sessionId: item.session_id, revision: String(plan.revision) } });
  const head = el(
    'div',
    { class: 'decision-head' },
    el('a', { class: 'decision-session', href: `#/s/${item.session_id}`, text: item.agent || 'session' }),
    el('span', { class: 'muted', text: ` ${item.session_id.slice(0, 12)}…` }),
  );
  if (item.owner) head.append(el('span', { class: 'muted', text: ` · ${item.owner}` }));
  const updated = when(item.updated_at);
  if (updated) head.append(el('span', { class: 'muted when', text: updated }));
  card.append(
    head,
    el('p', { class: 'decision-title' }, 'Plan to review', item.title ? ': ' : '', item.title ? el('span', { class: 'draft-title', text: item.title }) : ''),
    el('p', { class: 'muted plan-revision', text: `revision ${plan.revision}` }),
    todoList(plan.todos),
  );
  if (item.may_decide === false) {
    card.classList.add('not-mine');
    card.append(el('p', { class: 'decided-by muted', text: `Approved by ${item.decided_by || 'someone else'}.` }));
  } else {
    const execute = el('button', {
      type: 'button',
      class: 'execute-plan',
      text: 'Execute plan',
      onclick: async () => {
        execute.disabled = true;
        say(error, '');
        try {
          await post(item.session_id, 'execute', { revision: plan.revision, wait_seconds: 0 });
          card.classList.add('decided');
          if (onDecided) onDecided();
        } catch (failure) {
          const refused = failure instanceof ApiError && failure.kind === 'plan-refused';
          say(error, refused ? 'Not executed: the plan changed, or the session is busy. The list shows it as it is now.' : failure.message);
          execute.disabled = false;
          if (refused && onDecided) onDecided();
        }
      },
    });
    card.append(el('div', { class: 'decision-actions' }, execute));
  }
  card.append(error);
  return card;
}
