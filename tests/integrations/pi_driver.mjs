// Stands in for pi around the compiled hive extension: gives it an ExtensionAPI that records
// registered tools and handlers, then runs tools and emits events read as JSON lines on stdin,
// and reports on stdout every pi.sendUserMessage call the extension made.
// Usage: node pi_driver.mjs <compiled extension.js> <session id> <cwd>

import { Socket } from "node:net";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const [modulePath, sessionId, cwd] = process.argv.slice(2);
const extension = await import(pathToFileURL(modulePath).href);

// Every write the extension makes to a socket (its sidecar link): a test that something did not
// happen compares this count before and after, instead of sleeping.
let socketWrites = 0;
const write = Socket.prototype.write;
Socket.prototype.write = function (...args) {
  if (this !== process.stdout && this !== process.stderr) socketWrites += 1;
  return write.apply(this, args);
};

const tools = new Map();
const handlers = new Map();
const state = { idle: true, failSend: false, name: undefined };

function out(payload) {
  process.stdout.write(JSON.stringify(payload) + "\n");
}

const pi = {
  registerTool(tool) {
    tools.set(tool.name, tool);
  },
  on(event, handler) {
    if (!handlers.has(event)) handlers.set(event, []);
    handlers.get(event).push(handler);
  },
  sendUserMessage(content, options) {
    out({ kind: "user_message", content, options, failed: state.failSend });
    if (state.failSend) throw new Error("This extension ctx is stale");
  },
};

const ctx = {
  cwd,
  hasUI: false,
  sessionManager: { getSessionId: () => sessionId, getSessionName: () => state.name },
  isIdle: () => state.idle,
  signal: undefined,
};

await extension.default(pi);

async function run(command) {
  switch (command.do) {
    case "tools":
      return {
        tools: [...tools.values()].map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })),
        events: [...handlers.keys()].sort(),
      };
    case "socket_writes":
      await new Promise((resolve) => setImmediate(resolve)); // what the last call set off has run
      return { writes: socketWrites };
    case "set":
      Object.assign(state, command.state);
      return {};
    case "emit": {
      const results = [];
      for (const handler of handlers.get(command.event) ?? []) {
        results.push((await handler({ type: command.event, ...command.payload }, ctx)) ?? null);
      }
      return { results };
    }
    case "tool": {
      const controller = new AbortController();
      if (command.abort_after_ms) setTimeout(() => controller.abort(), command.abort_after_ms);
      const started = performance.now();
      try {
        const result = await tools.get(command.name).execute("call-1", command.params ?? {}, controller.signal, undefined, ctx);
        return { result, ms: performance.now() - started };
      } catch (error) {
        return { error: String(error?.message ?? error), ms: performance.now() - started };
      }
    }
    default:
      throw new Error(`unknown command ${command.do}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  try {
    out({ kind: "reply", seq: command.seq, ...(await run(command)) });
  } catch (error) {
    out({ kind: "reply", seq: command.seq, error: String(error?.stack ?? error) });
  }
}
process.exit(0);
