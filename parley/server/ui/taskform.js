// Task sessions: the kind picked in "New session", a form generated from the agent's
// `input_schema` (strings, numbers, integers, booleans, enums, arrays of scalars, nested objects;
// raw JSON for anything else), checked before sending, the server's refusal shown by field, and a
// completed task's result as formatted JSON. Labels and descriptions come from the agent's file:
// they go in as text, never as markup.

import { el, pretty, say } from './dom.js';

const SCALARS = ['string', 'number', 'integer', 'boolean'];

/** The kind picker and the inputs form of the agent picked, inside `host`. */
export class TaskForm {
  constructor(host) {
    this.host = host;
    this.agent = null;
    this.fields = []; // {path, schema, input, error, read()}
  }

  show(agent) {
    this.agent = agent;
    this.fields = [];
    this.host.replaceChildren();
    if (!agent) return;
    const kinds = agent.kinds || ['chat'];
    this.kind = el('select', { id: 'new-kind', title: 'Kind', onchange: () => this.showInputs() });
    this.kind.append(...kinds.map((k) => el('option', { value: k, text: k })));
    this.kind.value = agent.default_kind || kinds[0];
    const picker = el('label', { class: 'kind-pick' }, 'Kind ', this.kind);
    picker.hidden = kinds.length < 2;
    this.picker = picker;
    this.inputs = el('fieldset', { class: 'task-inputs', id: 'task-inputs' });
    this.host.append(picker, this.inputs);
    this.showInputs();
  }

  get kindValue() {
    return this.kind ? this.kind.value : 'chat';
  }

  /** Whether a first message is needed (a task with inputs may start without one). */
  get messageRequired() {
    return !(this.kindValue === 'task' && this.agent && this.agent.input_schema);
  }

  showInputs() {
    this.fields = [];
    // The picker folds away with the form while the agent's own kind is picked (style.css).
    this.picker.classList.toggle('changed', this.kindValue !== (this.agent.default_kind || 'chat'));
    const schema = this.agent && this.agent.input_schema;
    this.inputs.replaceChildren();
    this.inputs.hidden = !(schema && this.kindValue === 'task');
    // The page checks the inputs itself, with a message by field (the browser's bubbles would
    // stop the form before that, one field at a time).
    const form = this.host.closest('form');
    if (form) form.noValidate = !this.inputs.hidden;
    if (this.inputs.hidden) return;
    this.inputs.append(el('legend', { text: 'Inputs' }));
    this.inputs.append(...this.node([], schema, schema.title || 'inputs', true));
  }

  /** The elements of the field at `path` (an object's become a fieldset of their own). */
  node(path, schema, label, required) {
    if (schema.type === 'object' && schema.properties && path.length > 0) {
      const set = el('fieldset', { class: 'nested', data: { path: path.join('/') } });
      set.append(el('legend', { text: schema.title || label }));
      set.append(...this.children(path, schema));
      return [set];
    }
    if (schema.type === 'object' && schema.properties) return this.children(path, schema);
    return [this.leaf(path, schema, label, required)];
  }

  children(path, schema) {
    const needed = new Set(schema.required || []);
    return Object.entries(schema.properties).flatMap(([name, sub]) =>
      this.node([...path, name], sub || {}, sub && sub.title ? sub.title : name, needed.has(name)),
    );
  }

  leaf(path, schema, label, required) {
    const id = 'in-' + path.join('-').replace(/[^A-Za-z0-9_-]/g, '_');
    const kind = leafKind(schema);
    let input;
    if (kind === 'enum') {
      input = el('select', { id });
      if (!required) input.append(el('option', { value: '', text: '—' }));
      input.append(...schema.enum.map((v, i) => el('option', { value: String(i), text: String(v) })));
    } else if (kind === 'boolean') {
      input = el('input', { id, type: 'checkbox' });
      input.checked = schema.default === true;
    } else if (kind === 'number' || kind === 'integer') {
      input = el('input', { id, type: 'number', step: kind === 'integer' ? '1' : 'any' });
    } else if (kind === 'array' || kind === 'json') {
      const hint = kind === 'array' ? 'one item a line' : 'JSON';
      input = el('textarea', { id, rows: '2', placeholder: hint });
    } else {
      input = el('input', { id, type: 'text' });
    }
    if (schema.default !== undefined && kind !== 'boolean') input.value = initial(kind, schema);
    const error = el('p', { class: 'error field-error', id: id + '-error', role: 'alert', hidden: true });
    input.setAttribute('aria-describedby', error.id);
    const caption = el('span', { text: label + (required ? ' *' : '') });
    const about = schema.description ? el('small', { class: 'hint', text: schema.description }) : null;
    const row = el('div', { class: `field field-${kind}`, data: { path: path.join('/') } });
    row.append(...[el('label', { for: id }, caption), input, about, error].filter(Boolean));
    this.fields.push({ path, schema, kind, input, error, required });
    return row;
  }

