// Signing in with the organisation's authorization server (auth: oauth with ui.client_id): the
// authorization code flow with PKCE (S256), `state` and the `resource` parameter (RFC 8707), run
// by this page as a public client. parley tells the page the endpoints (signin.json); the browser
// talks to the authorization server itself, and parley never sees a code or a refresh token.
//
// The answer at ui/callback is taken only if it carries this tab's `state`, comes from the
// expected issuer (`iss`, RFC 9207) and arrives at exactly the redirect URI the request named.
// Tokens stay in this tab's sessionStorage (never a cookie); a rotating refresh token is
// replaced at each refresh; signing out revokes the refresh token and forgets everything.

import { tokens } from './api.js';
import { byId, say } from './dom.js';

const FLOW_KEY = 'parley.signin.flow'; // the request in flight: state, verifier, redirect URI
const GRANT_KEY = 'parley.signin.grant'; // the refresh token and when the access token expires
const FLOW_MAX_AGE_MS = 10 * 60 * 1000;

let settings = null; // signin.json
let refreshTimer = null;
let onRenewed = () => {};
let refusal = ''; // why the last answer at ui/callback was refused, for the sign-in card

function base64url(bytes) {
  let text = '';
  for (const byte of new Uint8Array(bytes)) text += String.fromCharCode(byte);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomText(size = 32) {
  return base64url(crypto.getRandomValues(new Uint8Array(size)));
}

async function challengeOf(verifier) {
  return base64url(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier)));
}

