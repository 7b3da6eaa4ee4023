// One interrupt waiting for a decision, as a card: an approval (approve, or reject with a
// reason) or a question (a choice, free text, or decline). The inbox and the transcript show the
// same card.

import { api, sessionPath } from './api.js';
import { el, pretty, say, when } from './dom.js';
import { effectWords } from './manage.js';

/**
 * `item`: {session_id, agent?, title?, owner?, interrupt, may_decide?, decided_by?}; `onDecided()` after
 * the decision was taken.
 * Refusals (an agent that takes decisions only from a person, a conflicting decision) are shown
 * on the card, and the card stays.
 */
export function decisionCard(item, { onDecided, showSession = false } = {}) {
  const interrupt = item.interrupt;
  const error = el('p', { class: 'error', role: 'alert', hidden: true });
  const buttons = [];
  const card = el('li', {
    class: `decision ${interrupt.kind}`,
    data: { interruptId: interrupt.id, sessionId: item.session_id },
  });

  async function decide(path, body) {
    buttons.forEach((b) => (b.disabled = true));
    say(error, '');
    try {
      await api.post(sessionPath(item.session_id, path), { ...body, wait_seconds: 0 });
      card.classList.add('decided');
      if (onDecided) onDecided();
    } catch (failure) {
      say(error, failure.message);
      buttons.forEach((b) => (b.disabled = false));
    }
  }

  function declineButton() {
    return el('button', {
      type: 'button',
      class: 'decline quiet',
      text: 'Decline',
      onclick: () => decide('/answer', { interrupt_id: interrupt.id, decline: true }),
    });
  }

  const head = el('div', { class: 'decision-head' });
  if (showSession) {
    // The session by its title (filled in later with showTitle when not known yet) and agent.
    head.append(
      el('a', { class: 'decision-session', href: `#/s/${item.session_id}`, text: item.title || item.session_id }),
      el('span', { class: 'decision-agent muted', text: ` · ${item.agent || 'agent'}` }),
    );
    if (item.owner) head.append(el('span', { class: 'muted', text: ` · ${item.owner}` }));
  }
  const created = when(interrupt.created_at);
  if (created) head.append(el('span', { class: 'muted when', text: created }));
  card.append(head);

  if (interrupt.kind === 'authorization_required') {
    // Only the session's owner can complete it; parley refuses anyone else when they open it.
    card.append(
      el('p', { class: 'decision-title question-text', text: interrupt.question || `Connect your account at ${interrupt.server}` }),
      el('p', { class: 'muted', text: `Server: ${interrupt.server} (${interrupt.host})` }),
      el('div', { class: 'decision-actions' }, el('a', { class: 'button connect', href: interrupt.connect_url, text: 'Connect' })),
    );
    if (interrupt.deadline) card.append(el('p', { class: 'muted', text: `The link expires at ${when(interrupt.deadline)}` }));
    card.append(error);
    return card;
  }
  if (interrupt.kind === 'approval') {
    card.append(
      el('p', { class: 'decision-title' }, 'Run ', el('code', { text: interrupt.tool || '?' }), '?'),
      el('p', { class: 'effect muted', text: effectWords(interrupt.effect).words, title: effectWords(interrupt.effect).title }),
      el('pre', { class: 'arguments', text: pretty(interrupt.arguments || {}) }),
    );
  } else {
    card.append(el('p', { class: 'decision-title question-text', text: interrupt.question || '' }));
  }
  // The server says when someone else decides (the agent's approvers, or only a person in an
  // MCP client): then the card says who, and offers no buttons that would be refused.
  if (item.may_decide === false) {
    card.classList.add('not-mine');
    card.append(el('p', { class: 'decided-by muted', text: `Decided by ${item.decided_by || 'someone else'}.` }));
  } else if (interrupt.kind === 'approval') {
    const reason = el('input', {
      class: 'reason',
      type: 'text',
      placeholder: 'Reason for rejecting (the agent reads it)',
      'aria-label': 'Reason',
      maxLength: 4000,
    });
    const approve = el('button', {
      type: 'button',
      class: 'approve',
      text: 'Approve',
      onclick: () => decide('/approve', { decisions: [{ interrupt_id: interrupt.id, approved: true }] }),
    });
    const reject = el('button', {
      type: 'button',
      class: 'reject danger',
      text: 'Reject',
      onclick: () => {
        const decision = { interrupt_id: interrupt.id, approved: false };
        if (reason.value.trim()) decision.reason = reason.value;
        decide('/approve', { decisions: [decision] });
      },
    });
    buttons.push(approve, reject);
    card.append(el('div', { class: 'decision-actions' }, reason, approve, reject));
  } else if (interrupt.connect_url) {
    // A page its server asks the owner to open: the link shows the host first, and parley hands
    // the page's address to the session's owner only.
    const decline = declineButton();
    buttons.push(decline);
    card.append(
      el('p', { class: 'muted', text: `Page at ${interrupt.host}, asked for by ${interrupt.server}` }),
      el('div', { class: 'decision-actions' }, el('a', { class: 'button connect', href: interrupt.connect_url, text: `Open ${interrupt.host}` }), decline),
    );
  } else {
    const actions = el('div', { class: 'decision-actions' });
    for (const choice of interrupt.choices || []) {
      const button = el('button', {
        type: 'button',
        class: 'choice secondary',
        text: choice,
        onclick: () => decide('/answer', { interrupt_id: interrupt.id, answer: choice }),
      });
      buttons.push(button);
      actions.append(button);
    }
    if (interrupt.allows_free_text || !(interrupt.choices || []).length) {
      const answer = el('input', { class: 'answer-text', type: 'text', placeholder: 'Your answer', 'aria-label': 'Answer' });
      const send = el('button', {
        type: 'button',
        class: 'answer',
        text: 'Answer',
        onclick: () => decide('/answer', { interrupt_id: interrupt.id, answer: answer.value }),
      });
      answer.addEventListener('keydown', (event) => {
        if (event.key === 'Enter') send.click();
      });
      buttons.push(send);
      actions.append(answer, send);
    }
    const decline = declineButton();
    buttons.push(decline);
    actions.append(decline);
    card.append(actions);
  }
  if (interrupt.deadline) card.append(el('p', { class: 'muted', text: `Decides itself at ${when(interrupt.deadline)}` }));
  card.append(error);
  return card;
}

/** How a resolved interrupt was decided, in words. */
export function resolutionText(interrupt) {
  const res = interrupt.resolution || {};
  if (res.expired) return 'ran out of time';
  if (interrupt.kind === 'authorization_required') return res.declined ? 'not connected' : 'connected';
  if (interrupt.kind === 'approval') {
    return res.approved ? 'approved' : `rejected${res.reason ? `: ${res.reason}` : ''}`;
  }
  if (res.declined) return 'declined';
  return `answered: ${res.answer ?? ''}`;
}

/** Name the card's session by `title` once it is known. */
export function showTitle(card, title) {
  const link = card.querySelector('.decision-session');
  if (link && title) link.textContent = title;
}
