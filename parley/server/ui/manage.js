// Managing sessions by hand: the open session's header (its title, tags, plan and a failed last
// turn, with rename, tag editing, close, and delete behind a confirmation step in the page), the
// session list's filter, and an effect class in plain words for the approval cards.

import { api, sessionPath } from './api.js';
import { byId, el, say } from './dom.js';

// What each effect class (docs/mcp-servers.md#effects-and-approval) means to the person deciding.
const EFFECT_WORDS = {
  read: 'only reads; safe to run again',
  idempotent_write: 'may change data; safe to repeat',
  non_idempotent_write: 'may change data; runs once',
  unclassified: 'not classified: may change data; runs once',
};

/** `{words, title}`: the plain words for `effect`, and the class itself for a tooltip. */
export function effectWords(effect) {
  const known = effect || 'unclassified';
  return { words: EFFECT_WORDS[known] || EFFECT_WORDS.unclassified, title: `effect: ${known}` };
}

const PLAN_WORDS = { draft: 'plan to review', active: 'plan being carried out', completed: 'plan completed' };

export function planWords(status) {
  return PLAN_WORDS[status] || '';
}

/** Tags as the person types them: comma- or space-separated, without a leading '#'. */
export function parseTags(text) {
  return text
    .split(/[,\s]+/)
    .map((t) => t.replace(/^#/, ''))
    .filter(Boolean);
}

/** The open session's header and its controls. `onChanged()` after a change the list shows;
 * `onDeleted()` once the session is gone. */
export class SessionControls {
  constructor({ onChanged, onDeleted }) {
    this.onChanged = onChanged;
    this.onDeleted = onDeleted;
    this.session = null;
    this.error = byId('manage-error');
    byId('rename').addEventListener('click', () => this.edit('rename-form', 'rename-input', this.session.title || ''));
    byId('edit-tags').addEventListener('click', () => this.edit('tags-form', 'tags-input', (this.session.tags || []).join(', ')));
    for (const form of ['rename-form', 'tags-form']) {
      byId(form).addEventListener('submit', (event) => this.save(event, form));
      byId(form).querySelector('.cancel').addEventListener('click', () => this.hideForms());
    }
    byId('close-session').addEventListener('click', () => this.closeSession());
    byId('delete-session').addEventListener('click', () => this.askDelete());
    byId('delete-no').addEventListener('click', () => this.hideForms(byId('delete-session')));
    byId('delete-yes').addEventListener('click', () => this.deleteSession());
  }

  /** Fill the header from a session view (get_session) or summary. */
  show(session, status) {
    this.session = session;
    byId('session-title').textContent = session.title ? `${session.title} · ${session.agent}` : `${session.agent} · ${session.session_id}`;
    const tags = byId('session-tags');
    tags.replaceChildren(...(session.tags || []).map((t) => el('span', { class: 'tag', text: `#${t}` })));
    const plan = byId('session-plan');
    const planStatus = session.plan ? session.plan.status : session.plan_status;
    plan.textContent = planWords(planStatus);
    plan.hidden = !plan.textContent;
    byId('session-meta').hidden = !tags.children.length && plan.hidden;
    const ended = ['closed', 'completed', 'failed', 'deleted'].includes(status);
    byId('close-session').disabled = ended;
    byId('rename').disabled = byId('edit-tags').disabled = status === 'deleted';
    byId('delete-session').disabled = status === 'deleted';
  }

  /** A failed last turn, with its error (cleared by a turn that ends otherwise). */
  showFailure(error) {
    const line = byId('session-failure');
    line.replaceChildren();
    if (error) line.append(el('strong', { text: 'Last turn failed: ' }), el('span', { class: 'text', text: error }));
    line.hidden = !error;
  }

  reset() {
    this.session = null;
    this.hideForms();
    this.showFailure('');
    say(this.error, '');
  }

  hideForms(focus) {
    for (const id of ['rename-form', 'tags-form', 'delete-confirm']) byId(id).hidden = true;
    if (focus) focus.focus();
  }

  edit(formId, inputId, value) {
    this.hideForms();
    say(this.error, '');
    byId(formId).hidden = false;
    byId(inputId).value = value;
    byId(inputId).focus();
  }

  async save(event, formId) {
    event.preventDefault();
    const body = formId === 'rename-form' ? { title: byId('rename-input').value.trim() } : { tags: parseTags(byId('tags-input').value) };
    await this.act(async () => {
      const summary = await api.patch(sessionPath(this.session.session_id), body);
      this.show({ ...this.session, title: summary.title, tags: summary.tags }, byId('session-view').dataset.status);
      this.hideForms(byId(formId === 'rename-form' ? 'rename' : 'edit-tags'));
      this.onChanged();
    });
  }

  async closeSession() {
    await this.act(async () => {
      await api.post(sessionPath(this.session.session_id, '/close'), { wait_seconds: 0 });
      this.onChanged();
    });
  }

  askDelete() {
    this.hideForms();
    say(this.error, '');
    byId('delete-confirm').hidden = false;
    byId('delete-no').focus(); // the safe choice first
  }

  async deleteSession() {
    await this.act(async () => {
      await api.delete(sessionPath(this.session.session_id));
      this.hideForms();
      this.onDeleted();
    });
  }

  async act(work) {
    const buttons = document.querySelectorAll('#session-actions button, .inline-edit button, #delete-confirm button');
    buttons.forEach((b) => (b.disabled = true));
    say(this.error, '');
    try {
      await work();
    } catch (error) {
      say(this.error, error.message);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
      if (this.session) this.show(this.session, byId('session-view').dataset.status);
    }
  }
}

/** The session list's query string from the filter form (title text, tag, agent, status). */
export function filterQuery() {
  const params = new URLSearchParams();
  const title = byId('filter-title').value.trim();
  const tag = byId('filter-tag').value.trim().replace(/^#/, '');
  if (title) params.set('title', title);
  if (tag) params.set('tag', tag);
  if (byId('filter-agent').value) params.set('agent', byId('filter-agent').value);
  if (byId('filter-status').value) params.set('status', byId('filter-status').value);
  return params.toString();
}

/** Refill the filter's agent choices (keeping the one chosen). */
export function fillFilterAgents(agents) {
  const select = byId('filter-agent');
  const chosen = select.value;
  select.replaceChildren(el('option', { value: '', text: 'any agent' }), ...agents.map((a) => el('option', { value: a.name, text: a.name })));
  select.value = agents.some((a) => a.name === chosen) ? chosen : '';
}

/** `onChange()` when the filter changes (typing waits a moment). */
export function watchFilter(onChange) {
  let timer = null;
  const soon = () => {
    clearTimeout(timer);
    timer = setTimeout(onChange, 200);
  };
  byId('session-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    clearTimeout(timer);
    onChange();
  });
  for (const id of ['filter-title', 'filter-tag']) byId(id).addEventListener('input', soon);
  for (const id of ['filter-agent', 'filter-status']) byId(id).addEventListener('change', onChange);
}