/** The one redirect URI of this page: ui/callback beside the page, as the browser opened it. */
function redirectUri() {
  return new URL('callback', location.href).href.split(/[?#]/)[0];
}

function read(key) {
  try {
    return JSON.parse(sessionStorage.getItem(key) || 'null');
  } catch {
    return null;
  }
}

class SignInRefused extends Error {}

/** How this parley signs people in ({method: 'oauth' | 'token' | 'unavailable', ...}). */
async function loadSettings() {
  if (settings) return settings;
  try {
    const response = await fetch(new URL('signin.json', import.meta.url), { cache: 'no-store', credentials: 'omit' });
    settings = response.ok ? await response.json() : { method: 'token' };
  } catch {
    settings = { method: 'token' };
  }
  return settings;
}

async function start() {
  const verifier = randomText(48);
  const flow = {
    state: randomText(),
    verifier,
    redirect_uri: redirectUri(),
    issuer: settings.issuer,
    hash: location.hash,
    started: Date.now(),
  };
  sessionStorage.setItem(FLOW_KEY, JSON.stringify(flow));
  const target = new URL(settings.authorization_endpoint);
  const query = {
    response_type: 'code',
    client_id: settings.client_id,
    redirect_uri: flow.redirect_uri,
    scope: settings.scope,
    state: flow.state,
    code_challenge: await challengeOf(verifier),
    code_challenge_method: 'S256',
    resource: settings.resource,
  };
  for (const [name, value] of Object.entries(query)) target.searchParams.set(name, value);
  location.assign(target.href);
}

/** The answer at ui/callback, checked, then exchanged for tokens; throws SignInRefused. */
async function complete() {
  const params = new URLSearchParams(location.search);
  const arrivedAt = location.href.split(/[?#]/)[0];
  const flow = read(FLOW_KEY);
  sessionStorage.removeItem(FLOW_KEY); // single use, whatever the answer
  history.replaceState(null, '', `./${(flow && flow.hash) || ''}`);
  if (!flow || Date.now() - flow.started > FLOW_MAX_AGE_MS) {
    throw new SignInRefused('This sign-in was not started in this tab, or took too long. Sign in again.');
  }
  if (params.get('state') !== flow.state) {
    throw new SignInRefused('The sign-in answer does not belong to this tab’s request (its state differs); nothing was kept. Sign in again.');
  }
  const issuer = params.get('iss');
  if ((issuer === null && settings.iss_parameter_supported) || (issuer !== null && issuer !== flow.issuer)) {
    throw new SignInRefused('The sign-in answer does not come from this parley’s authorization server (its iss differs); nothing was kept.');
  }
  if (flow.redirect_uri !== arrivedAt || flow.issuer !== settings.issuer) {
    throw new SignInRefused('The sign-in answer came back to another address than the one asked for; nothing was kept.');
  }
  if (params.get('error')) {
    throw new SignInRefused(`The authorization server refused: ${params.get('error_description') || params.get('error')}`);
  }
  const code = params.get('code');
  if (!code) throw new SignInRefused('The sign-in answer carries no code. Sign in again.');
  return tokenRequest({
    grant_type: 'authorization_code',
    code,
    redirect_uri: flow.redirect_uri,
    client_id: settings.client_id,
    code_verifier: flow.verifier,
    resource: settings.resource,
  });
}

async function tokenRequest(form) {
  let response;
  try {
    response = await fetch(settings.token_endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' },
      body: new URLSearchParams(form).toString(),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    throw new SignInRefused('The authorization server cannot be reached; try again.');
  }
  let body = {};
  try {
    body = await response.json();
  } catch {
    body = {};
  }
  if (!response.ok || typeof body.access_token !== 'string' || !/^bearer$/i.test(body.token_type || '')) {
    throw new SignInRefused(`The authorization server gave no token: ${body.error_description || body.error || `HTTP ${response.status}`}`);
  }
  keep(body);
  return body.access_token;
}

/** The access token for api.js, and the refresh token (rotated: the new one replaces it). */
function keep(body) {
  tokens.set(body.access_token);
  const previous = read(GRANT_KEY) || {};
  const lifetime = Number(body.expires_in) > 0 ? Number(body.expires_in) * 1000 : null;
  const grant = {
    refresh_token: body.refresh_token || previous.refresh_token || null,
    expires_at: lifetime ? Date.now() + lifetime : null,
  };
  sessionStorage.setItem(GRANT_KEY, JSON.stringify(grant));
  schedule(grant);
}

/** A refresh before the access token expires: at three quarters of its life or a minute before
 * its end, whichever is sooner, but not before half of it. */
function schedule(grant) {
  clearTimeout(refreshTimer);
  if (!grant.refresh_token || !grant.expires_at) return;
  const left = grant.expires_at - Date.now();
  const wait = Math.max(1000, left * 0.5, Math.min(left * 0.75, left - 60_000));
  refreshTimer = setTimeout(renew, wait);
}

async function renew() {
  const grant = read(GRANT_KEY);
  if (!grant || !grant.refresh_token) return;
  try {
    const token = await tokenRequest({
      grant_type: 'refresh_token',
      refresh_token: grant.refresh_token,
      client_id: settings.client_id,
      resource: settings.resource,
    });
    onRenewed(token);
  } catch {
    // The grant ended (revoked, expired): parley will refuse the token, and the page asks again.
    sessionStorage.removeItem(GRANT_KEY);
  }
}

function forget() {
  clearTimeout(refreshTimer);
  sessionStorage.removeItem(GRANT_KEY);
  sessionStorage.removeItem(FLOW_KEY);
}

async function revoke() {
  const grant = read(GRANT_KEY);
  if (!settings || !settings.revocation_endpoint || !grant || !grant.refresh_token) return;
  try {
    await fetch(settings.revocation_endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        token: grant.refresh_token,
        token_type_hint: 'refresh_token',
        client_id: settings.client_id,
      }).toString(),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    // Best effort: the token is forgotten here anyway.
  }
}

export const oauthSignIn = {
  /** At start: completes an answer at ui/callback; returns why it was refused, or ''. */
  async boot({ renewed } = {}) {
    onRenewed = renewed || onRenewed;
    await loadSettings();
    const atCallback = new URL('callback', location.href).pathname === location.pathname;
    if (settings.method !== 'oauth') {
      if (atCallback) history.replaceState(null, '', './');
      return '';
    }
    if (!atCallback) {
      const grant = read(GRANT_KEY);
      if (grant && tokens.get()) schedule(grant);
      return '';
    }
    try {
      await complete();
      return '';
    } catch (error) {
      forget();
      tokens.clear();
      refusal = error instanceof SignInRefused ? error.message : String(error);
      return refusal;
    }
  },

  /** In the sign-in card: the button, instead of the token form, when this parley has it. */
  offer(problem = '') {
    const box = byId('oauth-sign-in');
    if (!settings || settings.method === 'token') {
      box.hidden = true;
      return false;
    }
    box.hidden = false;
    byId('sign-in-form').hidden = true;
    const button = byId('oauth-sign-in-button');
    const where = settings.issuer ? new URL(settings.issuer).host : '';
    byId('sign-in-why').textContent =
      settings.method === 'oauth'
        ? `This parley signs people in with their organisation’s account (${where}).`
        : settings.detail || 'Signing in is unavailable now; try again shortly.';
    button.disabled = settings.method !== 'oauth';
    button.textContent = where ? `Sign in with ${where}` : 'Sign in';
    button.onclick = () => start();
    say(byId('oauth-sign-in-error'), problem || refusal);
    refusal = '';
    button.focus();
    return true;
  },

  forget,

  /** Sign-out: the refresh token revoked where the server allows it, and everything forgotten. */
  async signOut() {
    await revoke();
    forget();
  },
};
