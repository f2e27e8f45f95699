// hive's sidecar client for the plugins that run inside a harness (opencode, pi): one copy,
// written into each plugin by `hive integrations build` and `hive setup` in place of the
// template's client line (integrations/plugin_source.py). Edit it here. It speaks the sidecar's NDJSON protocol over
// its socket, found with `hive status --json` (which starts the sidecar when it is not running),
// and never throws: a failure is a reply with ok false.

import { execFile } from "node:child_process";
import { createConnection, type Socket } from "node:net";

const HIVE_COMMAND: string[] = __HIVE_COMMAND__;

const CALL_TIMEOUT_MS = 1500;
// `hive status` may have to start the sidecar, which waits up to 10 s for it to listen.
const DISCOVER_TIMEOUT_MS = 15000;
const RETRY_MIN_MS = 1000;
const RETRY_MAX_MS = 30000;
const MAX_BUFFER = 8 * 1024 * 1024;

type Reply = { ok: true; result: Record<string, unknown> } | { ok: false; code: string; message: string };

interface Deliver {
  session: string;
  ids: string[];
  text: string;
}

interface Mail {
  ids: string[];
  wake: string[];
  text: string;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function withTimeout<T>(promise: Promise<T>, ms: number, fallback: T): Promise<T> {
  return new Promise<T>((resolve) => {
    const timer = setTimeout(() => resolve(fallback), ms);
    timer.unref?.();
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      () => {
        clearTimeout(timer);
        resolve(fallback);
      },
    );
  });
}

function discoverSocket(): Promise<string | null> {
  return new Promise((resolve) => {
    const [file, ...args] = HIVE_COMMAND;
    if (!file) {
      resolve(null);
      return;
    }
    try {
      const child = execFile(
        file,
        [...args, "status", "--json"],
        { timeout: DISCOVER_TIMEOUT_MS, windowsHide: true, maxBuffer: 1024 * 1024 },
        (error, stdout) => {
          if (error) {
            resolve(null);
            return;
          }
          try {
            const status: unknown = JSON.parse(String(stdout));
            resolve(isRecord(status) && typeof status.socket === "string" ? status.socket : null);
          } catch {
            resolve(null);
          }
        },
      );
      child.on("error", () => resolve(null));
    } catch {
      resolve(null);
    }
  });
}

/** The JSON objects in a stream of newline-ended JSON lines, fed chunk by chunk; null once the
 *  unfinished line grows past MAX_BUFFER (a peer gone wrong: drop the stream). */
class JsonLines {
  private buffer = "";

  feed(chunk: string): Record<string, unknown>[] | null {
    this.buffer += chunk;
    if (this.buffer.length > MAX_BUFFER) return null;
    const lines = this.buffer.split("\n");
    this.buffer = lines.pop() ?? "";
    const found: Record<string, unknown>[] = [];
    for (const line of lines) {
      if (!line.trim()) continue;
      try {
        const value: unknown = JSON.parse(line);
        if (isRecord(value)) found.push(value);
      } catch {
        // not JSON: skipped
      }
    }
    return found;
  }
}

/** One NDJSON connection to the sidecar, reopened with backoff while sessions need push. */
class Link {
  private socket: Socket | null = null;
  private socketPath: string | null = null;
  private lines = new JsonLines();
  private nextId = 1;
  private readonly pending = new Map<number, (reply: Reply) => void>();
  private connecting: Promise<boolean> | null = null;
  private retryAt = 0;
  private backoff = RETRY_MIN_MS;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  // Registration is per connection: the sidecar pushes only to the connection that registered.
  private registered = new Map<string, Promise<boolean>>();
  readonly sessions = new Map<string, Record<string, unknown>>();

  constructor(private readonly onDeliver: (deliver: Deliver) => void) {}

  private connected(): boolean {
    return this.socket !== null && !this.socket.destroyed && !this.socket.connecting;
  }