  /** The inputs, or null with each wrong field marked (nothing is sent then). */
  collect() {
    if (this.inputs.hidden) return { inputs: undefined, ok: true };
    const inputs = {};
    let ok = true;
    for (const field of this.fields) {
      say(field.error, '');
      field.input.removeAttribute('aria-invalid');
      const [value, problem] = readField(field);
      if (problem) {
        this.mark(field, problem);
        ok = false;
      } else if (value !== undefined) {
        place(inputs, field.path, value);
      }
    }
    return { inputs, ok };
  }

  mark(field, problem) {
    say(field.error, problem);
    field.input.setAttribute('aria-invalid', 'true');
  }

  /** The server's refusal of `inputs` ("a/b: message; c: message"), shown beside each field it
   * names; true when one was shown. */
  showRefusal(error) {
    const body = (error && error.body) || {};
    if (body.field !== 'inputs' || !this.fields.length) return false;
    const detail = String(body.detail || '');
    const list = detail.includes('schema: ') ? detail.slice(detail.indexOf('schema: ') + 8) : detail;
    let shown = false;
    for (const item of list.split('; ')) {
      const colon = item.indexOf(': ');
      if (colon < 0) continue;
      let path = item.slice(0, colon);
      const message = item.slice(colon + 2);
      // A missing property is reported on its parent: the name is in the message.
      const missing = /^'([^']+)' is a required property/.exec(message);
      if (missing) path = path === '(inputs)' ? missing[1] : `${path}/${missing[1]}`;
      const field = this.fields.find((f) => f.path.join('/') === path);
      if (field) {
        this.mark(field, message);
        shown = true;
      }
    }
    return shown;
  }
}

function leafKind(schema) {
  if (Array.isArray(schema.enum) && schema.enum.length) return 'enum';
  if (schema.type === 'array' && schema.items && SCALARS.includes(schema.items.type)) return 'array';
  if (SCALARS.includes(schema.type)) return schema.type;
  return 'json';
}

function initial(kind, schema) {
  if (kind === 'enum') return String(Math.max(0, schema.enum.indexOf(schema.default)));
  if (kind === 'array') return (schema.default || []).join('\n');
  if (kind === 'json') return pretty(schema.default);
  return String(schema.default);
}

/** [value, problem]: the field's value as its schema types it, or what is wrong with it. */
function readField({ schema, kind, input, required }) {
  const raw = input.value;
  if (kind === 'boolean') return [input.checked, null];
  if (kind === 'enum') return raw === '' ? [undefined, null] : [schema.enum[Number(raw)], null];
  if (raw.trim() === '') return [undefined, required ? 'Fill this in.' : null];
  if (kind === 'number' || kind === 'integer') {
    const number = Number(raw);
    if (!Number.isFinite(number)) return [undefined, 'Write a number.'];
    if (kind === 'integer' && !Number.isInteger(number)) return [undefined, 'Write a whole number.'];
    if (schema.minimum !== undefined && number < schema.minimum) return [undefined, `At least ${schema.minimum}.`];
    if (schema.maximum !== undefined && number > schema.maximum) return [undefined, `At most ${schema.maximum}.`];
    return [number, null];
  }
  if (kind === 'array') return readArray(schema.items, raw);
  if (kind === 'json') {
    try {
      return [JSON.parse(raw), null];
    } catch {
      return [undefined, 'Write valid JSON.'];
    }
  }
  if (schema.minLength !== undefined && raw.length < schema.minLength) {
    return [undefined, `At least ${schema.minLength} characters.`];
  }
  return [raw, null];
}

function readArray(items, raw) {
  const lines = raw.split('\n').filter((line) => line.trim() !== '');
  const values = [];
  for (const line of lines) {
    if (items.type === 'string') values.push(line);
    else if (items.type === 'boolean') {
      if (!['true', 'false'].includes(line.trim())) return [undefined, `"${line}" is not true or false.`];
      values.push(line.trim() === 'true');
    } else {
      const number = Number(line);
      if (!Number.isFinite(number) || (items.type === 'integer' && !Number.isInteger(number))) {
        return [undefined, `"${line}" is not a ${items.type === 'integer' ? 'whole number' : 'number'}.`];
      }
      values.push(number);
    }
  }
  return [values, null];
}

function place(target, path, value) {
  let node = target;
  for (const key of path.slice(0, -1)) node = node[key] ??= {};
  node[path.at(-1)] = value;
}

/** A completed task's result, formatted (hidden when the session has none). */
export function showResult(node, session) {
  const result = session ? session.result : null;
  node.hidden = result === null || result === undefined;
  node.replaceChildren();
  if (node.hidden) return;
  node.append(el('h3', { text: 'Result' }), el('pre', { class: 'result-json', text: pretty(result) }));
}

/** Shows the open session's result; one that completed after it was opened is read once. */
export function followResult(node, transcript, read) {
  const session = transcript.session;
  showResult(node, session);
  if (transcript.status !== 'completed' || !session || session.result != null || transcript.resultRead) return;
  transcript.resultRead = true;
  read()
    .then((view) => {
      transcript.session = { ...transcript.session, result: view.result };
      if (node.dataset.sessionId === transcript.sessionId) showResult(node, transcript.session);
    })
    .catch(() => {});
}
