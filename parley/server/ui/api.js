// Calls to parley's /v1 routes with the person's token in the Authorization header (never a
// cookie: another site cannot make the browser send it). Errors are problem details (RFC 9457),
// or the bearer gate's {error, error_description}.

const TOKEN_KEY = 'parley.token';

// Where parley is, as the browser sees it: the folder above this file's (/ui/). Every call is
// relative to it, so the page works under a proxy's prefix (/parley/ui/ calls /parley/v1/...).
const BASE = new URL('../', import.meta.url);

/** A parley path ('/v1/agents') as a URL under the base the page was opened at. */
export function parleyUrl(path) {
  return new URL(path.replace(/^\/+/, ''), BASE).href;
}

export class ApiError extends Error {
  constructor(status, body, challenge) {
    super(describe(status, body));
    this.status = status;
    this.body = body || {};
    this.kind = (this.body.type || '').replace('urn:parley:problem:', '') || this.body.error || '';
    this.challenge = challenge || '';
  }
}

function describe(status, body) {
  if (body && body.detail) return body.detail;
  if (body && body.error_description) return body.error_description;
  if (status === 0) return 'parley cannot be reached; check that the server runs.';
  return `parley answered HTTP ${status}.`;
}

export const tokens = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY) || '';
  },
  set(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

// Called with the error when parley refuses the stored token (it expired, or was revoked).
let refusedHandler = null;

export function whenRefused(handler) {
  refusedHandler = handler;
}

export function refused(error) {
  if (refusedHandler && error.status === 401 && tokens.get()) refusedHandler(error);
}

export function authHeaders(token = tokens.get()) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

export async function errorOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  return new ApiError(response.status, body, response.headers.get('www-authenticate'));
}

async function request(method, path, body, token) {
  let response;
  try {
    response = await fetch(parleyUrl(path), {
      method,
      headers: {
        Accept: 'application/json',
        ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
        ...authHeaders(token),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch {
    throw new ApiError(0, null);
  }
  if (!response.ok) {
    const error = await errorOf(response);
    if (token === undefined) refused(error);
    throw error;
  }
  return response.status === 204 ? null : response.json();
}

export const api = {
  get: (path, token) => request('GET', path, undefined, token),
  post: (path, body) => request('POST', path, body),
  patch: (path, body) => request('PATCH', path, body),
  delete: (path) => request('DELETE', path),
};

export function sessionPath(sessionId, tail = '') {
  return `/v1/sessions/${encodeURIComponent(sessionId)}${tail}`;
}