  private ensureConnected(): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    if (this.connected()) return Promise.resolve(true);
    if (this.connecting) return this.connecting;
    if (Date.now() < this.retryAt) return Promise.resolve(false);
    this.connecting = this.open().then(
      (ok) => {
        this.connecting = null;
        if (ok) {
          this.backoff = RETRY_MIN_MS;
          for (const key of this.sessions.keys()) void this.register(key);
        } else {
          this.scheduleRetry();
        }
        return ok;
      },
      () => {
        this.connecting = null;
        this.scheduleRetry();
        return false;
      },
    );
    return this.connecting;
  }

  private scheduleRetry(): void {
    this.retryAt = Date.now() + this.backoff;
    const delay = this.backoff;
    this.backoff = Math.min(this.backoff * 2, RETRY_MAX_MS);
    if (this.closed || this.retryTimer || this.sessions.size === 0) return;
    // Push only works over a live connection, so come back without waiting for an event.
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.ensureConnected();
    }, delay);
    this.retryTimer.unref?.();
  }

  private async open(): Promise<boolean> {
    // A known socket path is tried first: reconnecting must not spawn a process each time.
    if (this.socketPath && (await this.attach(this.socketPath))) return true;
    const found = await discoverSocket();
    if (!found || this.closed) return false;
    this.socketPath = found;
    return this.attach(found);
  }

  private attach(path: string): Promise<boolean> {
    return new Promise((resolve) => {
      let settled = false;
      const socket = createConnection(path);
      const finish = (ok: boolean): void => {
        if (settled) return;
        settled = true;
        resolve(ok);
      };
      socket.setEncoding("utf8");
      socket.on("connect", () => {
        if (this.closed) {
          socket.destroy();
          finish(false);
          return;
        }
        this.socket = socket;
        this.lines = new JsonLines();
        this.registered = new Map();
        // A plugin must never keep its harness alive (`pi -p` and `opencode run` exit when their run ends).
        socket.unref();
        finish(true);
      });
      socket.on("data", (chunk: string) => this.receive(socket, chunk));
      socket.on("error", () => finish(false));
      socket.on("close", () => {
        finish(false);
        if (this.socket !== socket) return;
        this.socket = null;
        this.registered = new Map();
        for (const resolvePending of this.pending.values()) {
          resolvePending({ ok: false, code: "unreachable", message: "the connection to the hive sidecar closed" });
        }
        this.pending.clear();
        this.scheduleRetry();
      });
    });
  }

  private receive(socket: Socket, chunk: string): void {
    if (this.socket !== socket) return;
    const messages = this.lines.feed(chunk);
    if (messages === null) {
      socket.destroy();
      return;
    }
    for (const message of messages) this.handle(message);
  }

  private handle(message: Record<string, unknown>): void {
    if (message.event === "deliver") {
      if (typeof message.session === "string" && typeof message.text === "string") {
        this.onDeliver({ session: message.session, ids: strings(message.ids), text: message.text });
      }
      return;
    }
    if (typeof message.id !== "number") return;
    const resolvePending = this.pending.get(message.id);
    if (!resolvePending) return;
    this.pending.delete(message.id);
    if (message.ok === true) {
      resolvePending({ ok: true, result: isRecord(message.result) ? message.result : {} });
    } else {
      const error = isRecord(message.error) ? message.error : {};
      resolvePending({
        ok: false,
        code: typeof error.code === "string" ? error.code : "error",
        message: typeof error.message === "string" ? error.message : "the sidecar refused the request",
      });
    }
  }

  /** One request; never rejects. A request that times out drops the connection (a hung sidecar). */
  async call(op: string, args: Record<string, unknown>, timeoutMs = CALL_TIMEOUT_MS): Promise<Reply> {
    const started = Date.now();
    const up = await withTimeout(this.ensureConnected(), Math.min(timeoutMs, DISCOVER_TIMEOUT_MS), false);
    const socket = this.socket;
    if (!up || !socket || !this.connected()) {
      return { ok: false, code: "unreachable", message: "the hive sidecar is not reachable" };
    }
    const id = this.nextId++;
    const reply = new Promise<Reply>((resolve) => this.pending.set(id, resolve));
    // Someone awaits this answer, so the process must stay up for it; an idle connection must not.
    socket.ref();
    try {
      socket.write(JSON.stringify({ ...args, id, op }) + "\n");
    } catch {
      this.pending.delete(id);
      this.idle(socket);
      return { ok: false, code: "unreachable", message: "could not write to the hive sidecar" };
    }
    const timedOut: Reply = { ok: false, code: "timeout", message: "the hive sidecar did not answer in time" };
    const result = await withTimeout(reply, Math.max(timeoutMs - (Date.now() - started), 1), timedOut);
    if (result === timedOut) {
      this.pending.delete(id);
      socket.destroy();
    }
    this.idle(socket);
    return result;
  }

  private idle(socket: Socket): void {
    if (this.pending.size === 0 && !socket.destroyed) socket.unref();
  }

  /** Send without waiting for the answer (confirmations, releases). */
  notify(op: string, args: Record<string, unknown>): void {
    void this.call(op, args);
  }

  /**
   * Tell the sidecar what the harness did, as a hook would (op plugin_event: `event` is the
   * harness's own name for it). Resolves to the text to add to a tool result (turn-tier lessons),
   * "" when there is none or on any failure.
   */
  async observed(harness: string, event: string, payload: Record<string, unknown>): Promise<string> {
    const reply = await this.call("plugin_event", { harness, event, payload, env: {} });
    return reply.ok && typeof reply.result.text === "string" ? reply.result.text : "";
  }

  track(key: string, info: Record<string, unknown>): void {
    this.sessions.set(key, info);
  }

  forget(key: string): void {
    this.sessions.delete(key);
    this.registered.delete(key);
  }

  register(key: string): Promise<boolean> {
    const known = this.registered.get(key);
    if (known) return known;
    const info = this.sessions.get(key);
    if (!info) return Promise.resolve(false);
    const attempt = this.call("register", { session: info, push: true }).then((reply) => {
      if (!reply.ok && this.registered.get(key) === attempt) this.registered.delete(key);
      return reply.ok;
    });
    this.registered.set(key, attempt);
    return attempt;
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.sessions.clear();
    this.socket?.destroy();
  }
}

// The sidecar defangs bodies, so "<hive-message " only ever starts a frame: splitting there
// recovers each message's own frame, keyed by its id attribute.
function framesById(all: string): Map<string, string> {
  const frames = new Map<string, string>();
  for (const chunk of all.split(/\n\n(?=<hive-message )/)) {
    const match = /^<hive-message [^>\n]*?\bid="([^"]+)"/.exec(chunk);
    if (match?.[1]) frames.set(match[1], chunk);
  }
  return frames;
}

function readMail(result: Record<string, unknown>): Mail {
  const ids = strings(result.ids);
  const wake: string[] = [];
  if (Array.isArray(result.messages)) {
    for (const message of result.messages) {
      if (isRecord(message) && typeof message.id === "string" && message.fyi !== true) wake.push(message.id);
    }
  }
  return { ids, wake, text: text(result.text) };
}

/** The frames of `wanted`, or null when one of them cannot be cut out of the text. */
function framesOf(mail: Mail, wanted: string[]): string | null {
  const frames = framesById(mail.text);
  const parts: string[] = [];
  for (const id of wanted) {
    const frame = frames.get(id);
    if (frame === undefined) return null;
    parts.push(frame);
  }
  return parts.join("\n\n");
}
