// A connect link (#/connect/{flow}): the session's owner, signed in, connects their account at a
// downstream server. parley checks that the person is the owner, answers with the authorization
// server's URL, and sets the cookie that binds the flow to this browser (so this one request
// sends and keeps cookies, unlike the rest of the page's calls); the page then goes there.

import { api, authHeaders, errorOf, parleyUrl, sessionPath } from './api.js';
import { el, say } from './dom.js';

/** POST the connect call for `flowId` and go to the authorization server; problems go to `note`. */
export async function openConnect(flowId, note) {
  note.hidden = false;
  say(note, 'Connecting your account…');
  let response;
  try {
    response = await fetch(parleyUrl(`/v1/connect/${encodeURIComponent(flowId)}`), {
      method: 'POST',
      headers: { Accept: 'application/json', 'Content-Type': 'application/json', ...authHeaders() },
      body: '{}',
      cache: 'no-store',
      credentials: 'same-origin',
    });
  } catch {
    say(note, 'parley cannot be reached; check that the server runs.');
    return;
  }
  if (!response.ok) {
    say(note, `Not connected: ${(await errorOf(response)).message}`);
    return;
  }
  const { authorize_url: authorizeUrl } = await response.json();
  location.assign(authorizeUrl);
}

/**
 * A page a downstream server asks the session's owner to open (#/open/{session}/{interrupt}):
 * the question and the page's host are shown first, and only "Open" asks parley for the page's
 * address (parley gives it to the owner only) and goes there; "Decline" tells the server no.
 */
export async function openPage(sessionId, interruptId, note, place) {
  place.replaceChildren();
  note.hidden = false;
  say(note, 'Looking up the page…');
  let session;
  try {
    session = await api.get(sessionPath(sessionId));
  } catch (error) {
    say(note, `This page cannot be opened: ${error.message}`);
    return;
  }
  const pending = (session.pending || []).find((p) => p.id === interruptId && p.connect_url);
  if (!pending) {
    say(note, 'This page was opened or declined already, or its question has expired.');
    return;
  }
  say(note, '');
  const problem = el('p', { class: 'error', role: 'alert', hidden: true });
  const open = el('button', {
    type: 'button',
    class: 'approve',
    text: `Open ${pending.host}`,
    onclick: async () => {
      try {
        const { url } = await api.post(sessionPath(sessionId, `/interrupts/${encodeURIComponent(interruptId)}/open`), {});
        location.assign(url);
      } catch (error) {
        say(problem, `Not opened: ${error.message}`);
      }
    },
  });
  const decline = el('button', {
    type: 'button',
    class: 'decline quiet',
    text: 'Decline',
    onclick: async () => {
      try {
        await api.post(sessionPath(sessionId, '/answer'), { interrupt_id: interruptId, decline: true });
        place.replaceChildren();
        say(note, `Declined: ${pending.server} was told you will not open the page.`);
      } catch (error) {
        say(problem, `Not declined: ${error.message}`);
      }
    },
  });
  place.append(
    el(
      'div',
      { class: 'decision card', role: 'group', 'aria-label': 'A page to open' },
      el('p', { class: 'decision-title question-text', text: pending.question || '' }),
      el('p', { class: 'muted', text: `Page at ${pending.host}, asked for by the MCP server ${pending.server}` }),
      el('div', { class: 'decision-actions' }, open, decline),
      problem,
    ),
  );
  open.focus();
}
