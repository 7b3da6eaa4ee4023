// The "Accounts" view: the downstream services this person has connected parley to (their
// credentials, GET /v1/accounts; never a token), each with a Revoke button behind a
// confirmation step. Revoking deletes only this person's credentials for that server; the next
// call to it asks them to connect again.

import { api } from './api.js';
import { byId, el, say, when } from './dom.js';

function confirmRow(account, cell, done) {
  const ask = el('span', { class: 'confirm' },
    el('span', { text: `Revoke your account for ${account.server}? ` }),
    el('button', {
      type: 'button',
      class: 'danger',
      text: 'Revoke',
      onclick: async () => {
        try {
          await api.delete(`/v1/accounts/${encodeURIComponent(account.server)}`);
          say(byId('accounts-note'), `Revoked your account for ${account.server}.`);
          done();
        } catch (error) {
          say(byId('accounts-note'), error.message);
        }
      },
    }),
    ' ',
    el('button', { type: 'button', class: 'quiet', text: 'Keep', onclick: () => cell.replaceChildren(revokeButton(account, cell, done)) }),
  );
  cell.replaceChildren(ask);
  ask.querySelector('button').focus();
}

function revokeButton(account, cell, done) {
  return el('button', {
    type: 'button',
    class: 'quiet',
    text: 'Revoke…',
    'aria-label': `Revoke your account for ${account.server}`,
    onclick: () => confirmRow(account, cell, done),
  });
}

function row(account) {
  const action = el('td', { class: 'account-action' });
  const line = el(
    'tr',
    { data: { server: account.server } },
    el('th', { scope: 'row', text: account.server }),
    el('td', { text: account.issuer, data: { label: 'Issuer' } }),
    el('td', { text: account.scopes.join(' ') || '-', data: { label: 'Scopes' } }),
    el('td', { text: when(account.connected_at), data: { label: 'Connected' } }),
    el('td', { text: account.expires_at ? when(account.expires_at) : '-', data: { label: 'Token expires' } }),
    action,
  );
  action.append(revokeButton(account, action, () => showAccounts(true)));
  return line;
}

export async function showAccounts(keepNote = false) {
  const body = byId('account-rows');
  const note = byId('accounts-note');
  try {
    const { accounts } = await api.get('/v1/accounts');
    body.replaceChildren(...accounts.map(row));
    byId('accounts-table').hidden = accounts.length === 0;
    if (accounts.length === 0) {
      say(note, 'No connected accounts: parley asks you to connect one when an agent first needs it.');
    } else if (!keepNote) {
      say(note, '');
    }
  } catch (error) {
    body.replaceChildren();
    byId('accounts-table').hidden = true;
    say(note, error.message);
  }
}
