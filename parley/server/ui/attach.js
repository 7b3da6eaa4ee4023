// Attachments in the composer: files picked, dropped or pasted, checked against the server's
// limits (`attachments:` as /v1/agents says them) before anything is sent, sent as MCP content
// blocks with the message; and a message's attachments in the transcript: images inline, other
// files as links. The server checks every file again (its type by its bytes too) and its refusal
// is shown with its reason. File names are text, never markup.

import { authHeaders, sessionPath } from './api.js';
import { el, say } from './dom.js';

export class Attachments {
  constructor({ form, input, list, error }) {
    this.files = [];
    this.limits = null;
    this.list = list;
    this.error = error;
    input.addEventListener('change', () => {
      this.add(input.files);
      input.value = '';
    });
    form.addEventListener('dragover', (event) => event.preventDefault());
    form.addEventListener('drop', (event) => {
      event.preventDefault();
      this.add(event.dataTransfer.files);
    });
    form.addEventListener('paste', (event) => {
      if (event.clipboardData && event.clipboardData.files.length) this.add(event.clipboardData.files);
    });
  }

  setLimits(limits) {
    this.limits = limits || null;
  }

  /** Take `files`, each checked first; a refused one is said with its reason and left out. */
  add(files) {
    const problems = [];
    for (const file of Array.from(files || [])) {
      const problem = this.problem(file);
      if (problem) problems.push(problem);
      else this.files.push(file);
    }
    say(this.error, problems.join(' '));
    this.show();
  }

  problem(file) {
    const limits = this.limits;
    if (!limits) return null;
    const type = file.type || 'application/octet-stream';
    if (this.files.length >= limits.max_count) {
      return `'${file.name}' is one too many: this server takes at most ${limits.max_count} a message.`;
    }
    if (file.size > limits.max_bytes) {
      return `'${file.name}' is ${file.size} bytes; this server takes at most ${limits.max_bytes}.`;
    }
    const kind = type.split('/')[0];
    if (!limits.mime_types.some((t) => t === type || t === `${kind}/*`)) {
      return `'${file.name}' is ${type}; this server takes ${limits.mime_types.join(', ')}.`;
    }
    return null;
  }

  show() {
    this.list.hidden = !this.files.length;
    this.list.replaceChildren(
      ...this.files.map((file, index) =>
        el(
          'li',
          { class: 'attached' },
          el('span', { class: 'name', text: file.name }),
          el('button', {
            type: 'button',
            class: 'secondary remove-file',
            text: 'Remove',
            'aria-label': `Remove ${file.name}`,
            onclick: () => {
              this.files.splice(index, 1);
              this.show();
            },
          }),
        ),
      ),
    );
  }

  /** The files as MCP content blocks (undefined: none). */
  async blocks() {
    if (!this.files.length) return undefined;
    return Promise.all(this.files.map(block));
  }

  /** The server's refusal, naming the file it means ("attachments[1]" is the second file). */
  explain(message) {
    return String(message).replace(/'?attachments\[(\d+)\][^']*'?/, (whole, index) =>
      this.files[Number(index)] ? `'${this.files[Number(index)].name}'` : whole,
    );
  }

  clear() {
    this.files = [];
    say(this.error, '');
    this.show();
  }
}

async function block(file) {
  const data = await base64(file);
  const type = file.type || 'application/octet-stream';
  const kind = type.split('/')[0];
  if (kind === 'image' || kind === 'audio') return { type: kind, data, mimeType: type, name: file.name };
  return { type: 'resource', resource: { uri: 'file:///' + encodeURIComponent(file.name), mimeType: type, blob: data } };
}

function base64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(',', 2)[1] || '');
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/** A message's attachments under its text: images inline, other files as links that download. */
export function showAttachments(slot, sessionId, attachments) {
  if (!attachments || !attachments.length) return;
  const list = el('ul', { class: 'attachments' });
  for (const item of attachments) {
    const entry = el('li', { class: `attachment ${item.kind}` });
    list.append(entry);
    if (!item.sha256) {
      entry.append(el('span', { text: item.uri ? `${item.name} <${item.uri}>` : item.name }));
      continue;
    }
    const path = sessionPath(sessionId, `/attachments/${item.sha256}`);
    if (item.kind === 'image') {
      const image = el('img', { alt: item.name, title: item.name });
      entry.append(image);
      bytes(path).then((url) => (image.src = url)).catch(() => entry.replaceChildren(el('span', { text: item.name })));
    } else {
      const link = el('a', { href: '#', class: 'file', text: item.name, download: item.name });
      link.addEventListener('click', async (event) => {
        if (link.dataset.ready) return;
        event.preventDefault();
        link.href = await bytes(path);
        link.dataset.ready = '1';
        link.click();
      });
      entry.append(link);
    }
  }
  slot.append(list);
}

// The bytes need the person's token, which an <img> cannot send: fetched, then a blob: URL.
async function bytes(path) {
  const response = await fetch(path, { headers: authHeaders(), credentials: 'omit' });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return URL.createObjectURL(await response.blob());
}
