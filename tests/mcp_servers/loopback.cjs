// Preloaded (NODE_OPTIONS="--require <this file>") into npm MCP servers that listen on every
// interface (server-everything's HTTP modes call app.listen(PORT)): a TCP listen() without a
// host, or with an all-interfaces host, binds 127.0.0.1 instead.
"use strict";
const net = require("node:net");

const listen = net.Server.prototype.listen;
const EVERYWHERE = new Set([undefined, null, "", "0.0.0.0", "::"]);
const isPort = (value) => typeof value === "number" || (typeof value === "string" && /^\d+$/.test(value));

net.Server.prototype.listen = function (...args) {
  const [first, second] = args;
  if (first !== null && typeof first === "object" && first.path === undefined && EVERYWHERE.has(first.host)) {
    args[0] = { ...first, host: "127.0.0.1" }; // listen({port, host})
  } else if (isPort(first)) {
    if (args.length > 1 && typeof second !== "function" && EVERYWHERE.has(second)) {
      args[1] = "127.0.0.1"; // listen(port, "0.0.0.0", ...)
    } else if (typeof second !== "string") {
      args.splice(1, 0, "127.0.0.1"); // listen(port[, backlog][, callback])
    }
  }
  return listen.apply(this, args);
};
