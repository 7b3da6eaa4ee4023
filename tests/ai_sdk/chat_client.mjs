// Drives parley's /v1/chat with the AI SDK's own chat (AbstractChat: what useChat runs) and its
// DefaultChatTransport, which reads the UI message stream with the SDK's reader and checks every
// part against the SDK's schema. Usage: node chat_client.mjs <path of the ai module> <scenario JSON>
// (the same script drives ai@6 and ai@7). Prints one JSON line: {"steps": [...]} with the chat's
// messages after each step, and the type of every chunk the server sent during it.
import { pathToFileURL } from 'node:url';

const [aiPath, scenarioJson] = process.argv.slice(2);
const ai = await import(pathToFileURL(aiPath).href);
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls, safeValidateUIMessages } = ai;
const scenario = JSON.parse(scenarioJson);

class MemoryState {
  constructor(messages = []) { this.status = 'ready'; this.error = undefined; this.messages = messages; }
  pushMessage(m) { this.messages = [...this.messages, m]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; }
  snapshot(x) { return structuredClone(x); }
}

class NodeChat extends AbstractChat {
  constructor(init) { super({ ...init, state: new MemoryState(init.messages) }); }
  get snapshot() { return this.state.messages; }
}

// The chunk types of the responses (read from a copy of each body beside the SDK's own reader).
let chunkTypes = [];
const reading = new Set();
async function readTypes(body) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const piece of body) {
    buffer += decoder.decode(piece, { stream: true });
    const lines = buffer.split('\n');
    buffer = lines.pop();
    for (const line of lines) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      chunkTypes.push(JSON.parse(line.slice(6)).type);
    }
  }
}
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  if (!response.body) return response;
  const [mine, theirs] = response.body.tee();
  const done = readTypes(mine).finally(() => reading.delete(done));
  reading.add(done);
  return new Response(theirs, { status: response.status, statusText: response.statusText, headers: response.headers });
}

function chat(id, messages = []) {
  const errors = [];
  const c = new NodeChat({
    id,
    messages,
    transport: new DefaultChatTransport({ api: scenario.api, headers: scenario.headers ?? {}, fetch: recordingFetch }),
    sendAutomaticallyWhen: ({ messages }) =>
      lastAssistantMessageIsCompleteWithApprovalResponses({ messages }) ||
      lastAssistantMessageIsCompleteWithToolCalls({ messages }),
    onError: (e) => errors.push(String(e?.message ?? e)),
  });
  c.errors = errors;
  return c;
}

const deadline = Date.now() + (scenario.deadline_ms ?? 30000);
async function settled(c) {
  // An automatic request (after an approval) runs without being awaited: wait for it to end.
  await new Promise((r) => setTimeout(r, 20));
  while (c.status === 'submitted' || c.status === 'streaming') {
    if (Date.now() > deadline) throw new Error(`the chat stayed ${c.status}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  await Promise.all([...reading]);
}

const chats = {};
const steps = [];
for (const step of scenario.steps) {
  if (step.restore) {
    // A reload: a new chat restored from the server's history (useChat({id, messages})).
    const url = scenario.api.replace(/\?.*$/, '') + '/' + encodeURIComponent(step.chat) + '/messages';
    const response = await fetch(url, { headers: scenario.headers ?? {} });
    if (!response.ok) throw new Error(`history: ${response.status} ${await response.text()}`);
    chats[step.chat] = chat(step.chat, (await response.json()).messages);
  }
  const c = (chats[step.chat] ??= chat(step.chat));
  if (step.send !== undefined) await c.sendMessage({ text: step.send, files: step.files, metadata: step.metadata });
  if (step.execute_plan !== undefined) {
    // Approve a draft plan: a user message whose only part is a data part (the SDK's UIMessage
    // takes data parts in any role's message), with the revision of the plan part shown, or one given.
    const plan = c.snapshot.flatMap((m) => m.parts).findLast((p) => p.type === 'data-parley-plan');
    if (!plan) throw new Error('no plan was shown: ' + JSON.stringify(c.snapshot.at(-1)));
    const revision = step.execute_plan === true ? plan.data.revision : step.execute_plan;
    await c.sendMessage({ parts: [{ type: 'data-parley-execute-plan', data: { revision } }] });
  }
  if (step.approve !== undefined) {
    const part = c.snapshot.at(-1).parts.find((p) => p.state === 'approval-requested');
    if (!part) throw new Error('no approval was requested: ' + JSON.stringify(c.snapshot.at(-1)));
    await c.addToolApprovalResponse({ id: part.approval.id, approved: step.approve, reason: step.reason });
  }
  if (step.answer !== undefined) {
    const part = c.snapshot.at(-1).parts.find((p) => p.type === 'dynamic-tool' && p.toolName === 'ask_user' && p.state === 'input-available');
    if (!part) throw new Error('no question was asked: ' + JSON.stringify(c.snapshot.at(-1)));
    await c.addToolOutput({ tool: 'ask_user', toolCallId: part.toolCallId, output: step.answer });
  }
  if (step.resume) await c.resumeStream();
  await settled(c);
  // The SDK's own validator of UI messages (what a server built on the SDK runs) on the chat so far.
  const checked = await safeValidateUIMessages({ messages: c.snapshot });
  steps.push({
    chat: step.chat, status: c.status, errors: [...c.errors], messages: c.snapshot, chunks: chunkTypes,
    valid: checked.success ? true : String(checked.error?.message ?? checked.error),
  });
  c.errors.length = 0;
  chunkTypes = [];
}
console.log(JSON.stringify({ steps }));
