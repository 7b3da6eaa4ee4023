// Preloaded (NODE_OPTIONS="--import <this file's URL>", with DURABLE_TASKS_STORE naming the
// TypeScript SDK's dist/esm/experimental/tasks/stores/in-memory.js) into server-everything, to
// make its tasks outlive the MCP session that created them, as a server with a persistent task
// store would: every InMemoryTaskStore shares one table, any session may look a task up, and a
// closing session does not clear the table (tasks still expire by their TTL).
//
// server-everything as published keeps one store per MCP session and binds each task to its
// session, so a client that reconnects (a new session) can never find its task again.
import { pathToFileURL } from "node:url";

const path = process.env.DURABLE_TASKS_STORE;
if (!path) {
  throw new Error("durable_tasks.mjs: set DURABLE_TASKS_STORE to the SDK's in-memory task store module");
}
const { InMemoryTaskStore } = await import(pathToFileURL(path).href);
const shared = { tasks: new Map(), cleanupTimers: new Map() };
for (const name of Object.keys(shared)) {
  // The constructor's `this.tasks = new Map()` lands in the setter and is dropped.
  Object.defineProperty(InMemoryTaskStore.prototype, name, {
    get: () => shared[name],
    set: () => {},
    configurable: true,
  });
}
const lookup = InMemoryTaskStore.prototype.lookup;
InMemoryTaskStore.prototype.lookup = function (taskId, _sessionId) {
  return lookup.call(this, taskId, undefined);
};
InMemoryTaskStore.prototype.cleanup = function () {};
