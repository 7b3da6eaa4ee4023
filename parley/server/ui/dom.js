// Building elements. Text always goes in as textContent, never as HTML: what users, models and
// tools wrote is data, and shown exactly as written.

/** An element: `el('li', {class: 'x', text: 'hello', data: {id: '1'}}, child, ...)`. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'text') node.textContent = String(value);
    else if (key === 'class') node.className = value;
    else if (key === 'data') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== 'string') node[key] = value;
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(typeof child === 'string' ? document.createTextNode(child) : child);
    }
  }
  return node;
}

export function byId(id) {
  return document.getElementById(id);
}

/** Show `text` in an error line (hidden when empty). */
export function say(node, text) {
  node.textContent = text || '';
  node.hidden = !text;
}

export function when(iso) {
  if (!iso) return '';
  const at = new Date(iso);
  const today = new Date().toDateString() === at.toDateString();
  return today ? at.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : at.toLocaleString();
}

/** An id for client_message_id (crypto.randomUUID needs a secure context; this does not). */
export function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return 'ui-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}
