// A connect link (#/connect/{flow}): the session's owner, signed in, connects their account at a
// downstream server. parley checks that the person is the owner, answers with the authorization
// server's URL, and sets the cookie that binds the flow to this browser (so this one request
// sends and keeps cookies, unlike the rest of the page's calls); the page then goes there.

import { authHeaders, errorOf, parleyUrl } from './api.js';
import { say } from './dom.js';

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
