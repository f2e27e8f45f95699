// Stands in for opencode around the compiled hive plugin: loads it (as many times as asked),
// feeds it events and hook calls read as JSON lines on stdin, and reports on stdout what the
// plugin did to the hook outputs and every client.session.promptAsync call it made.
// Usage: node opencode_driver.mjs <compiled plugin.js>

import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const plugin = await import(pathToFileURL(process.argv[2]).href);
const instances = [];

function out(payload) {
  process.stdout.write(JSON.stringify(payload) + "\n");
}

function fakeClient(index) {
  return {
    session: {
      async promptAsync(options) {
        const failing = instances[index].failPrompts;
        out({ kind: "prompt", instance: index, options, failed: failing });
        if (failing) return { data: undefined, error: { name: "NotFoundError", data: { message: "no such session" } } };
        return { data: undefined, error: undefined };
      },
    },
  };
}

async function run(command) {
  switch (command.do) {
    case "load": {
      const index = instances.length;
      instances.push({ hooks: null, failPrompts: false });
      instances[index].hooks = await plugin.HivePlugin({
        client: fakeClient(index),
        project: { id: "test", worktree: command.directory, time: { created: 0 } },
        directory: command.directory,
        worktree: command.directory,
        experimental_workspace: { register() {} },
        serverUrl: new URL("http://127.0.0.1:4096"),
        $: undefined,
      });
      return { instance: index, hooks: Object.keys(instances[index].hooks).sort() };
    }
    case "exports":
      return { exports: Object.keys(plugin).sort() };
    case "fail_prompts":
      instances[command.instance].failPrompts = command.value;
      return {};
    case "event":
      await instances[command.instance].hooks.event({ event: command.event });
      return {};
    case "hook": {
      const started = performance.now();
      const output = command.output;
      await instances[command.instance].hooks[command.name](command.input, output);
      return { output, ms: performance.now() - started };
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
