// Server-Sent Events read with fetch and a stream reader: EventSource cannot send an
// Authorization header. A stream that ends or breaks is opened again after the server's
// `retry:` delay, with `Last-Event-ID` set to the last event id seen, so a session's stream goes
// on exactly after it (no gap, no repeat).

import { authHeaders, errorOf, parleyUrl, refused } from './api.js';

/** Yields {id, event, data, retry} for each event of a text/event-stream body. */
export async function* events(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let data = [];
  let id = null;
  let event = null;
  let retry = null;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      for (;;) {
        const end = buffer.search(/[\r\n]/);
        if (end < 0) break;
        // A \r at the end of a chunk may be the first half of \r\n: wait for the next chunk.
        if (buffer[end] === '\r' && end === buffer.length - 1) break;
        const width = buffer[end] === '\r' && buffer[end + 1] === '\n' ? 2 : 1;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + width);
        if (line === '') {
          if (data.length || retry !== null) yield { id, event, data: data.join('\n'), retry };
          data = [];
          id = null;
          event = null;
          retry = null;
          continue;
        }
        if (line.startsWith(':')) continue; // a comment: the heartbeat
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? '' : line.slice(colon + 1);
        if (text.startsWith(' ')) text = text.slice(1);
        if (field === 'data') data.push(text);
        else if (field === 'id') id = text;
        else if (field === 'event') event = text;
        else if (field === 'retry' && /^\d+$/.test(text)) retry = Number(text);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

/**
 * Follow `url` until stop(): `onEvent(json, id)` for each data event, `onState(state, error)` with
 * 'live', 'reconnecting' or 'failed' (an answer that retrying cannot change: 401, 403, 404).
 * `lastEventId` (optional) is where a resumable stream starts.
 */
export function follow(url, { onEvent, onState, lastEventId = null }) {
  const controller = new AbortController();
  let stopped = false;
  let last = lastEventId;
  let retryMs = 1000;

  async function run() {
    while (!stopped) {
      try {
        const headers = { Accept: 'text/event-stream', ...authHeaders() };
        if (last !== null) headers['Last-Event-ID'] = String(last);
        const response = await fetch(parleyUrl(url), {
          headers,
          signal: controller.signal,
          cache: 'no-store',
          credentials: 'omit',
        });
        if (!response.ok) {
          const error = await errorOf(response);
          if ([400, 401, 403, 404].includes(response.status)) {
            onState('failed', error);
            refused(error);
            return;
          }
          onState('reconnecting', error);
        } else {
          onState('live');
          for await (const item of events(response.body)) {
            if (stopped) return;
            if (item.retry !== null) retryMs = item.retry;
            if (!item.data) continue;
            let parsed;
            try {
              parsed = JSON.parse(item.data);
            } catch {
              continue;
            }
            onEvent(parsed, item.id);
            if (item.id !== null) last = item.id;
          }
          if (!stopped) onState('reconnecting');
        }
      } catch (error) {
        if (stopped) return;
        onState('reconnecting', error);
      }
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  }

  run();
  return {
    stop() {
      stopped = true;
      controller.abort();
    },
  };
}
